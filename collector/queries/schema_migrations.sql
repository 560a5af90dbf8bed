-- Record of applied schema migrations (collector/schema/NNNN_*.sql), created before
-- the first migration runs. Several rows per version can exist if two collectors
-- migrated at once; readers group by version.
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version UInt32,
    name String,
    checksum String,
    applied_at_ns UInt64
)
ENGINE = MergeTree()
ORDER BY version
