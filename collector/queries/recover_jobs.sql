-- Jobs that stored a step marker since a time: the running jobs whose live
-- analytics a restarted collector rebuilds (collector/src/stream/recover.rs).
-- Binds: earliest marker ts_ns.
SELECT job_id, max(step) AS last_step
FROM steps
WHERE ts_ns >= ?
GROUP BY job_id
ORDER BY job_id
