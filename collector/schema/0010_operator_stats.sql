-- Operator view of imported and daemon Kineto traces (issue 29): one row per
-- (rank, operator name, call stack) of a trace file, as the importer computes it
-- (rankscope.v1.OperatorStat; definitions in rankscope_analysis::optree, the PyTorch
-- Profiler TensorBoard plugin 0.4.3's Operator view). ts_ns is when the collector
-- received the batch (a trace file's rows share it).
-- ORDER BY (job_id, rank, name) serves one job's operators per rank.
CREATE TABLE IF NOT EXISTS operator_stats
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    name String,
    call_stack String,
    calls UInt64,
    host_self_ns Int64,
    host_total_ns UInt64,
    device_self_ns UInt64,
    device_total_ns UInt64,
    tc_self_ns UInt64,
    tc_total_ns UInt64,
    tc_eligible UInt8,
    runtime_ns UInt64,
    host_total_min_ns UInt64,
    host_total_max_ns UInt64,
    device_total_min_ns UInt64,
    device_total_max_ns UInt64,
    ts_ns UInt64,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, name);
