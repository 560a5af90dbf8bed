-- The launch figures of one job's kernels (issue 29) that the views use, matched to
-- `kernels` rows by (rank, correlation, kernel_start_ns) in the collector (store::plugin ->
-- store::by_kernel: sorted there and met in the activities' order; an ORDER BY here cost
-- ClickHouse a sort of every row).
-- Served by the kernel_configs ORDER BY (job_id, rank, kernel_start_ns).
-- Binds: job_id.
SELECT rank, correlation, kernel_start_ns, blocks_per_sm, est_achieved_occupancy_pct
FROM kernel_configs
WHERE job_id = ?
