-- Operator summaries of imported Kineto traces (collector/src/traces.rs): what
-- `rankscope trace-diff` compares.

-- trace_ops: calls and self time per (trace, rank, step, category, name).
-- ORDER BY (job_id, trace_id, rank, category, name, step) serves one trace's diff.
CREATE TABLE IF NOT EXISTS trace_ops
(
    job_id String,
    trace_id String,
    rank UInt32,
    step Int64,
    category LowCardinality(String),
    name String,
    calls UInt64,
    self_ns UInt64,
    stored_ns UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(stored_ns, 1000000000), 'UTC'))
ORDER BY (job_id, trace_id, rank, category, name, step);
