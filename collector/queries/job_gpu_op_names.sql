-- The distinct GPU activity names of one job by their cityHash64, which
-- job_gpu_ops.sql sends instead of the name on every row (at 1,024 ranks x
-- 100 steps the names were 407 of its 560 MB). Two names with one hash make
-- the collector read job_gpu_ops_named.sql instead (store::gpu_ops).
-- Binds: job_id.
SELECT cityHash64(name) AS name_hash, name
FROM kernels
WHERE job_id = ?
GROUP BY name
