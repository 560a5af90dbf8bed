-- The latest stored what-if gain of every straggler verdict of one job (migration
-- 0017): the route uses it for the verdict version with the same updated_ns and
-- last_step, and computes the others' from step_breakdown.
-- Binds: job_id.
SELECT rank, first_step, last_step, expected_gain_pct, updated_ns
FROM straggler_gains FINAL
WHERE job_id = ?
