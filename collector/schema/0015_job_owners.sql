-- Job ownership across collectors (issue 36; collector/src/ownership.rs).
--
-- job_owners: one row per (job, collector) holding the job's live state,
-- refreshed while it holds it (seen_ns). Read by ownership: a collector
-- taking a job refuses it while a collector of another schema version holds
-- it (seen recently), and a holder releases a job another collector took
-- after it (greater since_ns). ReplacingMergeTree(seen_ns) keeps the latest
-- refresh per (job, collector); readers aggregate, so unmerged rows are fine.
-- ORDER BY (job_id, collector) serves the per-job lookup.
CREATE TABLE IF NOT EXISTS job_owners
(
    job_id String,
    collector String,
    schema_version UInt32,
    since_ns UInt64,
    seen_ns UInt64
)
ENGINE = ReplacingMergeTree(seen_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(seen_ns, 1000000000), 'UTC'))
ORDER BY (job_id, collector);
