-- The host launch calls of one job's GPU activities, matched to `kernels` rows by
-- (rank, correlation, kernel_start_ns) in the collector (store::gpu_ops -> store::by_kernel:
-- sorted there and met in the activities' order; an ORDER BY here cost ClickHouse a sort of
-- every row).
-- Served by the kernel_launches ORDER BY (job_id, rank, kernel_start_ns).
-- Binds: job_id.
SELECT rank, correlation, kernel_start_ns, api, start_ns, end_ns
FROM kernel_launches
WHERE job_id = ?
