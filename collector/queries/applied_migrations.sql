-- Applied migrations with every checksum recorded for them.
SELECT
    version,
    any(name) AS name,
    groupUniqArray(checksum) AS checksums
FROM schema_migrations
GROUP BY version
ORDER BY version
