//! `GET /api/v1/jobs/{job}/ops` (see the parent module).

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::super::{ApiError, ApiState};
use crate::store::views::OpStat;

/// Largest `top`.
pub const MAX_TOP: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::api) struct OpsQuery {
    rank: Option<u32>,
    group_by: Option<String>,
    top: Option<usize>,
}

/// One frame of a call stack: `path/file.py(12): func`.
#[derive(Debug, Serialize, PartialEq)]
pub(in crate::api) struct Frame {
    file: String,
    line: u64,
    function: String,
}

/// Parses `file(line): function` (the plugin's front end does the same:
/// the text before the last `:`, `(\d+)$` on it).
fn frame(s: &str) -> Option<Frame> {
    let s = s.trim();
    let (head, func) = s.rsplit_once(':').unwrap_or((s, ""));
    let head = head.trim_end();
    let open = head.rfind('(')?;
    let line = head[open + 1..].strip_suffix(')')?.parse().ok()?;
    Some(Frame {
        file: head[..open].to_owned(),
        line,
        function: func.trim().to_owned(),
    })
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct OpRow {
    rank: u32,
    name: String,
    /// `group_by=stack`: the call stack, innermost first.
    #[serde(skip_serializing_if = "Option::is_none")]
    call_stack: Option<String>,
    /// `group_by=shape`: `Input Dims` as Python prints the list (`[]` when
    /// the operator has none, as the plugin).
    #[serde(skip_serializing_if = "Option::is_none")]
    input_shape: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frames: Option<Vec<Frame>>,
    calls: u64,
    host_self_us: f64,
    host_total_us: f64,
    device_self_us: f64,
    device_total_us: f64,
    tc_eligible: bool,
    tc_self_pct: f64,
    tc_total_pct: f64,
    /// Time of its own runtime calls (left out of host self).
    runtime_us: f64,
    host_avg_us: f64,
    host_min_us: f64,
    host_max_us: f64,
    device_avg_us: f64,
    device_min_us: f64,
    device_max_us: f64,
    host_ratio_pct: f64,
    device_ratio_pct: f64,
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct JobOpRow {
    name: String,
    /// `group_by=shape`: the input shape of this row's operators.
    #[serde(skip_serializing_if = "Option::is_none")]
    input_shape: Option<String>,
    ranks: usize,
    calls_median: f64,
    host_self_us_median: f64,
    host_self_us_max: f64,
    host_self_max_rank: u32,
    host_total_us_median: f64,
    device_self_us_median: f64,
    device_self_us_max: f64,
    device_self_max_rank: u32,
    device_total_us_median: f64,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(in crate::api) enum OpRows {
    Rank(Vec<OpRow>),
    Job(Vec<JobOpRow>),
}

#[derive(Debug, Serialize)]
pub(in crate::api) struct OpsOut {
    job: String,
    rank: Option<u32>,
    group_by: String,
    rows: OpRows,
    notes: Vec<String>,
}

impl OpsQuery {
    /// 400 for an unknown `group_by` or `top` outside 1..=[`MAX_TOP`].
    pub(in crate::api) fn check(&self) -> Result<(), ApiError> {
        if let Some(g) = &self.group_by {
            if !matches!(g.as_str(), "name" | "shape" | "stack") {
                return Err(bad(format!(
                    "group_by must be name, shape or stack, got {g:?}"
                )));
            }
        }
        if let Some(top) = self.top {
            if !(1..=MAX_TOP).contains(&top) {
                return Err(bad(format!("top must be 1..={MAX_TOP}, got {top}")));
            }
        }
        Ok(())
    }
}

fn bad(msg: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg)
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

fn pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        100.0 * a / b
    } else {
        0.0
    }
}

/// The median of `v` (mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Merges rows of one (rank, key).
fn merge(a: &mut OpStat, b: &OpStat) {
    a.calls += b.calls;
    a.host_self_ns += b.host_self_ns;
    a.host_total_ns += b.host_total_ns;
    a.device_self_ns += b.device_self_ns;
    a.device_total_ns += b.device_total_ns;
    a.tc_self_ns += b.tc_self_ns;
    a.tc_total_ns += b.tc_total_ns;
    a.tc_eligible |= b.tc_eligible;
    a.runtime_ns += b.runtime_ns;
    a.host_total_min_ns = a.host_total_min_ns.min(b.host_total_min_ns);
    a.host_total_max_ns = a.host_total_max_ns.max(b.host_total_max_ns);
    a.device_total_min_ns = a.device_total_min_ns.min(b.device_total_min_ns);
    a.device_total_max_ns = a.device_total_max_ns.max(b.device_total_max_ns);
}

pub(in crate::api) async fn ops(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<OpsQuery>,
) -> Result<Json<OpsOut>, ApiError> {
    q.check()?;
    let group_by = q.group_by.unwrap_or_else(|| "name".to_owned());
    let mut all = st.store.job_operator_stats(&job).await?;
    st.require_job(&job, all.is_empty()).await?;
    // `shape`: the (name, input shape) rows, their shape in `call_stack`.
    let shapes = if group_by == "shape" && !all.is_empty() {
        st.store.job_operator_shapes(&job).await?
    } else {
        Vec::new()
    };
    let by_shape = !shapes.is_empty();
    if by_shape {
        all = shapes;
    }
    let mut notes = Vec::new();
    if all.is_empty() {
        notes.push(
            "no operator records: import a Kineto trace of this job (rankscope import) or \
             take one with rankscope trace"
                .to_owned(),
        );
    }
    let by_stack = group_by == "stack";
    if group_by == "shape" && !by_shape && !all.is_empty() {
        notes.push(
            "the traces carry no input shapes (take them with record_shapes=True): rows are \
             grouped by operator name"
                .to_owned(),
        );
    }
    if by_stack && !all.iter().any(|r| !r.call_stack.is_empty()) && !all.is_empty() {
        notes.push(
            "the traces carry no call stacks (take them with with_stack=True): rows are \
             grouped by operator name"
                .to_owned(),
        );
    }
    // Group per (rank, name[, stack]).
    let mut groups: BTreeMap<(u32, String, String), OpStat> = BTreeMap::new();
    for r in all {
        if q.rank.is_some_and(|k| k != r.rank) {
            continue;
        }
        let key = (
            r.rank,
            r.name.clone(),
            if by_stack || by_shape {
                r.call_stack.clone()
            } else {
                String::new()
            },
        );
        match groups.get_mut(&key) {
            Some(g) => merge(g, &r),
            None => {
                groups.insert(key, r);
            }
        }
    }
    if let Some(rank) = q.rank {
        if groups.is_empty() && !notes.iter().any(|n| n.starts_with("no operator")) {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("job {job:?} has no operator records of rank {rank}"),
            ));
        }
    }
    let has_device = groups.values().any(|g| g.device_total_ns > 0);
    let mut totals: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for ((rank, _, _), g) in &groups {
        let t = totals.entry(*rank).or_default();
        t.0 += g.host_total_ns as f64;
        t.1 += g.device_total_ns as f64;
    }
    let rows: Vec<OpRow> = groups
        .into_iter()
        .map(|((rank, name, stack), g)| {
            let (ht, dt) = totals[&rank];
            let calls = g.calls.max(1) as f64;
            OpRow {
                rank,
                name,
                frames: by_stack.then(|| stack.split(';').filter_map(frame).collect()),
                input_shape: by_shape.then(|| stack.clone()),
                call_stack: by_stack.then_some(stack),
                calls: g.calls,
                host_self_us: us(g.host_self_ns as f64),
                host_total_us: us(g.host_total_ns as f64),
                device_self_us: us(g.device_self_ns as f64),
                device_total_us: us(g.device_total_ns as f64),
                tc_eligible: g.tc_eligible != 0,
                tc_self_pct: pct(g.tc_self_ns as f64, g.device_self_ns as f64),
                tc_total_pct: pct(g.tc_total_ns as f64, g.device_total_ns as f64),
                runtime_us: us(g.runtime_ns as f64),
                host_avg_us: us(g.host_total_ns as f64 / calls),
                host_min_us: us(g.host_total_min_ns as f64),
                host_max_us: us(g.host_total_max_ns as f64),
                device_avg_us: us(g.device_total_ns as f64 / calls),
                device_min_us: us(g.device_total_min_ns as f64),
                device_max_us: us(g.device_total_max_ns as f64),
                host_ratio_pct: pct(g.host_total_ns as f64, ht),
                device_ratio_pct: pct(g.device_total_ns as f64, dt),
            }
        })
        .collect();
    let top = q.top.unwrap_or(MAX_TOP);
    let rows = if q.rank.is_some() {
        let mut rows = rows;
        rows.sort_by(|a, b| {
            let k = |r: &OpRow| {
                if has_device {
                    r.device_self_us
                } else {
                    r.host_self_us
                }
            };
            k(b).total_cmp(&k(a)).then_with(|| a.name.cmp(&b.name))
        });
        rows.truncate(top);
        OpRows::Rank(rows)
    } else {
        OpRows::Job(job_rows(rows, has_device, top))
    };
    Ok(Json(OpsOut {
        job,
        rank: q.rank,
        group_by,
        rows,
        notes,
    }))
}

