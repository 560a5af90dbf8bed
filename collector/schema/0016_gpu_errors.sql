-- Migration 0016 (issue 37): the GPU error counts the fleet view shows as hardware
-- evidence (critical Xid events, ECC errors, PCIe replays).
-- A separate table, not columns of gpu_samples: ClickHouse 18.16 has no
-- ADD COLUMN IF NOT EXISTS, and migrations must be re-runnable.
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- gpu_error_samples: one row per GPU sample whose interval saw an error: critical Xid
-- events, or an increase of the ECC or PCIe replay totals (the agent's `*_new`
-- counts). Sparse: a healthy GPU writes nothing, so a window's read costs its errors,
-- not its GPUs or samples. Written with gpu_samples, same ingest identity.
-- ORDER BY (node, uuid, ts_ns) serves queries/fleet_gpu_counters.sql (every GPU's
-- errors in a window) and one GPU's errors over time.
CREATE TABLE IF NOT EXISTS gpu_error_samples
(
    node String,
    uuid String,
    gpu_index UInt32,
    ts_ns UInt64,
    period_ns UInt64,
    xid_errors UInt32,
    last_xid Nullable(UInt32),
    ecc_corrected UInt64,
    ecc_uncorrected UInt64,
    pcie_replays UInt64,
    ecc_corrected_total Nullable(UInt64),
    ecc_uncorrected_total Nullable(UInt64),
    pcie_replays_total Nullable(UInt64),
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (node, uuid, ts_ns);
