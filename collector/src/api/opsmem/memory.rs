//! `GET /api/v1/jobs/{job}/memory` (see the parent module). A job-wide
//! answer is bounded (`super::bounded`): the curve of the ranks with the
//! largest peaks, the largest operator rows, the (step, rank) peaks only
//! while few; `rank=R` or `full=true` answers every point of what it asks.
//! The reads are independent and run side by side.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::super::{ApiError, ApiState};
use super::bounded;
use crate::store::views::MemStat;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct MemoryQuery {
    rank: Option<u32>,
    ops: Option<bool>,
    curve: Option<bool>,
    /// The unbounded answer: every curve point, operator row and (step,
    /// rank) peak of every rank (the CLI's tables).
    full: Option<bool>,
    events: Option<bool>,
    limit: Option<u64>,
    offset: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct PeakRow {
    rank: u32,
    device: String,
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct MemOpRow {
    rank: u32,
    device: String,
    name: String,
    calls: u64,
    size_increase_bytes: i64,
    self_size_increase_bytes: i64,
    allocation_count: u64,
    self_allocation_count: u64,
    allocation_size_bytes: i64,
    self_allocation_size_bytes: i64,
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct CurvePoint {
    rank: u32,
    device: String,
    ts_ns: u64,
    allocated_bytes: i64,
    reserved_bytes: i64,
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct MemoryOut {
    job: String,
    rank: Option<u32>,
    peaks: Vec<PeakRow>,
    ops: Vec<MemOpRow>,
    /// Operator rows of the job (or rank), sent or not.
    ops_total: u64,
    curve: Vec<CurvePoint>,
    /// Curve points of the job (or rank), sent or not.
    curve_points_total: u64,
    /// `events=true`: a page of the `[memory]` events and their count.
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<Vec<super::events::EventRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events_total: Option<u64>,
    /// Per (step, rank) peaks while the job runs (no trace needed).
    live: super::live::Live,
    notes: Vec<String>,
}

/// `CPU` or `GPU{n}` (the plugin's device names).
pub(super) fn device_name(d: i32) -> String {
    if d < 0 {
        "CPU".to_owned()
    } else {
        format!("GPU{d}")
    }
}

/// The live view of `job` (`peaks` = its `peak` memory rows) and whether it
/// has RSS samples / SDK device peaks at all.
pub(in crate::api) async fn job_live(
    st: &ApiState,
    job: &str,
    peaks: &[MemStat],
    rank: Option<u32>,
) -> Result<(super::live::Live, bool, bool), ApiError> {
    let rss = st.store.job_rank_rss(job).await?;
    live_of(st, job, peaks, rss, rank).await
}

/// [`job_live`] from the job's RSS samples: the step windows and the nodes'
/// memory are read (side by side) only when there are RSS samples, the only
/// peaks that need them.
async fn live_of(
    st: &ApiState,
    job: &str,
    peaks: &[MemStat],
    rss: Vec<crate::store::views::RssSample>,
    rank: Option<u32>,
) -> Result<(super::live::Live, bool, bool), ApiError> {
    let sdk_peaks: Vec<MemStat> = peaks.iter().filter(|p| p.per_step != 0).cloned().collect();
    if rss.is_empty() && sdk_peaks.is_empty() {
        return Ok((super::live::Live::default(), false, false));
    }
    let (windows, nodes) = if rss.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        tokio::try_join!(
            st.store.job_step_windows(job),
            st.store.job_node_memory(job)
        )?
    };
    let live = super::live::live(&windows, &rss, &nodes, &sdk_peaks, rank);
    Ok((live, !rss.is_empty(), !sdk_peaks.is_empty()))
}

pub(in crate::api) async fn memory(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<MemoryQuery>,
) -> Result<Json<MemoryOut>, ApiError> {
    let keep = |r: &MemStat| q.rank.is_none_or(|k| k == r.rank);
    let full = q.full.unwrap_or(false);
    let want_curve = q.curve.unwrap_or(false) || q.rank.is_some();
    let store = &st.store;
    let bound = q.rank.is_none() && !full;
    // (rows, rows in all).
    let ops_read = async {
        if !q.ops.unwrap_or(false) {
            return Ok((Vec::new(), 0));
        }
        if bound {
            let (rows, total) = store
                .job_memory_ops_top(&job, bounded::OPS_ROWS as u64)
                .await?;
            return Ok((bounded::stored_order(rows), total));
        }
        let rows: Vec<MemStat> = store.job_memory_stats(&job, "op").await?;
        let rows: Vec<MemStat> = rows.into_iter().filter(keep).collect();
        let n = rows.len() as u64;
        Ok::<_, crate::store::StoreError>((rows, n))
    };
    // (points, points in all, whether some were left out).
    let curve_read = async {
        if !want_curve {
            return Ok((Vec::new(), 0, false));
        }
        if bound {
            let series = store.job_memory_series(&job).await?;
            let total: u64 = series.iter().map(|s| s.points).sum();
            return match bounded::choose(&series) {
                None => Ok((store.job_memory_stats(&job, "sample").await?, total, false)),
                Some(chosen) => {
                    let mut ranks: Vec<u32> = chosen.iter().map(|c| c.0).collect();
                    ranks.dedup();
                    let points = store.job_memory_series_points(&job, &ranks).await?;
                    Ok((bounded::chosen_curve(points, &chosen), total, true))
                }
            };
        }
        let rows: Vec<MemStat> = store.job_memory_stats(&job, "sample").await?;
        let rows: Vec<MemStat> = rows.into_iter().filter(keep).collect();
        let n = rows.len() as u64;
        Ok::<_, crate::store::StoreError>((rows, n, false))
    };
    let events_read = async {
        if q.events.unwrap_or(false) {
            super::events::events(&st, &job, q.rank, q.limit, q.offset)
                .await
                .map(Some)
        } else {
            Ok(None)
        }
    };
    let (peaks_all, (ops_all, ops_total), (samples, curve_points_total, curve_cut), rss, events) =
        tokio::try_join!(
            async { Ok::<_, ApiError>(store.job_memory_peaks(&job).await?) },
            async { Ok::<_, ApiError>(ops_read.await?) },
            async { Ok::<_, ApiError>(curve_read.await?) },
            async { Ok::<_, ApiError>(store.job_rank_rss(&job).await?) },
            events_read,
        )?;
    let (mut live, rss_seen, sdk_seen) = live_of(&st, &job, &peaks_all, rss, q.rank).await?;
    let traced = peaks_all.iter().any(|p| p.per_step == 0);
    if !traced && !rss_seen && !sdk_seen {
        st.require_job(&job, true).await?;
    }
    let mut notes = Vec::new();
    if !traced {
        notes.push(
            "no memory records: the job's traces have no [memory] events (take them with \
             profile_memory=True)"
                .to_owned(),
        );
    }
    let (events, events_total) = match events {
        Some((rows, total)) => {
            if total == 0 && traced {
                notes.push(
                    "no allocation/release events: the traces were imported by a rankscope that did \
                     not keep them; import them again"
                        .to_owned(),
                );
            }
            (Some(rows), Some(total))
        }
        None => (None, None),
    };
    let mut peaks: BTreeMap<(u32, i32), (i64, i64)> = BTreeMap::new();
    for r in peaks_all.iter().filter(|r| keep(r) && r.per_step == 0) {
        let p = peaks
            .entry((r.rank, r.device))
            .or_insert((i64::MIN, i64::MIN));
        p.0 = p.0.max(r.allocated_bytes);
        p.1 = p.1.max(r.reserved_bytes);
    }
    if let Some(rank) = q.rank {
        if peaks.is_empty() && live.max_rank.is_none() {
            let ranks = st.store.job_rank_list(&job).await?;
            if traced || rss_seen || !ranks.iter().any(|r| r.rank == rank) {
                let known: Vec<String> = ranks.iter().map(|r| r.rank.to_string()).collect();
                return Err(ApiError(
                    StatusCode::NOT_FOUND,
                    format!(
                        "job {job:?} has no memory records of rank {rank} (its ranks: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    if curve_cut {
        notes.push(format!(
            "curve: the {} ranks with the largest peaks, min/max down-sampled ({} of {curve_points_total} points); rank=R gives a rank's whole curve, full=true every rank's",
            bounded::CURVE_SERIES,
            samples.len()
        ));
    }
    if (ops_all.len() as u64) < ops_total {
        notes.push(format!(
            "ops: the {} rows with the largest size increase of {ops_total}; rank=R gives a rank's every row, full=true all",
            ops_all.len()
        ));
    }
    if bound && live.steps_len() > bounded::LIVE_STEPS {
        live.drop_steps();
        notes.push(
            "live.steps: left out of a job-wide answer of this size (live.steps_total counts them); rank=R gives a rank's, full=true every rank's"
                .to_owned(),
        );
    }
    let curve = samples
        .into_iter()
        .map(|r| CurvePoint {
            rank: r.rank,
            device: device_name(r.device),
            ts_ns: r.ts_ns,
            allocated_bytes: r.allocated_bytes,
            reserved_bytes: r.reserved_bytes,
        })
        .collect();
    let ops = ops_all
        .into_iter()
        .map(|r| MemOpRow {
            rank: r.rank,
            device: device_name(r.device),
            name: r.name,
            calls: r.calls,
            size_increase_bytes: r.size_increase_bytes,
            self_size_increase_bytes: r.self_size_increase_bytes,
            allocation_count: r.allocation_count,
            self_allocation_count: r.self_allocation_count,
            allocation_size_bytes: r.allocation_size_bytes,
            self_allocation_size_bytes: r.self_allocation_size_bytes,
        })
        .collect();
    Ok(Json(MemoryOut {
        job,
        rank: q.rank,
        peaks: peaks
            .into_iter()
            .map(|((rank, device), (a, r))| PeakRow {
                rank,
                device: device_name(device),
                peak_allocated_bytes: a,
                peak_reserved_bytes: r,
            })
            .collect(),
        ops,
        ops_total,
        curve,
        curve_points_total,
        events,
        events_total,
        live,
        notes,
    }))
}
