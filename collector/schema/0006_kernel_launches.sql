-- Host-side launch calls of GPU activities (issue 17).
--
-- One row per kernel / memcpy / memset whose CUDA runtime or driver launch call is known
-- (rankscope.v1.Kernel.launch_*): the input of the idle-time breakdown (host_wait), the
-- CUDA queue length and the launch statistics. A table of its own rather than columns of
-- `kernels`: ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, and migrations must be
-- re-runnable. Rows are matched to `kernels` rows by (job_id, rank, correlation,
-- kernel_start_ns) in the collector.
-- ORDER BY (job_id, rank, kernel_start_ns) serves reading one job's launches per rank in
-- the kernels' order (queries/job_kernel_launches.sql).
CREATE TABLE IF NOT EXISTS kernel_launches
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    correlation UInt64,
    stream UInt32,
    kernel_start_ns UInt64,
    api LowCardinality(String),
    start_ns UInt64,
    end_ns UInt64,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(kernel_start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, kernel_start_ns);
