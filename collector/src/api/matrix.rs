//! The step-range routes behind the web UI's job page:
//! `GET /api/v1/jobs/{job}/matrix?from_step=&to_step=&last=&fields=` (one
//! column per field over every (rank, step) of a step range: the heatmap,
//! the GPU charts) and `GET /api/v1/jobs/{job}/collectives/steps?from_step=
//! &to_step=&last=` (collective statistics step by step: the busbw chart).
//!
//! The breakdown route answers one object of ~30 fields per (step, rank);
//! at 1,024 ranks x 200 steps that is ~150 MB of JSON. The matrix answers the
//! few columns a view draws, as flat arrays (~2 MB per column there).
//!
//! Step range: `last=N` (the last N steps with breakdowns), or `from_step` /
//! `to_step` (defaults: 0 and the last step with a breakdown), or neither
//! (the last [`DEFAULT_STEPS`]). A range wider than [`MAX_STEPS`] steps, an
//! empty one (`from_step > to_step`), `last=0`, `last` together with a bound
//! and an unknown field are 400s naming the problem; an unknown job is a 404.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};
use crate::store::analytics::StepBreakdownRow;
use crate::store::telemetry::StepGpu;

/// Most steps one request may span.
pub const MAX_STEPS: u64 = 1_000;
/// Steps served when no range is given.
pub const DEFAULT_STEPS: u64 = 200;

/// Fields of the matrix route: the `step_breakdown` columns, then the GPU
/// telemetry of the rank's GPUs averaged over the step (`StepGpu`).
const BREAKDOWN_FIELDS: [&str; 13] = [
    "step_time_ns",
    "gpu_span_ns",
    "gpu_busy_ns",
    "idle_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "non_compute_ns",
    "dataloader_ns",
    "comm_wait_ns",
    "comm_transfer_ns",
];
const GPU_FIELDS: [&str; 5] = [
    "gpu_util_pct",
    "sm_active_pct",
    "sm_clock_mhz",
    "power_w",
    "temp_c",
];
const DEFAULT_FIELDS: &str = "step_time_ns,compute_ns,comm_wait_ns";

/// Query of the step-range routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeQuery {
    from_step: Option<u64>,
    to_step: Option<u64>,
    last: Option<u64>,
    /// Matrix only: comma-separated field names.
    pub(super) fields: Option<String>,
}

fn bad(msg: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg)
}

/// Checks the query's range without the store: `Ok(None)` means "up to the
/// last stored step" (resolved by [`resolve`]).
fn check_range(q: &RangeQuery) -> Result<(), ApiError> {
    if q.last.is_some() && (q.from_step.is_some() || q.to_step.is_some()) {
        return Err(bad("give either last or from_step/to_step, not both".into()));
    }
    match (q.last, q.from_step, q.to_step) {
        (Some(0), ..) => Err(bad("last must be >= 1".into())),
        (Some(n), ..) if n > MAX_STEPS => Err(bad(format!(
            "last = {n} is above the cap of {MAX_STEPS} steps per request"
        ))),
        (_, Some(a), Some(b)) if a > b => Err(bad(format!(
            "empty step range: from_step = {a} is after to_step = {b}"
        ))),
        _ => Ok(()),
    }
}

/// The inclusive range to read, given the job's last step with a breakdown.
fn resolve(q: &RangeQuery, last_step: u64) -> Result<(u64, u64), ApiError> {
    let (from, to) = match (q.last, q.from_step, q.to_step) {
        (Some(n), ..) => (last_step.saturating_sub(n - 1), last_step),
        (None, None, None) => (last_step.saturating_sub(DEFAULT_STEPS - 1), last_step),
        (None, from, to) => (from.unwrap_or(0), to.unwrap_or(last_step)),
    };
    let span = to.saturating_sub(from).saturating_add(1);
    if from <= to && span > MAX_STEPS {
        return Err(bad(format!(
            "step range {from}..={to} holds {span} steps, above the cap of {MAX_STEPS} \
             per request: narrow from_step/to_step"
        )));
    }
    Ok((from, to))
}

/// Checks, resolves and 404s an unknown job; `None`: the job has no breakdown yet
/// (or the open range starts after its last step).
async fn range(st: &ApiState, job: &str, q: &RangeQuery) -> Result<Option<(u64, u64)>, ApiError> {
    check_range(q)?;
    let last = st.store.last_breakdown_step(job).await?;
    st.require_job(job, last.is_none()).await?;
    let Some(last) = last else {
        return Ok(None);
    };
    let (from, to) = resolve(q, last)?;
    Ok((from <= to).then_some((from, to)))
}

/// The parsed `fields` list: (name, whether it is a GPU field).
pub(super) fn parse_fields(fields: Option<&str>) -> Result<Vec<(&'static str, bool)>, ApiError> {
    let mut out = Vec::new();
    for f in fields.unwrap_or(DEFAULT_FIELDS).split(',').map(str::trim) {
        let known = BREAKDOWN_FIELDS
            .iter()
            .map(|n| (*n, false))
            .chain(GPU_FIELDS.iter().map(|n| (*n, true)))
            .find(|(n, _)| *n == f);
        match known {
            Some(k) if !out.contains(&k) => out.push(k),
            Some(_) => {}
            None => {
                return Err(bad(format!(
                    "unknown field {f:?}; fields are {} and {}",
                    BREAKDOWN_FIELDS.join(", "),
                    GPU_FIELDS.join(", ")
                )))
            }
        }
    }
    Ok(out)
}

