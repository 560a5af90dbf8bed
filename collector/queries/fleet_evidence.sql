-- Fleet view: the hardware evidence of the verdicts first seen since a time
-- (clock below the job's other GPUs, throttle reasons), keyed like the verdicts.
-- Binds: since_ns.
SELECT job_id, rank, first_step, evidence, gpu_uuids, throttle_reasons,
       ifNull(sm_clock_mhz, 0) AS sm_clock_mhz,
       ifNull(peer_sm_clock_mhz, 0) AS peer_sm_clock_mhz
FROM straggler_evidence FINAL
WHERE first_seen_ns >= ?
ORDER BY job_id, rank, first_step
