-- job_gpu_ops.sql with the name on every row: read only when two of the
-- job's names share a cityHash64 (store::gpu_ops).
-- Every GPU activity (kernel, memcpy, memset) of one job with its stream,
-- correlation and bytes, per rank in time order: the input of the kernel
-- breakdown, idle-time breakdown, queue length and memcpy summary.
-- Served by the kernels ORDER BY (job_id, rank, start_ns).
-- Binds: job_id.
SELECT rank, toInt8(kind) AS kind, name, stream, start_ns, end_ns, correlation, bytes
FROM kernels
WHERE job_id = ?
-- Ties broken to a total order: ClickHouse versions order equal keys differently.
ORDER BY rank, start_ns, stream, end_ns, correlation
