-- Per-node GPU (NVML) and host samples from the agents. No writer yet: the schema is
-- here so later releases only append migrations. Metrics a device may not report are
-- Nullable. Partitioned by the UTC day of ts_ns like every table.

-- gpu_samples: one row per GPU per sample interval.
-- ORDER BY (node, gpu_index, ts_ns) serves per-GPU time series of one node in a time
-- window (utilisation, memory, power next to a job's steps).
CREATE TABLE IF NOT EXISTS gpu_samples
(
    node String,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64,
    ts_ns UInt64,
    gpu_index UInt32,
    uuid String,
    name LowCardinality(String),
    gpu_util_pct Nullable(Float32),
    mem_util_pct Nullable(Float32),
    sm_active_pct Nullable(Float32),
    sm_occupancy_pct Nullable(Float32),
    mem_used_bytes Nullable(UInt64),
    mem_total_bytes Nullable(UInt64),
    power_w Nullable(Float32),
    temp_c Nullable(Float32),
    sm_clock_mhz Nullable(UInt32),
    mem_clock_mhz Nullable(UInt32),
    throttle_reasons Array(String)
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, gpu_index, ts_ns);

-- host_samples: one row per node per sample interval.
-- ORDER BY (node, ts_ns) serves per-node host time series in a time window.
CREATE TABLE IF NOT EXISTS host_samples
(
    node String,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64,
    ts_ns UInt64,
    cpu_util_pct Nullable(Float32),
    load1 Nullable(Float32),
    mem_used_bytes Nullable(UInt64),
    mem_available_bytes Nullable(UInt64)
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, ts_ns);
