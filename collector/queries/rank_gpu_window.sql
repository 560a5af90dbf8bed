-- GPU samples mapped to one job's ranks in a time range, per rank in time order.
-- Binds, in order: job_id, first ts_ns, last ts_ns (inclusive).
SELECT rank, ts_ns, period_ns, gpu_util_pct, sm_active_pct, sm_clock_mhz, power_w,
       temp_c, throttle_reasons
FROM rank_gpu_samples
WHERE job_id = ? AND ts_ns >= ? AND ts_ns <= ?
ORDER BY rank, ts_ns