/// (rank, calls, host self, host total, device self, device total).
type PerRank = (u32, f64, f64, f64, f64, f64);

/// One row per operator name: median over the ranks that ran it, the max
/// and its rank (ties: the lowest rank).
fn job_rows(rows: Vec<OpRow>, has_device: bool, top: usize) -> Vec<JobOpRow> {
    let mut by: BTreeMap<(String, Option<String>), Vec<OpRow>> = BTreeMap::new();
    for r in rows {
        by.entry((r.name.clone(), r.input_shape.clone()))
            .or_default()
            .push(r);
    }
    let mut out: Vec<JobOpRow> = by
        .into_iter()
        .map(|((name, input_shape), mut rs)| {
            // Rows of one rank with several stacks: one value per rank.
            rs.sort_by_key(|r| r.rank);
            let mut per: Vec<PerRank> = Vec::new();
            for r in &rs {
                match per.last_mut() {
                    Some(p) if p.0 == r.rank => {
                        p.1 += r.calls as f64;
                        p.2 += r.host_self_us;
                        p.3 += r.host_total_us;
                        p.4 += r.device_self_us;
                        p.5 += r.device_total_us;
                    }
                    _ => per.push((
                        r.rank,
                        r.calls as f64,
                        r.host_self_us,
                        r.host_total_us,
                        r.device_self_us,
                        r.device_total_us,
                    )),
                }
            }
            let max_of = |f: fn(&PerRank) -> f64| {
                per.iter().fold((0u32, f64::NEG_INFINITY), |m, p| {
                    if f(p) > m.1 {
                        (p.0, f(p))
                    } else {
                        m
                    }
                })
            };
            let hmax = max_of(|p| p.2);
            let dmax = max_of(|p| p.4);
            JobOpRow {
                ranks: per.len(),
                calls_median: median(per.iter().map(|p| p.1).collect()),
                host_self_us_median: median(per.iter().map(|p| p.2).collect()),
                host_self_us_max: hmax.1,
                host_self_max_rank: hmax.0,
                host_total_us_median: median(per.iter().map(|p| p.3).collect()),
                device_self_us_median: median(per.iter().map(|p| p.4).collect()),
                device_self_us_max: dmax.1,
                device_self_max_rank: dmax.0,
                device_total_us_median: median(per.iter().map(|p| p.5).collect()),
                name,
                input_shape,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        let k = |r: &JobOpRow| {
            if has_device {
                r.device_self_us_median
            } else {
                r.host_self_us_median
            }
        };
        k(b).total_cmp(&k(a))
            .then_with(|| (&a.name, &a.input_shape).cmp(&(&b.name, &b.input_shape)))
    });
    out.truncate(top);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_like_the_plugins_front_end() {
        assert_eq!(
            frame("/w/train.py(42): main"),
            Some(Frame {
                file: "/w/train.py".into(),
                line: 42,
                function: "main".into()
            })
        );
        assert_eq!(frame("<built-in method mm>"), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
