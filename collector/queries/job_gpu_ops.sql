-- Every GPU activity (kernel, memcpy, memset) of one job with its stream,
-- correlation and bytes, per rank in time order: the input of the kernel
-- breakdown, idle-time breakdown, queue length and memcpy summary. The name
-- travels as its cityHash64 (job_gpu_op_names.sql maps it back).
-- Served by the kernels ORDER BY (job_id, rank, start_ns).
-- Binds: job_id.
SELECT rank, toInt8(kind) AS kind, cityHash64(name) AS name_hash, stream, start_ns, end_ns, correlation, bytes
FROM kernels
WHERE job_id = ?
-- Ties broken to a total order: ClickHouse versions order equal keys differently.
ORDER BY rank, start_ns, stream, end_ns, correlation
