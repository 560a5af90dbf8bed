-- Agent telemetry: NVML GPU samples and host samples (AgentBatch.gpu_samples /
-- host_samples), the per-rank views the step join and the straggler evidence read,
-- and the evidence itself.
--
-- gpu_samples and host_samples of 0002 were a sketch that nothing ever wrote; they are
-- replaced here (ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so an ALTER could
-- not be re-run after an interrupted migration; DROP IF EXISTS + CREATE IF NOT EXISTS
-- can, and the collector writes nothing before migrations complete).
-- A metric the device or OS cannot report is NULL, never 0. A sample describes the
-- interval (ts_ns - period_ns, ts_ns] of the agent's clock.

DROP TABLE IF EXISTS gpu_samples;

-- gpu_samples: one row per GPU per sampling tick, with the ranks the agent mapped to it.
-- ORDER BY (node, gpu_index, ts_ns) serves `rankscope gpus`: the latest sample of each
-- GPU of a node (queries/gpus_latest.sql) and per-GPU time series.
CREATE TABLE IF NOT EXISTS gpu_samples
(
    node String,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64,
    ts_ns UInt64,
    period_ns UInt64,
    gpu_index UInt32,
    uuid String,
    name LowCardinality(String),
    pci_bus_id String,
    state Enum8('unspecified' = 0, 'ok' = 1, 'lost' = 2, 'error' = 3),
    error String,
    gpu_util_pct Nullable(Float32),
    mem_util_pct Nullable(Float32),
    sm_active_pct Nullable(Float32),
    sm_occupancy_pct Nullable(Float32),
    tensor_active_pct Nullable(Float32),
    dram_active_pct Nullable(Float32),
    mem_used_bytes Nullable(UInt64),
    mem_total_bytes Nullable(UInt64),
    power_w Nullable(Float32),
    power_limit_w Nullable(Float32),
    temp_c Nullable(Float32),
    sm_clock_mhz Nullable(UInt32),
    sm_clock_max_mhz Nullable(UInt32),
    mem_clock_mhz Nullable(UInt32),
    mem_clock_max_mhz Nullable(UInt32),
    throttle_mask Nullable(UInt64),
    throttle_reasons Array(String),
    pcie_tx_bytes_per_s Nullable(UInt64),
    pcie_rx_bytes_per_s Nullable(UInt64),
    nvlink_tx_bytes_per_s Nullable(UInt64),
    nvlink_rx_bytes_per_s Nullable(UInt64),
    ecc_corrected_total Nullable(UInt64),
    ecc_uncorrected_total Nullable(UInt64),
    xid_errors Nullable(UInt32),
    last_xid Nullable(UInt32),
    process_pids Array(UInt32),
    process_mem_bytes Array(Nullable(UInt64)),
    rank_jobs Array(String),
    rank_ids Array(UInt32)
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, gpu_index, ts_ns);

DROP TABLE IF EXISTS host_samples;

-- host_samples: one row per node per sampling tick. Network arrays are parallel
-- (interface i moved net_rx_bytes[i] / net_tx_bytes[i] during the interval).
-- ORDER BY (node, ts_ns) serves per-node host time series in a time window.
CREATE TABLE IF NOT EXISTS host_samples
(
    node String,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64,
    ts_ns UInt64,
    period_ns UInt64,
    cpu_util_pct Nullable(Float32),
    cpu_core_util_pct Array(Float32),
    load1 Nullable(Float32),
    load5 Nullable(Float32),
    load15 Nullable(Float32),
    mem_total_bytes Nullable(UInt64),
    mem_used_bytes Nullable(UInt64),
    mem_available_bytes Nullable(UInt64),
    net_interfaces Array(String),
    net_rx_bytes Array(UInt64),
    net_tx_bytes Array(UInt64)
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, ts_ns);

-- rank_gpu_samples: the step-join columns of gpu_samples, one row per (GPU sample,
-- mapped rank), written with gpu_samples.
-- ORDER BY (job_id, rank, ts_ns) serves the breakdown join (queries/rank_gpu_window.sql:
-- one job's ranks in a time range) and `gpus --job J` (the GPUs a job ran on).
CREATE TABLE IF NOT EXISTS rank_gpu_samples
(
    job_id String,
    rank UInt32,
    node String,
    gpu_index UInt32,
    uuid String,
    ts_ns UInt64,
    period_ns UInt64,
    gpu_util_pct Nullable(Float32),
    sm_active_pct Nullable(Float32),
    sm_clock_mhz Nullable(UInt32),
    power_w Nullable(Float32),
    temp_c Nullable(Float32),
    throttle_mask Nullable(UInt64),
    throttle_reasons Array(String),
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, ts_ns);

-- rank_process_samples: CPU and RSS of one rank's process per host sampling tick.
-- ORDER BY (job_id, rank, ts_ns) serves per-rank process time series of one job.
CREATE TABLE IF NOT EXISTS rank_process_samples
(
    job_id String,
    rank UInt32,
    node String,
    pid UInt32,
    ts_ns UInt64,
    period_ns UInt64,
    cpu_pct Nullable(Float32),
    rss_bytes Nullable(UInt64),
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, ts_ns);

-- straggler_evidence: hardware context of a compute straggler verdict (its GPUs run
-- at a lower SM clock than the job's other GPUs, or show throttle reasons they do
-- not), keyed like straggler_verdicts and replaced by later versions (FINAL on read).
-- first_seen_ns is the verdict's first_seen_ns, constant per key, so versions meet
-- in one partition.
-- ORDER BY (job_id, rank, first_step) serves `stragglers --job J` (joined to the
-- verdicts by rank and first_step).
CREATE TABLE IF NOT EXISTS straggler_evidence
(
    job_id String,
    rank UInt32,
    first_step UInt64,
    node String,
    evidence String,
    gpu_indexes Array(UInt32),
    gpu_uuids Array(String),
    sm_clock_mhz Nullable(Float64),
    peer_sm_clock_mhz Nullable(Float64),
    throttle_reasons Array(String),
    temp_c Nullable(Float64),
    peer_temp_c Nullable(Float64),
    power_w Nullable(Float64),
    peer_power_w Nullable(Float64),
    samples UInt32,
    peer_gpus UInt32,
    first_seen_ns UInt64,
    updated_ns UInt64
)
ENGINE = ReplacingMergeTree(updated_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(first_seen_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, first_step);
