-- Alert transitions (collector/src/alert): one row per firing and per resolution.

-- alerts: append-only history of alert transitions.
-- ORDER BY (job_id, started_at_ns, rule, rank) serves `rankscope alerts --job J`
-- (one job's alerts in time order) and groups the two transitions of one alert.
CREATE TABLE IF NOT EXISTS alerts
(
    job_id String,
    rule LowCardinality(String),
    rank Int64,
    node String,
    severity LowCardinality(String),
    state Enum8('firing' = 1, 'resolved' = 2),
    started_at_ns UInt64,
    resolved_at_ns UInt64,
    transition_ns UInt64,
    summary String,
    evidence String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(started_at_ns, 1000000000), 'UTC'))
ORDER BY (job_id, started_at_ns, rule, rank);
