-- Start and length of every (step, rank) of one job in a step range: the windows
-- the breakdown's GPU telemetry is averaged over.
-- Binds, in order: job_id, first step, last step (inclusive).
SELECT step, rank, step_start_ns, step_time_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ? AND step <= ?
ORDER BY step, rank
