-- Cluster mode: drops one day partition of a local (replicated) table on every shard
-- (retention). Distributed tables have no partitions of their own.
-- Binds, in order: database, local table, cluster (identifiers), partition id
-- (validated YYYYMMDD number).
ALTER TABLE ?.? ON CLUSTER ? DROP PARTITION ?
