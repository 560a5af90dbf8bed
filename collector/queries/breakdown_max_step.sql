-- Highest finalized step of a job (for `breakdown --last K`).
-- Binds: job_id.
SELECT max(step) AS step, count() AS n
FROM step_breakdown
WHERE job_id = ?
