//! Queries of the fleet view (`crate::fleet`): every job's rank placements,
//! verdicts, their hardware evidence and hang suspects since a time. Reads
//! only the `ranks`, `straggler_verdicts`, `straggler_evidence` and
//! `hang_suspects` tables and (`--by gpu` only) `rank_gpu_samples`; never
//! the raw event tables or per-step results, so its cost follows the number
//! of placements and verdicts in the window.

use clickhouse::Row;
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const PLACEMENTS_SQL: QueryFile = query_file!("fleet_placements");
const RANK_GPUS_SQL: QueryFile = query_file!("fleet_rank_gpus");
const VERDICTS_SQL: QueryFile = query_file!("fleet_verdicts");
const EVIDENCE_SQL: QueryFile = query_file!("fleet_evidence");
const HANGS_SQL: QueryFile = query_file!("fleet_hangs");

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

/// Everything the fleet view reads for one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetFacts {
    pub placements: Vec<FleetPlacement>,
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
        async fn all<T>(store: &Store, file: QueryFile, since_ns: u64) -> Result<Vec<T>, StoreError>
        where
            T: clickhouse::RowOwned + clickhouse::RowRead,
        {
            store
                .read(file)
                .bind(since_ns)
                .fetch_all()
                .await
                .map_err(StoreError::query(file.name))
        }
        let rank_gpus = if with_samples {
            all(self, RANK_GPUS_SQL, since_ns).await?
        } else {
            Vec::new()
        };
        Ok(FleetFacts {
            placements: all(self, PLACEMENTS_SQL, since_ns).await?,
            rank_gpus,
            verdicts: all(self, VERDICTS_SQL, since_ns).await?,
            evidence: all(self, EVIDENCE_SQL, since_ns).await?,
            hangs: all(self, HANGS_SQL, since_ns).await?,
        })
    }
}
