-- Fleet view, `--by gpu`: the GPUs the agent's NVML samples mapped to each
-- (job, rank) since a time, with the sampled time (rank-hours). Scans the
-- window's `rank_gpu_samples` (one row per rank per sampling tick): the one
-- fleet read whose cost grows with samples, not verdicts (ARCHITECTURE.md).
-- Binds: since_ns.
SELECT job_id, rank, uuid, toUInt64(sum(period_ns)) AS sampled_ns
FROM rank_gpu_samples
WHERE ts_ns >= ? AND uuid != ''
GROUP BY job_id, rank, uuid
ORDER BY job_id, rank, uuid
