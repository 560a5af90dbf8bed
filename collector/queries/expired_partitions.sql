-- Active partitions of our tables in a database, for retention. The caller keeps the
-- day partitions older than the cutoff and validates every id before using it.
-- Binds, in order: database, table names (array).
SELECT DISTINCT
    table,
    partition_id
FROM system.parts
WHERE database = ? AND has(?, table) AND active
ORDER BY table, partition_id
