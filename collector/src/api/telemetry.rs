//! Telemetry route: `GET /api/v1/gpus?node=&job=&since_ns=`, the latest
//! sample of every GPU.
//!
//! In: optional `node` (one node), `job` (the GPUs the job's ranks were
//! mapped to, each at its last sample while the job ran there) and
//! `since_ns` (without `job`: GPUs sampled since then; default the last 10
//! minutes). Out: `{"gpus": [GpuOut]}`, ordered by node and GPU index;
//! metrics a GPU does not report are `null`.

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};
use crate::store::telemetry::rows::GpuSampleRow;

/// Default look-back of `gpus` without `job` or `since_ns`.
const DEFAULT_WINDOW_NS: u64 = 600_000_000_000;

/// Query of the gpus route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpusQuery {
    node: Option<String>,
    job: Option<String>,
    since_ns: Option<u64>,
}

/// A compute process on a GPU.
#[derive(Debug, Serialize)]
pub struct ProcessOut {
    pid: u32,
    used_memory_bytes: Option<u64>,
}

/// A rank mapped to a GPU.
#[derive(Debug, Serialize)]
pub struct RankOut {
    job: String,
    rank: u32,
}

/// The latest sample of one GPU.
#[derive(Debug, Serialize)]
pub struct GpuOut {
    node: String,
    gpu_index: u32,
    uuid: String,
    name: String,
    pci_bus_id: String,
    /// `ok`, `lost` or `error`.
    state: String,
    error: String,
    ts_ns: u64,
    period_ns: u64,
    gpu_util_pct: Option<f32>,
    mem_util_pct: Option<f32>,
    sm_active_pct: Option<f32>,
    sm_occupancy_pct: Option<f32>,
    tensor_active_pct: Option<f32>,
    dram_active_pct: Option<f32>,
    mem_used_bytes: Option<u64>,
    mem_total_bytes: Option<u64>,
    power_w: Option<f32>,
    power_limit_w: Option<f32>,
    temp_c: Option<f32>,
    sm_clock_mhz: Option<u32>,
    sm_clock_max_mhz: Option<u32>,
    mem_clock_mhz: Option<u32>,
    mem_clock_max_mhz: Option<u32>,
    /// `null` when the GPU cannot report them, `[]` when none holds it back.
    throttle_reasons: Option<Vec<String>>,
    pcie_tx_bytes_per_s: Option<u64>,
    pcie_rx_bytes_per_s: Option<u64>,
    nvlink_tx_bytes_per_s: Option<u64>,
    nvlink_rx_bytes_per_s: Option<u64>,
    ecc_corrected_total: Option<u64>,
    ecc_uncorrected_total: Option<u64>,
    xid_errors: Option<u32>,
    last_xid: Option<u32>,
    processes: Vec<ProcessOut>,
    ranks: Vec<RankOut>,
}

/// The label of the `gpu_samples.state` Enum8 value (collector/schema/0004).
fn state_name(state: i8) -> &'static str {
    match state {
        1 => "ok",
        2 => "lost",
        3 => "error",
        _ => "unspecified",
    }
}

impl From<GpuSampleRow> for GpuOut {
    fn from(r: GpuSampleRow) -> Self {
        let processes = r
            .process_pids
            .iter()
            .enumerate()
            .map(|(i, pid)| ProcessOut {
                pid: *pid,
                used_memory_bytes: r.process_mem_bytes.get(i).copied().flatten(),
            })
            .collect();
        let ranks = r
            .rank_jobs
            .into_iter()
            .zip(r.rank_ids)
            .map(|(job, rank)| RankOut { job, rank })
            .collect();
        Self {
            throttle_reasons: r.throttle_mask.map(|_| r.throttle_reasons),
            node: r.node,
            gpu_index: r.gpu_index,
            uuid: r.uuid,
            name: r.name,
            pci_bus_id: r.pci_bus_id,
            state: state_name(r.state).to_owned(),
            error: r.error,
            ts_ns: r.ts_ns,
            period_ns: r.period_ns,
            gpu_util_pct: r.gpu_util_pct,
            mem_util_pct: r.mem_util_pct,
            sm_active_pct: r.sm_active_pct,
            sm_occupancy_pct: r.sm_occupancy_pct,
            tensor_active_pct: r.tensor_active_pct,
            dram_active_pct: r.dram_active_pct,
            mem_used_bytes: r.mem_used_bytes,
            mem_total_bytes: r.mem_total_bytes,
            power_w: r.power_w,
            power_limit_w: r.power_limit_w,
            temp_c: r.temp_c,
            sm_clock_mhz: r.sm_clock_mhz,
            sm_clock_max_mhz: r.sm_clock_max_mhz,
            mem_clock_mhz: r.mem_clock_mhz,
            mem_clock_max_mhz: r.mem_clock_max_mhz,
            pcie_tx_bytes_per_s: r.pcie_tx_bytes_per_s,
            pcie_rx_bytes_per_s: r.pcie_rx_bytes_per_s,
            nvlink_tx_bytes_per_s: r.nvlink_tx_bytes_per_s,
            nvlink_rx_bytes_per_s: r.nvlink_rx_bytes_per_s,
            ecc_corrected_total: r.ecc_corrected_total,
            ecc_uncorrected_total: r.ecc_uncorrected_total,
            xid_errors: r.xid_errors,
            last_xid: r.last_xid,
            processes,
            ranks,
        }
    }
}

pub(super) async fn gpus(
    State(st): State<ApiState>,
    Query(q): Query<GpusQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let job = q.job.as_deref().filter(|j| !j.is_empty());
    let node = q.node.as_deref().unwrap_or("");
    let since = q
        .since_ns
        .unwrap_or_else(|| crate::service::now_ns().saturating_sub(DEFAULT_WINDOW_NS));
    let rows = st.store.gpus_latest(job, node, since).await?;
    if let Some(job) = job {
        st.require_job(job, rows.is_empty()).await?;
    }
    let out: Vec<GpuOut> = rows.into_iter().map(GpuOut::from).collect();
    Ok(Json(serde_json::json!({ "gpus": out })))
}

#[cfg(test)]
mod tests {
    use super::state_name;

    #[test]
    fn state_names_are_the_schema_enum_labels() {
        let schema = include_str!("../../schema/0004_telemetry.sql");
        let enum8 = "state Enum8('unspecified' = 0, 'ok' = 1, 'lost' = 2, 'error' = 3)";
        assert!(
            schema.contains(enum8),
            "gpu_samples.state changed: update state_name"
        );
        for (v, label) in [(0, "unspecified"), (1, "ok"), (2, "lost"), (3, "error")] {
            assert_eq!(state_name(v), label);
        }
    }
}
