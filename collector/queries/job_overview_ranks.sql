-- The kept overview figures of one job's ranks (migration 0018), every stored
-- computation: the collector keeps the latest per rank (computed_ns) and uses it only
-- when its input_n / input_sum equal job_overview_inputs.sql's now.
-- Served by the overview_ranks ORDER BY (job_id, rank). Binds: job_id.
SELECT rank, computed_ns, input_n, input_sum, steps, span_from, gpu_util_pct,
       sm_efficiency_pct, achieved_occupancy_pct, tensor_core_pct, roles_us, step_us,
       kernel_total_ns, gemm_conv_ns, launched, short_launches
FROM overview_ranks
WHERE job_id = ?
