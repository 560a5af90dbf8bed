-- Migration 0016 (issue 37): the GPU error counters the fleet view shows as hardware
-- evidence (Xid events, ECC errors, PCIe replays), and their daily rollup, so
-- `GET /api/v1/fleet` reads one row per (GPU, day) instead of every sample.
-- A separate table, not columns of gpu_samples: ClickHouse 18.16 has no
-- ADD COLUMN IF NOT EXISTS, and migrations must be re-runnable.
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- gpu_counter_samples: one row per GPU sample that reported any error counter
-- (written with gpu_samples, same ingest identity). The totals are NVML's volatile
-- counters (since the driver loaded); xid_errors counts the critical Xid events of
-- the sample's interval. NULL: the GPU cannot report it.
-- ORDER BY (node, uuid, ts_ns) serves one GPU's counters in a time window.
CREATE TABLE IF NOT EXISTS gpu_counter_samples
(
    node String,
    uuid String,
    gpu_index UInt32,
    ts_ns UInt64,
    ecc_corrected_total Nullable(UInt64),
    ecc_uncorrected_total Nullable(UInt64),
    pcie_replays_total Nullable(UInt64),
    xid_errors Nullable(UInt32),
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, uuid, ts_ns);

-- gpu_counter_days: per GPU and UTC day, the Xid events summed and each total's
-- smallest and largest value (minIf / maxIf over the samples that reported it), as
-- aggregate states written by gpu_counter_days_mv at every INSERT into
-- gpu_counter_samples. One row per (node, uuid, day) once merged.
-- PARTITION BY day (YYYYMMDD) so retention drops it like the sample tables.
-- ORDER BY (node, uuid, day) serves queries/fleet_gpu_counters.sql (every GPU, the
-- window's days).
CREATE TABLE IF NOT EXISTS gpu_counter_days
(
    node String,
    uuid String,
    day UInt32,
    xid_errors AggregateFunction(sum, UInt64),
    ecc_corrected_min AggregateFunction(minIf, UInt64, UInt8),
    ecc_corrected_max AggregateFunction(maxIf, UInt64, UInt8),
    ecc_uncorrected_min AggregateFunction(minIf, UInt64, UInt8),
    ecc_uncorrected_max AggregateFunction(maxIf, UInt64, UInt8),
    pcie_replays_min AggregateFunction(minIf, UInt64, UInt8),
    pcie_replays_max AggregateFunction(maxIf, UInt64, UInt8)
)
ENGINE = AggregatingMergeTree()
PARTITION BY day
ORDER BY (node, uuid, day);

CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_counter_days_mv TO gpu_counter_days AS
SELECT node,
       uuid,
       toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC')) AS day,
       sumState(toUInt64(ifNull(xid_errors, 0))) AS xid_errors,
       minIfState(ifNull(ecc_corrected_total, 0), toUInt8(isNotNull(ecc_corrected_total))) AS ecc_corrected_min,
       maxIfState(ifNull(ecc_corrected_total, 0), toUInt8(isNotNull(ecc_corrected_total))) AS ecc_corrected_max,
       minIfState(ifNull(ecc_uncorrected_total, 0), toUInt8(isNotNull(ecc_uncorrected_total))) AS ecc_uncorrected_min,
       maxIfState(ifNull(ecc_uncorrected_total, 0), toUInt8(isNotNull(ecc_uncorrected_total))) AS ecc_uncorrected_max,
       minIfState(ifNull(pcie_replays_total, 0), toUInt8(isNotNull(pcie_replays_total))) AS pcie_replays_min,
       maxIfState(ifNull(pcie_replays_total, 0), toUInt8(isNotNull(pcie_replays_total))) AS pcie_replays_max
FROM gpu_counter_samples
GROUP BY node, uuid, day;
