//! The fleet view's GPU error counters (issue 37): per GPU over a window,
//! critical Xid events and the increase of the ECC and PCIe replay totals.
//!
//! In: the window's start, ns. Out: [`GpuCounters`], one per GPU with an
//! error in the window. Reads only `gpu_error_samples` (migration 0016),
//! which holds just the samples whose interval saw an error (the agent's
//! per-interval counts), so its cost follows the window's errors, not its
//! GPUs or samples.

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const COUNTERS_SQL: QueryFile = query_file!("fleet_gpu_counters");

/// One GPU's error counters over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Row, Deserialize)]
pub struct GpuCounters {
    pub node: String,
    pub uuid: String,
    /// Critical Xid events.
    pub xid_errors: u64,
    /// Corrected ECC errors (increase of the volatile total).
    pub ecc_corrected_errors: u64,
    /// Uncorrected ECC errors (increase of the volatile total).
    pub ecc_uncorrected_errors: u64,
    /// PCIe replays (increase of the replay counter).
    pub pcie_replays: u64,
}

impl Store {
    /// Each GPU's errors in the samples taken since `since_ns`.
    pub async fn fleet_gpu_counters(&self, since_ns: u64) -> Result<Vec<GpuCounters>, StoreError> {
        self.read(COUNTERS_SQL)
            .bind(since_ns)
            .fetch_all()
            .await
            .map_err(StoreError::query(COUNTERS_SQL.name))
    }
}
