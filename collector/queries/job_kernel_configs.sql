-- The launch figures of one job's kernels (issue 29) that the views use, matched to
-- `kernels` rows by (rank, correlation, kernel_start_ns) in the collector (store::plugin,
-- a hash map: no ORDER BY, which cost a sort of every row at 1,024 ranks x 100 steps).
-- Served by the kernel_configs ORDER BY (job_id, rank, kernel_start_ns).
-- Binds: job_id.
SELECT rank, correlation, kernel_start_ns, blocks_per_sm, est_achieved_occupancy_pct
FROM kernel_configs
WHERE job_id = ?
