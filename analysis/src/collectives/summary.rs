//! Collective statistics from calls a database summarized, without their
//! durations.
//!
//! In: per uniform call (see [`super::stats::UniformMatch`]: every
//! participant reported the same op, dtype, bytes and group size, each rank
//! once) a [`CallSummary`]: how many ranks reported it and the minimum and
//! sum of their durations; job-wide, per group of calls the nearest-rank
//! p50 / p99 of all the group's durations ([`GroupSummary`], computed where
//! the durations are). Out: [`CollectiveStats`], the same to the bit as
//! [`super::stats::collective_stats`] over the calls' rows
//! ([`job_collective_stats_of_groups`]; per rank:
//! [`super::stats::rank_collective_stats`]).
//!
//! Why the sums suffice (definitions in [`super::stats`]): a call's transfer
//! time is its minimum duration, so Σ wait = Σ duration - calls x min and
//! Σ transfer = calls x min; Σ bytes = calls x bytes. The bus bytes are a
//! floating-point sum, added here in the order `collective_stats` adds them
//! (calls by `(process_group, seq)`, each participant in turn), so `busbw`
//! comes out bit for bit the same.

use super::stats::CollectiveStats;
use super::{algbw_gbps, busbw_factor, size_bucket, CollOp};

/// One uniform call, summarized over its participants.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSummary<'a> {
    pub process_group: &'a str,
    pub seq: u64,
    pub op: CollOp,
    pub dtype: &'a str,
    pub bytes: u64,
    pub group_size: u32,
    /// Participants (rows; one per rank).
    pub calls: u64,
    /// Minimum participant duration, ns (the call's transfer time).
    pub min_duration_ns: u64,
    /// Σ participant durations, ns.
    pub total_duration_ns: u64,
}

impl super::stats::UniformMatch<'_> {
    /// The call summarized (`None` without durations).
    pub fn summary(&self) -> Option<CallSummary<'_>> {
        Some(CallSummary {
            process_group: self.process_group,
            seq: self.seq,
            op: self.op,
            dtype: self.dtype,
            bytes: self.bytes,
            group_size: self.group_size,
            calls: self.durations_ns.len() as u64,
            min_duration_ns: *self.durations_ns.iter().min()?,
            total_duration_ns: self.durations_ns.iter().sum(),
        })
    }
}

/// The uniform calls of one statistics group (same process group, op,
/// dtype and [`size_bucket`]) with the nearest-rank percentiles
/// ([`crate::stats::percentile_nearest_rank`]) of all their participants'
/// durations.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary<'a> {
    pub calls: Vec<CallSummary<'a>>,
    pub p50_duration_ns: u64,
    pub p99_duration_ns: u64,
}

/// Job-wide statistics of `groups`: the same, to the bit, as
/// `collective_stats(rows, false)` over their calls' rows when every call of
/// the job is uniform and each group holds exactly the calls of one
/// statistics key. Groups without calls are left out.
pub fn job_collective_stats_of_groups(groups: &[GroupSummary<'_>]) -> Vec<CollectiveStats> {
    let mut out: Vec<CollectiveStats> = groups.iter().filter_map(group_stats).collect();
    out.sort_unstable_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    out
}

fn group_stats(g: &GroupSummary<'_>) -> Option<CollectiveStats> {
    let mut calls: Vec<&CallSummary<'_>> = g.calls.iter().collect();
    calls.sort_unstable_by_key(|c| c.seq);
    let first = *calls.first()?;
    let op = first.op;
    let (mut n, mut total_bytes, mut bus_bytes) = (0u64, 0u64, 0f64);
    let (mut total_duration_ns, mut transfer_ns, mut wait_ns) = (0u64, 0u64, 0u64);
    for c in &calls {
        debug_assert_eq!(
            (c.process_group, c.op, c.dtype, size_bucket(c.bytes)),
            (
                first.process_group,
                op,
                first.dtype,
                size_bucket(first.bytes)
            )
        );
        let bus = c.bytes as f64 * busbw_factor(c.op, c.group_size);
        for _ in 0..c.calls {
            bus_bytes += bus;
        }
        n += c.calls;
        total_bytes += c.bytes * c.calls;
        total_duration_ns += c.total_duration_ns;
        let transfer = c.min_duration_ns * c.calls;
        transfer_ns += transfer;
        wait_ns += c.total_duration_ns - transfer;
    }
    let per_call = |total: u64| total.checked_div(n).unwrap_or(0);
    let barrier = op == CollOp::Barrier;
    Some(CollectiveStats {
        process_group: first.process_group.to_owned(),
        op,
        dtype: first.dtype.to_owned(),
        size_bucket: size_bucket(first.bytes),
        rank: None,
        calls: n,
        collectives: calls.len() as u64,
        total_bytes,
        avg_bytes: per_call(total_bytes),
        total_duration_ns,
        mean_duration_ns: per_call(total_duration_ns),
        p50_duration_ns: g.p50_duration_ns,
        p99_duration_ns: g.p99_duration_ns,
        algbw_gbps: if barrier {
            None
        } else {
            algbw_gbps(total_bytes, total_duration_ns)
        },
        busbw_gbps: (!barrier && total_duration_ns > 0)
            .then(|| bus_bytes / total_duration_ns as f64),
        wait_ns_total: wait_ns,
        transfer_ns_total: transfer_ns,
    })
}

#[cfg(test)]
mod tests;
