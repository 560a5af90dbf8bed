-- Operator view by input shape (issue 29): a traced rank's operators grouped by
-- (name, input shape), the TensorBoard plugin 0.4.3's "Operator + Input Shape" table
-- (rankscope.v1.OperatorStat with by_shape; the same figures as operator_stats, whose
-- rows group by (name, call stack)). input_shape: the op's `Input Dims` as Python
-- prints the list, '[]' when it has none as the plugin does (traces taken with
-- record_shapes=True have them).
-- A separate table: ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, and migrations
-- must be re-runnable.
-- ts_ns: when the collector received the batch.
-- ORDER BY (job_id, rank, name, input_shape) serves `rankscope ops --group-by shape`
-- (one job's rows, by rank and operator).
CREATE TABLE IF NOT EXISTS operator_shapes
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    name String,
    input_shape String,
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
ORDER BY (job_id, rank, name, input_shape);
