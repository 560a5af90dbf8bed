-- Fleet view, `--by gpu`: whether any rank's NVML samples mapped a GPU since a
-- time (then the GPUs come from the samples, fleet_rank_gpus.sql, and the
-- placements are read whole; else the rollup serves). Binds: since_ns.
SELECT toUInt64(count()) AS n
FROM (SELECT 1 FROM rank_gpu_samples WHERE ts_ns >= ? AND uuid != '' LIMIT 1)
