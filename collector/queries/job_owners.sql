-- The collectors that held a job's live state recently, per (job, collector):
-- their schema version, when they took the job and when they last said they
-- hold it (collector/src/ownership.rs; table job_owners, migration 0016).
-- Binds: earliest seen_ns.
SELECT job_id,
       collector,
       argMax(schema_version, seen_ns) AS schema_version,
       max(since_ns) AS since_ns,
       max(seen_ns) AS seen_ns
FROM job_owners
WHERE seen_ns >= ?
GROUP BY job_id, collector
ORDER BY job_id, collector
