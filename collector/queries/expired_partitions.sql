-- Active partitions of our tables in a database with the time of their last write,
-- for retention. The caller keeps the day partitions older than the cutoff that were
-- also last written before it, and validates every id before using it.
-- Binds, in order: database, table names (array).
SELECT
    table,
    partition_id,
    toUInt64(max(modification_time)) AS written_s
FROM system.parts
WHERE database = ? AND has(?, table) AND active
GROUP BY table, partition_id
ORDER BY table, partition_id
