-- Cluster mode: active partitions of our local (replicated) tables on every shard of
-- the cluster (one replica each, through the cluster() table function, which exists on
-- ClickHouse 18.16 and today), with the time of their last write, for retention.
-- The caller applies the same cutoffs as for a single server (expired_partitions.sql).
-- Binds, in order: cluster name, database, local table names (array).
SELECT
    table,
    partition_id,
    toUInt64(max(modification_time)) AS written_s
FROM cluster(?, system, parts)
WHERE database = ? AND has(?, table) AND active
GROUP BY table, partition_id
ORDER BY table, partition_id
