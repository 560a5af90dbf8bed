-- The distinct kernel names of one job (`rank_gpu_events.sql` maps their classes).
-- Binds: job_id.
SELECT DISTINCT name
FROM kernels
WHERE job_id = ?
