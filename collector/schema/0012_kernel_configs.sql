-- Launch configurations of GPU kernels (issue 29): the args Kineto records on a kernel
-- (rankscope.v1.KernelConfig: `blocks per SM`, `est. achieved occupancy %`, grid, block,
-- registers per thread, shared memory), the input of the kernel view's Mean Blocks Per SM /
-- Mean Est. Achieved Occupancy and the overview's Est. SM Efficiency / Est. Achieved
-- Occupancy (PyTorch Profiler TensorBoard plugin 0.4.3). A table of its own, like
-- kernel_launches: rows are matched to `kernels` rows by (job_id, rank, correlation,
-- kernel_start_ns) in the collector. -1 = not recorded for blocks_per_sm and
-- est_achieved_occupancy_pct (the plugin leaves those kernels out of its means).
-- ORDER BY (job_id, rank, kernel_start_ns) serves reading one job's configurations per rank
-- (queries/job_kernel_configs.sql).
CREATE TABLE IF NOT EXISTS kernel_configs
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    correlation UInt64,
    kernel_start_ns UInt64,
    blocks_per_sm Float64,
    est_achieved_occupancy_pct Float64,
    grid Array(UInt32),
    block Array(UInt32),
    registers_per_thread UInt32,
    shared_memory_bytes UInt32,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(kernel_start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, kernel_start_ns);
