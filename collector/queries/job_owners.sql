-- The collectors that held a job's live state recently, per (job, collector):
-- their schema version, when they took the job and when they last said they
-- hold it (collector/src/ownership.rs; table job_owners, migration 0016).
-- (Aliases differ from the columns: 18.16 resolves an alias first.)
-- Binds: earliest seen_ns.
SELECT job_id,
       collector,
       argMax(schema_version, seen_ns) AS version,
       max(since_ns) AS since,
       max(seen_ns) AS seen
FROM job_owners
WHERE seen_ns >= ?
GROUP BY job_id, collector
ORDER BY job_id, collector
