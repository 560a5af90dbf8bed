//! Queries of the fleet view (`crate::fleet`): every job's rank placements,
//! verdicts, their hardware evidence and hang suspects since a time. Reads
//! only the `ranks`, `straggler_verdicts`, `straggler_evidence` and
//! `hang_suspects` tables and (`--by gpu` only) `rank_gpu_samples`; never
//! the raw event tables or per-step results, so its cost follows the number
//! of placements and verdicts in the window.
//!
//! [`Store::fleet_facts_by`] (issue 38) reads the rollup of migration 0014
//! (`fleet_unit_jobs`, written by a materialized view at every INSERT into
//! `ranks`) instead: each unit's exposure counted in SQL
//! ([`FleetFacts::exposure`]), and only the placements of the window's
//! verdicts and hang suspects, so what travels to the collector follows the
//! number of units and verdicts, not of placements. Both come from one
//! grouping of the rollup's rows (`fleet_units.sql`, with the verdict jobs'
//! world sizes by node): the cold answer's cost is that one pass. `--by gpu` while NVML
//! samples name GPUs falls back to the whole read ([`Store::fleet_facts`]).

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

mod units;

const PLACEMENTS_SQL: QueryFile = query_file!("fleet_placements");
const RANK_GPUS_SQL: QueryFile = query_file!("fleet_rank_gpus");
const VERDICTS_SQL: QueryFile = query_file!("fleet_verdicts");
const EVIDENCE_SQL: QueryFile = query_file!("fleet_evidence");
const HANGS_SQL: QueryFile = query_file!("fleet_hangs");
const UNITS_SQL: QueryFile = query_file!("fleet_units");
const WORLDS_SQL: QueryFile = query_file!("fleet_job_worlds");
const HAS_SAMPLES_SQL: QueryFile = query_file!("fleet_has_samples");

/// One (job, rank) seen since the window's start.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetPlacement {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    /// The rank's `gpu_uuid` label ("" when none).
    pub gpu_label: String,
    /// The rank's `link` label ("" when none).
    pub link_label: String,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// A GPU the agent's samples mapped to a (job, rank).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetRankGpu {
    pub job_id: String,
    pub rank: u32,
    pub uuid: String,
    pub sampled_ns: u64,
}

/// A straggler verdict's latest version.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetVerdict {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub first_step: u64,
    pub last_step: u64,
    pub steps_flagged: u64,
    pub slowdown: f64,
    pub cause: String,
    pub first_seen_ns: u64,
    /// Its last version (while active: the last step it was flagged in).
    pub updated_ns: u64,
}

/// Hardware evidence of a verdict.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetEvidence {
    pub job_id: String,
    pub rank: u32,
    pub first_step: u64,
    pub evidence: String,
    pub gpu_uuids: Vec<String>,
    pub throttle_reasons: Vec<String>,
    /// 0 when unknown.
    pub sm_clock_mhz: f64,
    /// 0 when unknown.
    pub peer_sm_clock_mhz: f64,
}

/// Hang suspects of a (job, rank).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetHang {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub suspects: u64,
}

/// One unit's exposure over the window, counted in SQL from the rollup.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetExposure {
    pub node: String,
    /// The GPU (`by = gpu`) or link (`by = link`); "" by node.
    pub unit: String,
    pub jobs: u64,
    /// Distinct (job, rank) on the unit.
    pub placements: u64,
    pub rank_ns: u64,
}

/// A job's world size (highest rank seen + 1).
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
pub struct FleetWorld {
    pub job_id: String,
    pub world: u32,
}

#[derive(Debug, Row, Deserialize)]
struct Count {
    n: u64,
}

/// Everything the fleet view reads for one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetFacts {
    /// Every placement of the window; with `exposure`, only the placements
    /// of the verdicts and hang suspects (to find their units).
    pub placements: Vec<FleetPlacement>,
    /// Per-unit exposure counted in SQL (the rollup path); `None`: count it
    /// from `placements`.
    pub exposure: Option<Vec<FleetExposure>>,
    /// World sizes of the verdicts' jobs (the rollup path; else from
    /// `placements`).
    pub worlds: Vec<FleetWorld>,
    pub rank_gpus: Vec<FleetRankGpu>,
    pub verdicts: Vec<FleetVerdict>,
    pub evidence: Vec<FleetEvidence>,
    pub hangs: Vec<FleetHang>,
}

impl Store {
    /// The fleet view's facts since `since_ns`; `with_samples` also reads
    /// the GPUs of the agent's samples (`--by gpu`).
    pub async fn fleet_facts(
        &self,
        since_ns: u64,
        with_samples: bool,
    ) -> Result<FleetFacts, StoreError> {
        let rank_gpus = async {
            if with_samples {
                all(self, RANK_GPUS_SQL, since_ns).await
            } else {
                Ok(Vec::new())
            }
        };
        // Independent reads, side by side.
        let (placements, rank_gpus, verdicts, evidence, hangs) = tokio::try_join!(
            all(self, PLACEMENTS_SQL, since_ns),
            rank_gpus,
            all(self, VERDICTS_SQL, since_ns),
            all(self, EVIDENCE_SQL, since_ns),
            all(self, HANGS_SQL, since_ns)
        )?;
        Ok(FleetFacts {
            placements,
            exposure: None,
            worlds: Vec::new(),
            rank_gpus,
            verdicts,
            evidence,
            hangs,
        })
    }
}

/// Every row of `file` bound to `since_ns`, timed ([`timed`]).
async fn all<T>(store: &Store, file: QueryFile, since_ns: u64) -> Result<Vec<T>, StoreError>
where
    T: clickhouse::RowOwned + clickhouse::RowRead,
{
    timed(file.name, store.read(file).bind(since_ns).fetch_all()).await
}

/// Awaits one read of `name`, logging (debug, target
/// `rankscope_collector::store::fleet`) its rows and milliseconds: the cold
/// answer's profile (`RUST_LOG=rankscope_collector::store::fleet=debug`).
async fn timed<T>(
    name: &'static str,
    read: impl std::future::Future<Output = clickhouse::error::Result<Vec<T>>>,
) -> Result<Vec<T>, StoreError> {
    let t = std::time::Instant::now();
    let rows = read.await.map_err(StoreError::query(name))?;
    tracing::debug!(
        query = name,
        rows = rows.len(),
        ms = t.elapsed().as_secs_f64() * 1e3,
        "fleet read"
    );
    Ok(rows)
}

/// `YYYYMMDD` of the first day of the UTC month holding `ns`: the rollup's
/// partitions (`month_end`) at or after it hold every row seen since `ns`.
pub fn month_start(ns: u64) -> u32 {
    let days = i64::try_from(ns / 86_400_000_000_000).unwrap_or(i64::MAX);
    let (year, month, _) = crate::civil::civil_from_days(days);
    u32::try_from(year * 10_000 + month * 100 + 1).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_start_is_the_first_of_the_utc_month() {
        assert_eq!(month_start(0), 19700101);
        // 2023-11-14T22:13:20Z
        assert_eq!(month_start(1_700_000_000_000_000_000), 20231101);
        // 2024-02-29T23:59:59Z, a leap day.
        assert_eq!(month_start(1_709_251_199_000_000_000), 20240201);
    }
}
