-- The host launch calls of one job's GPU activities, matched to `kernels` rows by
-- (rank, correlation, kernel_start_ns) in the collector (store::gpu_ops, a hash map: no
-- ORDER BY, which cost a sort of every row at 1,024 ranks x 100 steps).
-- Served by the kernel_launches ORDER BY (job_id, rank, kernel_start_ns).
-- Binds: job_id.
SELECT rank, correlation, kernel_start_ns, api, start_ns, end_ns
FROM kernel_launches
WHERE job_id = ?
