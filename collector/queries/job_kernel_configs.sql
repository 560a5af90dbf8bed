-- The launch configurations of one job's kernels (issue 29), matched to `kernels` rows by
-- (rank, correlation, kernel_start_ns) in the collector (store::gpu_ops).
-- Served by the kernel_configs ORDER BY (job_id, rank, kernel_start_ns).
-- Binds: job_id.
SELECT rank, correlation, kernel_start_ns, blocks_per_sm, est_achieved_occupancy_pct,
       grid, block, registers_per_thread, shared_memory_bytes
FROM kernel_configs
WHERE job_id = ?
ORDER BY rank, kernel_start_ns
