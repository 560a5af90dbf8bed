-- Every GPU activity (kernel, memcpy, memset) of one job with its stream,
-- correlation and bytes: the input of the kernel
-- breakdown, idle-time breakdown, queue length and memcpy summary. The name
-- travels as its cityHash64 (job_gpu_op_names.sql maps it back).
-- Served by the kernels ORDER BY (job_id, rank, start_ns); no ORDER BY: store::gpu_ops sorts
-- each rank's rows (by rank, start_ns, stream, end_ns, correlation, then the rest), which
-- arrive as runs sorted by part, where ClickHouse sorted every row of the job.
-- Binds: job_id.
SELECT rank, toInt8(kind) AS kind, cityHash64(name) AS name_hash, stream, start_ns, end_ns, correlation, bytes
FROM kernels
WHERE job_id = ?
