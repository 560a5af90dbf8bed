//! `GET /api/v1/jobs/{job}/timeline?from_step=&to_step=&ranks=0,3`: the
//! job's events in the Chrome Trace Event format (what Perfetto and
//! chrome://tracing open, and what `rankscope import` reads back).
//!
//! Layout: one process per rank (`pid` = rank, named "rank R (node)"), a
//! host track (`tid` 0: `ProfilerStep#N` step annotations, spans, the CUDA
//! launch calls), a collectives track (`tid` 1: one slice per collective
//! call, "op pg=G seq=S", its CUDA stream as `args.on_stream`: HTA, and the
//! importer as HTA, take any event with `args.stream` for GPU work) and a
//! track per GPU stream (`tid` 1000 + stream:
//! kernels, memcpys, memsets with `args.stream`, `args.device`,
//! `args.correlation`). Flow arrows (`ph` s/f) join the calls of the same
//! (process group, sequence number) across ranks, rank order. Times are
//! microseconds (3 decimals, so nanoseconds survive) after
//! `baseTimeNanoseconds`; with a single rank `distributedInfo` names it, so
//! the file imports as that rank.
//!
//! Clocks: every rank's times are put on the reference node's clock with
//! the job's node clock estimate (`Store::clock_estimate`, see
//! [`clock`]); `raw_clocks=true` keeps each node's own clock. The offsets
//! applied are in the top-level `rankscopeClocks` object.
//!
//! Range: `from_step`/`to_step` select the window from the first begin to
//! the last end of those steps over the chosen ranks; without them, every
//! event of the job. Bounded: above [`MAX_EVENTS`] events (or a lower
//! `max_events`) the answer is a 400 naming the count and the cap (narrow
//! the steps or ranks). 404 for an
//! unknown job; 400 for an empty step range or a range with no step.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, ApiState};

mod clock;

/// Most trace events one timeline may hold.
pub const MAX_EVENTS: usize = 2_000_000;

const HOST_TID: u64 = 0;
const COLLECTIVES_TID: u64 = 1;
const STREAM_TID: u64 = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimelineQuery {
    from_step: Option<u64>,
    to_step: Option<u64>,
    /// Comma-separated ranks; all when absent.
    ranks: Option<String>,
    /// A lower cap than [`MAX_EVENTS`] for this request.
    max_events: Option<usize>,
    /// `true`: each node's own clock, no correction.
    raw_clocks: Option<bool>,
}