fn breakdown_value(r: &StepBreakdownRow, field: &str) -> Option<u64> {
    Some(match field {
        "step_time_ns" => r.step_time_ns,
        "gpu_span_ns" => r.gpu_span_ns,
        "gpu_busy_ns" => r.gpu_busy_ns,
        "idle_ns" => r.idle_ns,
        "compute_ns" => r.compute_ns,
        "comm_ns" => r.comm_ns,
        "memory_ns" => r.memory_ns,
        "overlap_ns" => r.overlap_ns,
        "exposed_comm_ns" => r.exposed_comm_ns,
        "non_compute_ns" => r.non_compute_ns,
        "dataloader_ns" => r.dataloader_ns,
        "comm_wait_ns" => r.comm_wait_ns,
        "comm_transfer_ns" => r.comm_transfer_ns,
        _ => return None,
    })
}

fn gpu_value(g: &StepGpu, field: &str) -> Option<f64> {
    match field {
        "gpu_util_pct" => g.gpu_util_pct,
        "sm_active_pct" => g.sm_active_pct,
        "sm_clock_mhz" => g.sm_clock_mhz,
        "power_w" => g.power_w,
        "temp_c" => g.temp_c,
        _ => None,
    }
}

/// The matrix: `values[field][rank_index * steps.len() + step_index]`,
/// `null` where a (step, rank) has no row (or no GPU sample).
#[derive(Debug, Serialize)]
pub struct MatrixOut {
    job: String,
    from_step: Option<u64>,
    to_step: Option<u64>,
    /// Steps with at least one row, ascending.
    steps: Vec<u64>,
    /// Ranks with at least one row, ascending.
    ranks: Vec<u32>,
    /// Node of each rank (same order as `ranks`).
    nodes: Vec<String>,
    values: serde_json::Map<String, serde_json::Value>,
}

pub(super) async fn matrix(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<RangeQuery>,
) -> Result<Json<MatrixOut>, ApiError> {
    let fields = parse_fields(q.fields.as_deref())?;
    let range = range(&st, &job, &q).await?;
    let rows = match range {
        Some((from, to)) => {
            st.store
                .step_breakdowns(&job, Some(from), Some(to), None)
                .await?
        }
        None => Vec::new(),
    };
    let gpu = match range {
        Some((from, to)) if fields.iter().any(|f| f.1) => st.store.step_gpu(&job, from, to).await?,
        _ => Default::default(),
    };
    let mut steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
    steps.dedup(); // rows are ordered by step
    let mut ranks: Vec<(u32, &str)> = rows.iter().map(|r| (r.rank, r.node.as_str())).collect();
    ranks.sort_unstable();
    ranks.dedup_by_key(|r| r.0);
    let cells = steps.len() * ranks.len();
    let mut values = serde_json::Map::new();
    for (field, is_gpu) in &fields {
        let mut col = vec![serde_json::Value::Null; cells];
        for r in &rows {
            let (Ok(si), Ok(ri)) = (
                steps.binary_search(&r.step),
                ranks.binary_search_by_key(&r.rank, |x| x.0),
            ) else {
                continue;
            };
            col[ri * steps.len() + si] = if *is_gpu {
                gpu.get(&(r.step, r.rank))
                    .and_then(|g| gpu_value(g, field))
                    .into()
            } else {
                breakdown_value(r, field).into()
            };
        }
        values.insert((*field).to_owned(), serde_json::Value::Array(col));
    }
    Ok(Json(MatrixOut {
        from_step: range.map(|r| r.0),
        to_step: range.map(|r| r.1),
        nodes: ranks.iter().map(|r| r.1.to_owned()).collect(),
        ranks: ranks.iter().map(|r| r.0).collect(),
        steps,
        values,
        job,
    }))
}

/// One (process group, op, dtype, size bucket) over the steps.
#[derive(Debug, Serialize)]
pub struct StepSeriesOut {
    process_group: String,
    op: String,
    dtype: String,
    size_bucket: String,
    /// Per step of `steps`: nccl-tests bus bandwidth, null where the step has
    /// no such call (or no duration).
    busbw_gbps: Vec<Option<f64>>,
    algbw_gbps: Vec<Option<f64>>,
    /// Per step: summed wait and transfer time over the ranks, ns.
    wait_ns: Vec<u64>,
    transfer_ns: Vec<u64>,
}

