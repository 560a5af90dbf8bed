//! Row types of the telemetry tables (`collector/schema/0004_telemetry.sql`).
//!
//! In: rows filled by `convert::sample_rows` (agent samples) and by the stream
//! task (straggler evidence). Out: RowBinary INSERT data.
//! Invariants: field order and types match the columns of 0004 exactly (the
//! client runs with validation off; `collector/tests/store.rs` round-trips
//! them); `Option` is `Nullable` — a metric the device did not report stays
//! NULL, never 0. Sample rows carry their ingest identity.

use clickhouse::Row;
use serde::{Deserialize, Serialize};

/// `gpu_samples`: one GPU at one tick (`state` = proto GpuState number).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct GpuSampleRow {
    pub node: String,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub gpu_index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub state: i8,
    pub error: String,
    pub gpu_util_pct: Option<f32>,
    pub mem_util_pct: Option<f32>,
    pub sm_active_pct: Option<f32>,
    pub sm_occupancy_pct: Option<f32>,
    pub tensor_active_pct: Option<f32>,
    pub dram_active_pct: Option<f32>,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_w: Option<f32>,
    pub power_limit_w: Option<f32>,
    pub temp_c: Option<f32>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub mem_clock_max_mhz: Option<u32>,
    pub throttle_mask: Option<u64>,
    pub throttle_reasons: Vec<String>,
    pub pcie_tx_bytes_per_s: Option<u64>,
    pub pcie_rx_bytes_per_s: Option<u64>,
    pub nvlink_tx_bytes_per_s: Option<u64>,
    pub nvlink_rx_bytes_per_s: Option<u64>,
    pub ecc_corrected_total: Option<u64>,
    pub ecc_uncorrected_total: Option<u64>,
    pub xid_errors: Option<u32>,
    pub last_xid: Option<u32>,
    pub process_pids: Vec<u32>,
    pub process_mem_bytes: Vec<Option<u64>>,
    pub rank_jobs: Vec<String>,
    pub rank_ids: Vec<u32>,
}

/// `host_samples`: one node at one tick.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct HostSampleRow {
    pub node: String,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub cpu_util_pct: Option<f32>,
    pub cpu_core_util_pct: Vec<f32>,
    pub load1: Option<f32>,
    pub load5: Option<f32>,
    pub load15: Option<f32>,
    pub mem_total_bytes: Option<u64>,
    pub mem_used_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
    pub net_interfaces: Vec<String>,
    pub net_rx_bytes: Vec<u64>,
    pub net_tx_bytes: Vec<u64>,
}

/// `rank_gpu_samples`: a GPU sample as seen by one rank mapped to the GPU.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct RankGpuRow {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub gpu_index: u32,
    pub uuid: String,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub gpu_util_pct: Option<f32>,
    pub sm_active_pct: Option<f32>,
    pub sm_clock_mhz: Option<u32>,
    pub power_w: Option<f32>,
    pub temp_c: Option<f32>,
    pub throttle_mask: Option<u64>,
    pub throttle_reasons: Vec<String>,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `rank_process_samples`: a rank's process at one host tick.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct RankProcessRow {
    pub job_id: String,
    pub rank: u32,
    pub node: String,
    pub pid: u32,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub cpu_pct: Option<f32>,
    pub rss_bytes: Option<u64>,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `gpu_error_samples` (migration 0016): a GPU sample whose interval saw
/// an error (an Xid event, or an ECC / PCIe replay total that grew); the
/// counts are the interval's, the totals as sampled.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct GpuErrorRow {
    pub node: String,
    pub uuid: String,
    pub gpu_index: u32,
    pub ts_ns: u64,
    pub period_ns: u64,
    pub xid_errors: u32,
    pub last_xid: Option<u32>,
    pub ecc_corrected: u64,
    pub ecc_uncorrected: u64,
    pub pcie_replays: u64,
    pub ecc_corrected_total: Option<u64>,
    pub ecc_uncorrected_total: Option<u64>,
    pub pcie_replays_total: Option<u64>,
    pub agent_id: String,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// `straggler_evidence`: one version of a verdict's hardware evidence.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct EvidenceRow {
    pub job_id: String,
    pub rank: u32,
    pub first_step: u64,
    pub node: String,
    pub evidence: String,
    pub gpu_indexes: Vec<u32>,
    pub gpu_uuids: Vec<String>,
    pub sm_clock_mhz: Option<f64>,
    pub peer_sm_clock_mhz: Option<f64>,
    pub throttle_reasons: Vec<String>,
    pub temp_c: Option<f64>,
    pub peer_temp_c: Option<f64>,
    pub power_w: Option<f64>,
    pub peer_power_w: Option<f64>,
    pub samples: u32,
    pub peer_gpus: u32,
    pub first_seen_ns: u64,
    pub updated_ns: u64,
}

/// The telemetry rows of a [`super::super::RowSet`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryRows {
    pub gpu_samples: Vec<GpuSampleRow>,
    pub host_samples: Vec<HostSampleRow>,
    pub rank_gpu: Vec<RankGpuRow>,
    pub rank_process: Vec<RankProcessRow>,
    pub gpu_errors: Vec<GpuErrorRow>,
    /// Written by the stream task, not by ingest.
    pub evidence: Vec<EvidenceRow>,
}

impl TelemetryRows {
    /// Rows of all telemetry tables.
    pub fn len(&self) -> usize {
        self.gpu_samples.len()
            + self.host_samples.len()
            + self.rank_gpu.len()
            + self.rank_process.len()
            + self.gpu_errors.len()
            + self.evidence.len()
    }

    /// No telemetry rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
