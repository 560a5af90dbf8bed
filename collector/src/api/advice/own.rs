//! The memory and exposed-communication items of `advice`:
//!
//! - `memory_near_capacity` (the TensorBoard plugin 0.4.3's memory
//!   recommendation, ../shared/SEED-VIEWS.md §1.5: peak above 90 % of the
//!   device): per rank, the live peak (the rank SDK's per-step CUDA peaks
//!   against the device's memory; for a CPU rank its RSS against the host's
//!   memory) over its total. Imported traces do not carry the device's size
//!   with their `[memory]` peaks, so a traced-only job reports the rule as
//!   not evaluated;
//! - `memory_imbalance` (rankscope's): the rank with the largest peak holds
//!   more than [`IMBALANCE`] x the median rank's peak (live peaks, else the
//!   traces' peak allocated bytes, largest device per rank);
//! - `exposed_communication` (rankscope's): per rank, collective transfer
//!   time not overlapped by compute (`step_breakdown.exposed_comm_ns` less
//!   the time spent waiting for the other ranks, `comm_wait_ns`, which the
//!   `straggler` rule explains) over the step time of the last
//!   [`LAST_STEPS`] steps, above [`EXPOSED_SHARE`] %; job-wide when the
//!   ranks' mean is.
//!
//! In: the `memory_stats` peaks, RSS samples and step windows
//! (`api::opsmem::job_live`), the stored breakdowns. Out: items and
//! not-evaluated entries in `advice`'s shape.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::super::opsmem::job_live;
use super::super::{ApiError, ApiState};
use super::{item, MEMORY_RULE};

/// Share of the device (the plugin's 90 %).
pub const MEMORY_SHARE: f64 = 0.9;
/// Largest peak / median peak above which ranks are imbalanced.
pub const IMBALANCE: f64 = 1.2;
/// Exposed transfer time (% of the step) above which the rule fires (the
/// plugin's communication threshold).
pub const EXPOSED_SHARE: f64 = 10.0;
/// Steps of the breakdown read.
pub const LAST_STEPS: u64 = 200;

fn mib(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
    }
}

/// The memory items, and the not-evaluated entries of the rules that could
/// not run.
pub(super) async fn memory_items(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<(Vec<Value>, Vec<Value>), ApiError> {
    let peaks = st.store.job_memory_peaks(job).await?;
    let (live, _, _) = job_live(st, job, &peaks, rank).await?;
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    let sized: Vec<_> = live.ranks.iter().filter(|r| r.total_bytes > 0).collect();
    if sized.is_empty() {
        let reason = if peaks.iter().any(|p| p.per_step == 0) {
            "the job's traces have [memory] peaks but not the device's size; the rank SDK's per-step peaks (CUDA) or the agent's RSS samples (CPU) carry it"
        } else {
            "the job has no device memory data (the rank SDK's per-step CUDA peaks or the agent's RSS samples)"
        };
        skipped.push(json!({ "rule": MEMORY_RULE, "reason": reason }));
    }
    for r in sized {
        let share = r.peak_bytes as f64 / r.total_bytes as f64;
        if share > MEMORY_SHARE {
            let of = if r.source == "rss" {
                "its host's memory (process RSS: a CPU rank)"
            } else {
                "its device's memory"
            };
            items.push(item(MEMORY_RULE, vec![r.rank], 100.0 * share, "pct", format!(
                "rank {}: peak {:.0} MiB is {:.1}% of {of} ({:.0} MiB); reduce the batch size, use activation checkpointing or shard the optimizer state",
                r.rank, mib(r.peak_bytes), 100.0 * share, mib(r.total_bytes))));
        }
    }
    // Per-rank peaks: live when the job has them, else the traces'.
    let mut per_rank: BTreeMap<u32, u64> =
        live.ranks.iter().map(|r| (r.rank, r.peak_bytes)).collect();
    if per_rank.is_empty() {
        for p in peaks
            .iter()
            .filter(|p| p.per_step == 0 && rank.is_none_or(|k| k == p.rank))
        {
            let e = per_rank.entry(p.rank).or_default();
            *e = (*e).max(p.allocated_bytes.max(0) as u64);
        }
    }
    if per_rank.len() >= 2 {
        let med = median(per_rank.values().copied().collect());
        let (&max_rank, &max) = per_rank
            .iter()
            .max_by_key(|(r, b)| (**b, std::cmp::Reverse(**r)))
            .expect("two ranks");
        let ratio = if med > 0.0 { max as f64 / med } else { 0.0 };
        if ratio > IMBALANCE {
            items.push(item("memory_imbalance", vec![max_rank], ratio, "ratio", format!(
                "rank {max_rank} peaks at {:.0} MiB, {ratio:.2}x the median rank's {:.0} MiB: it holds memory the other ranks do not (a tensor kept alive, uneven sharding or batches)",
                mib(max), med / 1_048_576.0)));
        }
    } else if rank.is_none() {
        skipped.push(json!({ "rule": "memory_imbalance", "reason": "fewer than two ranks have memory peaks" }));
    }
    Ok((items, skipped))
}

/// The `exposed_communication` items.
pub(super) async fn exposed_items(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
) -> Result<Vec<Value>, ApiError> {
    let rows = st
        .store
        .step_breakdowns(job, None, None, Some(LAST_STEPS))
        .await?;
    // rank -> (exposed transfer, wait inside exposed, step time)
    let mut sums: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    for b in rows.iter().filter(|b| rank.is_none_or(|k| k == b.rank)) {
        let wait = b.comm_wait_ns.min(b.exposed_comm_ns);
        let e = sums.entry(b.rank).or_default();
        e.0 += b.exposed_comm_ns - wait;
        e.1 += wait;
        e.2 += b.step_time_ns;
    }
    let shares: Vec<(u32, f64, f64)> = sums
        .iter()
        .filter(|(_, s)| s.2 > 0)
        .map(|(r, s)| {
            (
                *r,
                100.0 * s.0 as f64 / s.2 as f64,
                100.0 * s.1 as f64 / s.2 as f64,
            )
        })
        .collect();
    let mut out = Vec::new();
    if shares.is_empty() {
        return Ok(out);
    }
    let firing: Vec<u32> = shares
        .iter()
        .filter(|s| s.1 > EXPOSED_SHARE)
        .map(|s| s.0)
        .collect();
    let mean = shares.iter().map(|s| s.1).sum::<f64>() / shares.len() as f64;
    let text = |p: f64, w: f64| {
        format!("{p:.1}% of the step is collective transfer not overlapped with compute ({w:.1}% more is waiting for other ranks); overlap communication with compute (DDP bucket sizes, FSDP prefetch) or reduce what is communicated")
    };
    if shares.len() > 1 && mean > EXPOSED_SHARE {
        let w = shares.iter().map(|s| s.2).sum::<f64>() / shares.len() as f64;
        out.push(item(
            "exposed_communication",
            firing.clone(),
            mean,
            "pct",
            format!("job-wide: {}", text(mean, w)),
        ));
    }
    for (r, p, w) in shares.iter().filter(|s| s.1 > EXPOSED_SHARE) {
        out.push(item(
            "exposed_communication",
            vec![*r],
            *p,
            "pct",
            format!("rank {r}: {}", text(*p, *w)),
        ));
    }
    Ok(out)
}
