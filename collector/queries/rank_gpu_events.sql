-- Every GPU activity (kernel, memcpy, memset) of one job, per rank in time order:
-- the input of the per-rank temporal breakdown (HTA's, over the whole timeline).
-- Served by the kernels ORDER BY (job_id, rank, start_ns).
-- Binds: job_id.
SELECT rank, node, toInt8(kind) AS kind, name, start_ns, end_ns
FROM kernels
WHERE job_id = ?
ORDER BY rank, start_ns
