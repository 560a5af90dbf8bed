//! The fleet view's GPU error counters (issue 37): per GPU over a window,
//! critical Xid events and the increase of the ECC and PCIe replay totals.
//!
//! In: the window's start, ns. Out: [`GpuCounters`], one per GPU with a
//! figure above 0. Reads only the daily rollup of migration 0016
//! (`gpu_counter_days`, written by a materialized view at every INSERT into
//! `gpu_counter_samples`), so its cost follows GPUs × days, not samples; it
//! covers whole UTC days, from the day the window starts.

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
    /// Increase of the volatile corrected ECC total.
    pub ecc_corrected_errors: u64,
    /// Increase of the volatile uncorrected ECC total.
    pub ecc_uncorrected_errors: u64,
    /// Increase of the PCIe replay counter.
    pub pcie_replays: u64,
}

impl Store {
    /// The GPU error counters of the UTC days from `since_ns`'s on.
    pub async fn fleet_gpu_counters(&self, since_ns: u64) -> Result<Vec<GpuCounters>, StoreError> {
        self.read(COUNTERS_SQL)
            .bind(first_day(since_ns))
            .fetch_all()
            .await
            .map_err(StoreError::query(COUNTERS_SQL.name))
    }
}

/// `YYYYMMDD` of the UTC day holding `ns` (the rollup's `day`).
pub fn first_day(ns: u64) -> u32 {
    let days = i64::try_from(ns / 86_400_000_000_000).unwrap_or(i64::MAX);
    let (year, month, day) = crate::civil::civil_from_days(days);
    u32::try_from(year * 10_000 + month * 100 + day).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_day_is_the_utc_day() {
        assert_eq!(super::first_day(0), 19700101);
        // 2023-11-14T22:13:20Z
        assert_eq!(super::first_day(1_700_000_000_000_000_000), 20231114);
        // 2024-02-29T23:59:59Z, a leap day.
        assert_eq!(super::first_day(1_709_251_199_000_000_000), 20240229);
    }
}
