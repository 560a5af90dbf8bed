-- The host events with a CUDA `stream` argument (Triton launcher cpu_ops) of one job, per
-- rank in time order: the trace importer stores them as `other` spans on that stream with
-- device -2 (rankscope_kineto::HOST_STREAM_DEVICE), and HTA 0.5.0's kernel breakdown,
-- temporal breakdown and overlap count them as GPU work (store::gpu_ops). Served by the
-- spans ORDER BY (job_id, rank, start_ns). Binds: job_id.
SELECT rank, name, stream, start_ns, end_ns
FROM spans
WHERE job_id = ? AND category = 'other' AND device = -2
ORDER BY rank, start_ns, end_ns, name
