-- job_gpu_ops.sql with the name on every row: read only when two of the
-- job's names share a cityHash64 (store::gpu_ops).
-- Every GPU activity (kernel, memcpy, memset) of one job with its stream,
-- correlation and bytes: the input of the kernel
-- breakdown, idle-time breakdown, queue length and memcpy summary.
-- Served by the kernels ORDER BY (job_id, rank, start_ns); no ORDER BY: store::gpu_ops sorts
-- each rank's rows (by rank, start_ns, stream, end_ns, correlation, then the rest), which
-- arrive as runs sorted by part, where ClickHouse sorted every row of the job.
-- Binds: job_id.
SELECT rank, toInt8(kind) AS kind, name, stream, start_ns, end_ns, correlation, bytes
FROM kernels
WHERE job_id = ?
