-- Kineto traces requested through the collector (collector/src/traces.rs): one row per
-- state change of one (trace, rank): requested, delivered, captured, imported, failed.

-- trace_ranks: append-only history; the latest row of a (trace_id, rank) is its state.
-- ORDER BY (job_id, requested_at_ns, trace_id, rank, updated_at_ns) serves
-- `rankscope traces --job J` and the collector's reload of open traces at start-up.
CREATE TABLE IF NOT EXISTS trace_ranks
(
    job_id String,
    trace_id String,
    rank UInt32,
    node String,
    state LowCardinality(String),
    reason String,
    origin LowCardinality(String),
    requested_at_ns UInt64,
    updated_at_ns UInt64,
    duration_ms UInt64,
    iterations UInt64,
    first_step Int64,
    steps UInt64,
    events UInt64,
    pid Int32,
    subject Int64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(requested_at_ns, 1000000000), 'UTC'))
ORDER BY (job_id, requested_at_ns, trace_id, rank, updated_at_ns);