pub(super) async fn collective_steps(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<RangeQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if q.fields.is_some() {
        return Err(bad("fields is a parameter of the matrix route only".into()));
    }
    let range = range(&st, &job, &q).await?;
    let per_step = match range {
        Some((from, to)) => st.store.step_collective_stats(&job, from, to).await?,
        None => Vec::new(),
    };
    let steps: Vec<u64> = per_step.iter().map(|s| s.0).collect();
    let mut series: std::collections::BTreeMap<(String, String, String, u64), StepSeriesOut> =
        Default::default();
    for (i, (_, stats)) in per_step.into_iter().enumerate() {
        for s in stats {
            let key = (
                s.process_group.clone(),
                s.op.as_str().to_owned(),
                s.dtype.clone(),
                s.size_bucket.lower_bytes,
            );
            let e = series.entry(key).or_insert_with(|| StepSeriesOut {
                process_group: s.process_group.clone(),
                op: s.op.as_str().to_owned(),
                dtype: s.dtype.clone(),
                size_bucket: s.size_bucket.label(),
                busbw_gbps: vec![None; steps.len()],
                algbw_gbps: vec![None; steps.len()],
                wait_ns: vec![0; steps.len()],
                transfer_ns: vec![0; steps.len()],
            });
            e.busbw_gbps[i] = s.busbw_gbps;
            e.algbw_gbps[i] = s.algbw_gbps;
            e.wait_ns[i] = s.wait_ns_total;
            e.transfer_ns[i] = s.transfer_ns_total;
        }
    }
    Ok(Json(serde_json::json!({
        "job": job,
        "from_step": range.map(|r| r.0),
        "to_step": range.map(|r| r.1),
        "steps": steps,
        "series": series.into_values().collect::<Vec<_>>(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(from: Option<u64>, to: Option<u64>, last: Option<u64>) -> RangeQuery {
        RangeQuery {
            from_step: from,
            to_step: to,
            last,
            fields: None,
        }
    }

    fn msg(r: Result<impl std::fmt::Debug, ApiError>) -> String {
        let e = r.expect_err("an error");
        assert_eq!(e.0, StatusCode::BAD_REQUEST);
        e.1
    }

    #[test]
    fn ranges_resolve_against_the_last_step() {
        let ok = |q: RangeQuery, last| {
            check_range(&q).unwrap();
            resolve(&q, last).unwrap()
        };
        assert_eq!(ok(q(None, None, None), 999), (800, 999));
        assert_eq!(ok(q(None, None, None), 10), (0, 10));
        assert_eq!(ok(q(None, None, Some(5)), 10), (6, 10));
        assert_eq!(ok(q(Some(3), None, None), 10), (3, 10));
        assert_eq!(ok(q(None, Some(4), None), 10), (0, 4));
        assert_eq!(ok(q(Some(20), None, None), 10), (20, 10)); // empty: no rows
        assert_eq!(ok(q(Some(0), Some(999), None), 5_000), (0, 999));
    }

    #[test]
    fn bad_ranges_are_named() {
        assert!(msg(check_range(&q(Some(5), Some(4), None))).contains("empty step range"));
        assert!(msg(check_range(&q(None, None, Some(0)))).contains("last must be >= 1"));
        assert!(msg(check_range(&q(None, None, Some(1_001)))).contains("cap of 1000"));
        assert!(msg(check_range(&q(Some(1), None, Some(3)))).contains("not both"));
        let wide = msg(resolve(&q(Some(0), Some(1_000), None), 5_000));
        assert!(wide.contains("0..=1000 holds 1001 steps"), "{wide}");
        // An open range up to the last step counts too.
        assert!(msg(resolve(&q(Some(1), None, None), 5_000)).contains("1..=5000"));
    }

    #[test]
    fn fields_are_checked_and_deduplicated() {
        let f = parse_fields(None).unwrap();
        assert_eq!(
            f,
            vec![
                ("step_time_ns", false),
                ("compute_ns", false),
                ("comm_wait_ns", false)
            ]
        );
        let f = parse_fields(Some("power_w, compute_ns,power_w")).unwrap();
        assert_eq!(f, vec![("power_w", true), ("compute_ns", false)]);
        let e = msg(parse_fields(Some("compute_ns,bogus")));
        assert!(e.contains("unknown field \"bogus\""), "{e}");
        for f in BREAKDOWN_FIELDS {
            let row = StepBreakdownRow {
                step: 0,
                rank: 0,
                node: String::new(),
                step_time_ns: 1,
                gpu_span_ns: 2,
                gpu_busy_ns: 3,
                idle_ns: 4,
                compute_ns: 5,
                comm_ns: 6,
                memory_ns: 7,
                overlap_ns: 8,
                exposed_comm_ns: 9,
                non_compute_ns: 10,
                dataloader_ns: 11,
                comm_wait_ns: 12,
                comm_transfer_ns: 13,
            };
            assert!(breakdown_value(&row, f).is_some(), "{f}");
        }
        let g = StepGpu {
            gpu_util_pct: Some(1.0),
            sm_active_pct: Some(2.0),
            sm_clock_mhz: Some(3.0),
            power_w: Some(4.0),
            temp_c: Some(5.0),
            ..Default::default()
        };
        for f in GPU_FIELDS {
            assert!(gpu_value(&g, f).is_some(), "{f}");
        }
    }
}