impl TimelineQuery {
    /// The ranks asked for (all: `None`) and the step range, checked.
    #[allow(clippy::type_complexity)]
    pub(super) fn check(&self) -> Result<(Option<Vec<u32>>, u64, u64), ApiError> {
        let wanted: Option<Vec<u32>> = match &self.ranks {
            None => None,
            Some(s) => Some(
                s.split(',')
                    .filter(|x| !x.trim().is_empty())
                    .map(|x| {
                        x.trim()
                            .parse::<u32>()
                            .map_err(|_| bad(format!("ranks: {x:?} is not a rank number")))
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let (first, last) = (
            self.from_step.unwrap_or(0),
            self.to_step.unwrap_or(u64::MAX),
        );
        if first > last {
            return Err(bad(format!(
                "empty step range: from_step {first} > to_step {last}"
            )));
        }
        Ok((wanted, first, last))
    }
}

fn bad(m: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, m.into())
}

fn us(ns: u64, base: u64) -> f64 {
    // Whole nanoseconds are three decimals of a microsecond: exact.
    ns.saturating_sub(base) as f64 / 1000.0
}

pub(super) async fn timeline(
    State(st): State<ApiState>,
    Path(job): Path<String>,
    Query(q): Query<TimelineQuery>,
) -> Result<Json<Value>, ApiError> {
    let (wanted, first, last) = q.check()?;
    let keep = |r: u32| wanted.as_ref().is_none_or(|w| w.contains(&r));
    let ranged = q.from_step.is_some() || q.to_step.is_some();
    let steps: Vec<_> = st
        .store
        .step_times(&job, Some(first), Some(last), None)
        .await?
        .into_iter()
        .filter(|s| keep(s.rank))
        .collect();
    if steps.is_empty() {
        st.require_job(&job, true).await?;
        if ranged || wanted.is_some() {
            return Err(bad(format!(
                "no step of job {job:?} in {first}..{last} for the ranks asked"
            )));
        }
    }
    let (from_ns, to_ns) = if ranged {
        (
            steps.iter().map(|s| s.start_ns).min().unwrap_or(0),
            steps.iter().map(|s| s.end_ns).max().unwrap_or(0),
        )
    } else {
        (0, u64::MAX)
    };
    let inside = |t: u64| t >= from_ns && t <= to_ns;
    let mut ops: Vec<_> = st
        .store
        .gpu_ops(&job)
        .await?
        .into_iter()
        .filter(|r| keep(r.rank))
        .collect();
    for r in &mut ops {
        r.ops.retain(|o| inside(o.start_ns));
    }
    let mut spans = st.store.timeline_spans(&job, from_ns, to_ns).await?;
    let mut colls = st.store.timeline_collectives(&job, from_ns, to_ns).await?;
    let mut steps = steps;
    let clocks = if q.raw_clocks == Some(true) {
        None
    } else {
        let e = st.store.clock_estimate(&job).await?;
        let ranks = st.store.job_rank_list(&job).await?;
        clock::correct(&e, &ranks, &mut steps, &mut ops, &mut spans, &mut colls);
        Some(e)
    };
    let n_events = steps.len()
        + ops.iter().map(|r| r.ops.len() * 2).sum::<usize>()
        + spans.iter().filter(|s| keep(s.rank)).count()
        + colls.iter().filter(|c| keep(c.rank)).count() * 2;
    let cap = q.max_events.unwrap_or(MAX_EVENTS).min(MAX_EVENTS);
    if n_events > cap {
        return Err(bad(format!(
            "the timeline would hold {n_events} events, over the cap of {cap}: narrow from_step/to_step or ranks"
        )));
    }
    // Base: the earliest event, so timestamps are small and exact.
    let base = steps
        .iter()
        .map(|s| s.start_ns)
        .chain(ops.iter().flat_map(|r| {
            r.ops.iter().map(|o| {
                o.launch
                    .as_ref()
                    .map_or(o.start_ns, |l| l.0.start_ns.min(o.start_ns))
            })
        }))
        .chain(spans.iter().filter(|s| keep(s.rank)).map(|s| s.start_ns))
        .chain(colls.iter().filter(|c| keep(c.rank)).map(|c| c.start_ns))
        .min()
        .unwrap_or(0);
    let mut nodes: BTreeMap<u32, String> = BTreeMap::new();
    for s in &steps {
        nodes.entry(s.rank).or_insert_with(|| s.node.clone());
    }
    for r in &ops {
        nodes.entry(r.rank).or_default();
    }
    let mut ev: Vec<Value> = Vec::with_capacity(n_events + 4 * nodes.len());
    for (rank, node) in &nodes {
        let label = if node.is_empty() {
            format!("rank {rank}")
        } else {
            format!("rank {rank} ({node})")
        };
        ev.push(json!({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}}));
        ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}));
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": HOST_TID, "args": {"name": "host"}}));
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": COLLECTIVES_TID, "args": {"name": "collectives"}}));
    }
    for s in &steps {
        ev.push(json!({
            "ph": "X", "cat": "user_annotation", "name": format!("ProfilerStep#{}", s.step),
            "pid": s.rank, "tid": HOST_TID, "ts": us(s.start_ns, base),
            "dur": us(s.end_ns, s.start_ns.min(s.end_ns)) ,
        }));
    }
    for s in spans.iter().filter(|s| keep(s.rank)) {
        let mut args = json!({"category": s.category, "device": s.device});
        // A host event with a CUDA stream argument (the importer's device
        // -2) keeps it, so it imports back as what HTA counts as GPU work.
        if s.device == -2 {
            args["stream"] = json!(s.stream);
        }
        ev.push(json!({
            "ph": "X", "cat": "user_annotation", "name": s.name, "pid": s.rank, "tid": HOST_TID,
            "ts": us(s.start_ns, base), "dur": us(s.end_ns, s.start_ns),
            "args": args,
        }));
    }
    for r in &ops {
        let mut streams: Vec<u32> = Vec::new();
        for (i, o) in r.ops.iter().enumerate() {
            let corr = i as u64 + 1;
            let (cat, kind_name) = match o.kind {
                rankscope_analysis::GpuEventKind::Memcpy => ("gpu_memcpy", "memcpy"),
                rankscope_analysis::GpuEventKind::Memset => ("gpu_memset", "memset"),
                _ => ("kernel", "kernel"),
            };
            if !streams.contains(&o.stream) {
                streams.push(o.stream);
            }
            let tid = STREAM_TID + u64::from(o.stream);
            let mut args = json!({"stream": o.stream, "device": 0, "correlation": corr});
            if kind_name != "kernel" {
                args["bytes"] = json!(o.bytes);
            }
            ev.push(json!({
                "ph": "X", "cat": cat, "name": &*o.name, "pid": r.rank, "tid": tid,
                "ts": us(o.start_ns, base), "dur": us(o.end_ns, o.start_ns), "args": args,
            }));
            if let Some((call, api)) = &o.launch {
                ev.push(json!({
                    "ph": "X", "cat": "cuda_runtime", "name": &**api, "pid": r.rank, "tid": HOST_TID,
                    "ts": us(call.start_ns, base), "dur": us(call.end_ns, call.start_ns),
                    "args": {"correlation": corr},
                }));
            }
        }
        for s in streams {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": r.rank, "tid": STREAM_TID + u64::from(s), "args": {"name": format!("stream {s}")}}));
        }
    }
    // Collectives and the flow arrows joining one (process group, seq).
    let mut by_call: BTreeMap<(&str, u64), Vec<&crate::store::timeline::TimelineCollective>> =
        BTreeMap::new();
    for c in colls.iter().filter(|c| keep(c.rank)) {
        ev.push(json!({
            "ph": "X", "cat": "collective", "name": format!("{} pg={} seq={}", c.op, c.process_group, c.seq),
            "pid": c.rank, "tid": COLLECTIVES_TID, "ts": us(c.start_ns, base),
            "dur": us(c.end_ns, c.start_ns),
            "args": {"op": c.op, "process_group": c.process_group, "seq": c.seq, "bytes": c.bytes, "on_stream": c.stream, "device": c.device},
        }));
        by_call
            .entry((&c.process_group, c.seq))
            .or_default()
            .push(c);
    }
    let mut flow_id = 0u64;
    for ((pg, seq), mut calls) in by_call {
        calls.sort_by_key(|c| c.rank);
        for w in calls.windows(2) {
            flow_id += 1;
            let name = format!("pg={pg} seq={seq}");
            ev.push(json!({"ph": "s", "cat": "collective", "name": name, "id": flow_id,
                           "pid": w[0].rank, "tid": COLLECTIVES_TID, "ts": us(w[0].start_ns, base)}));
            ev.push(json!({"ph": "f", "bp": "e", "cat": "collective", "name": name, "id": flow_id,
                           "pid": w[1].rank, "tid": COLLECTIVES_TID, "ts": us(w[1].start_ns, base)}));
        }
    }
    let mut doc = json!({
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base,
        "traceName": format!("rankscope job {job}"),
        "traceEvents": ev,
    });
    if let Some(e) = &clocks {
        doc["rankscopeClocks"] = clock::describe(e);
    }
    if nodes.len() == 1 {
        let world = st
            .store
            .job_rank_list(&job)
            .await?
            .iter()
            .map(|r| r.world_size)
            .max()
            .unwrap_or(1);
        let rank = *nodes.keys().next().unwrap_or(&0);
        doc["distributedInfo"] =
            json!({"rank": rank, "world_size": world.max(rank + 1), "backend": "nccl"});
    }
    Ok(Json(doc))
}

#[cfg(test)]
mod tests {
    use super::us;

    #[test]
    fn microseconds_keep_nanoseconds() {
        assert_eq!(us(1_000_001_234, 1_000_000_000), 1.234);
        assert_eq!(us(5, 10), 0.0);
    }
}
