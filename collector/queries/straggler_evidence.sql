-- The latest hardware evidence of every straggler verdict of one job.
-- Binds: job_id.
SELECT rank, first_step, evidence, gpu_indexes, gpu_uuids, sm_clock_mhz,
       peer_sm_clock_mhz, throttle_reasons, temp_c, peer_temp_c, power_w, peer_power_w,
       samples, peer_gpus
FROM straggler_evidence FINAL
WHERE job_id = ?
ORDER BY first_step, rank
