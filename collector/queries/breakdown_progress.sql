-- How far a job's analytics are: finalized (step, rank) breakdowns and the
-- highest finalized step (`rankscope import` waits on it). FINAL: a step
-- finalized again after a collector restart counts once.
-- Binds: job_id.
SELECT count() AS n, max(step) AS step
FROM step_breakdown FINAL
WHERE job_id = ?
