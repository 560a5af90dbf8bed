//! Collective statistics grouped per (process group, op, dtype, size
//! bucket), job-wide or per rank.
//!
//! In: [`CollectiveObs`] of a job (any order), or, for a store that
//! aggregates each call, [`UniformMatch`]es plus the observations of the
//! other calls ([`job_collective_stats`], [`rank_collective_stats`]: the same
//! results to the bit). Out: [`CollectiveStats`] rows sorted by
//! `(process_group, op, dtype, size_bucket, rank)`.
//!
//! Definitions, per group of observations (one observation = one rank's view
//! of one call; duplicates removed by [`match_collectives`]):
//! - `calls` = observations; `collectives` = distinct `(process_group, seq)`
//!   (job-wide, an 8-rank all_reduce is 8 calls and 1 collective);
//! - `total_bytes` = Σ bytes, `avg_bytes` = total / calls (floor);
//! - `total_duration_ns` = Σ duration, `mean_duration_ns` = total / calls
//!   (floor), `p50_duration_ns` / `p99_duration_ns` = nearest-rank
//!   percentiles ([`crate::stats::percentile_nearest_rank`]) of the durations;
//! - `algbw_gbps` = total_bytes / total_duration_ns (nccl-tests algbw of the
//!   aggregate, i.e. the duration-weighted mean of the per-call algbw, which
//!   stays finite when single calls take 0 ns; GB = 1e9 bytes);
//! - `busbw_gbps` = Σ(bytes_i * factor(op, n_i)) / total_duration_ns, which
//!   is algbw x factor(op, n) (nccl-tests) when the group size is constant;
//!   `None` for barrier or a zero total duration;
//! - `wait_ns_total` = Σ per-call wait, `transfer_ns_total` = Σ per-call
//!   transfer (see [`match_collectives`]; PyTorch Profiler's synchronizing vs
//!   transfer time). Durations include waiting, so a straggler lowers the
//!   other ranks' algbw/busbw; `total_bytes / transfer_ns_total` is the
//!   bandwidth without it.
//!
//! Invariants: `wait_ns_total + transfer_ns_total == total_duration_ns`;
//! `p50 <= p99 <= max duration`; results do not depend on input order.

use super::matching::{match_collectives, MatchedCollective};
use super::summary::CallSummary;
use super::{algbw_gbps, busbw_factor, size_bucket, CollOp, CollectiveObs, SizeBucket};
use crate::stats::percentile_nearest_rank_unsorted;

/// Statistics of one group of collective observations (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveStats {
    /// Process group name.
    pub process_group: String,
    /// Operation.
    pub op: CollOp,
    /// Element type name.
    pub dtype: String,
    /// Message-size bucket of the calls.
    pub size_bucket: SizeBucket,
    /// The rank, for per-rank statistics; `None` job-wide.
    pub rank: Option<u32>,
    /// Observations (rank-level calls).
    pub calls: u64,
    /// Distinct `(process_group, seq)` collectives.
    pub collectives: u64,
    /// Σ nccl-tests size, bytes.
    pub total_bytes: u64,
    /// total_bytes / calls (floor).
    pub avg_bytes: u64,
    /// Σ duration, ns.
    pub total_duration_ns: u64,
    /// total_duration_ns / calls (floor).
    pub mean_duration_ns: u64,
    /// Nearest-rank median duration, ns.
    pub p50_duration_ns: u64,
    /// Nearest-rank 99th percentile duration, ns.
    pub p99_duration_ns: u64,
    /// total_bytes / total_duration_ns, GB/s.
    pub algbw_gbps: Option<f64>,
    /// Σ(bytes x busbw factor) / total_duration_ns, GB/s.
    pub busbw_gbps: Option<f64>,
    /// Σ time waiting for other ranks, ns.
    pub wait_ns_total: u64,
    /// Σ transfer time, ns.
    pub transfer_ns_total: u64,
}

impl CollectiveStats {
    /// The order of job-wide statistics: process group, op, dtype, size.
    pub fn sort_key(&self) -> (&str, CollOp, &str, SizeBucket) {
        (&self.process_group, self.op, &self.dtype, self.size_bucket)
    }
}

/// One collective call as a database can aggregate it per `(process_group,
/// seq)` without sending its rows: every participant reported the same op,
/// dtype, bytes and group size, and each rank reported it once (so
/// [`match_collectives`] would keep every observation). The durations are
/// the participants' `end_ns - start_ns` (0 if inverted), in any order.
#[derive(Debug, Clone, PartialEq)]
pub struct UniformMatch<'a> {
    pub process_group: &'a str,
    pub seq: u64,
    pub op: CollOp,
    pub dtype: &'a str,
    pub bytes: u64,
    pub group_size: u32,
    pub durations_ns: &'a [u64],
}

type Key = (String, CollOp, String, SizeBucket, Option<u32>);
/// [`Key`] borrowed from the observations while grouping.
type KeyRef<'a> = (&'a str, CollOp, &'a str, SizeBucket, Option<u32>);

#[derive(Default)]
struct Acc {
    total_bytes: u64,
    bus_bytes: f64,
    durations: Vec<u64>,
    wait_ns: u64,
    transfer_ns: u64,
    collectives: u64,
    /// Index of the last match counted in `collectives`.
    last_match: Option<usize>,
}

/// The groups being accumulated. Keys are borrowed (no string copied per
/// observation) and the participants of a call usually share the previous
/// one's key, so the hash map is rarely consulted.
#[derive(Default)]
struct Groups<'a> {
    slots: std::collections::HashMap<KeyRef<'a>, usize>,
    groups: Vec<(KeyRef<'a>, Acc)>,
    last: Option<(KeyRef<'a>, usize)>,
}

impl<'a> Groups<'a> {
    /// The group of `key`, counting match `m_idx` once in its collectives.
    fn acc(&mut self, key: KeyRef<'a>, m_idx: usize) -> &mut Acc {
        let slot = match self.last {
            Some((k, slot)) if k == key => slot,
            _ => {
                let groups = &mut self.groups;
                let slot = *self.slots.entry(key).or_insert_with(|| {
                    groups.push((key, Acc::default()));
                    groups.len() - 1
                });
                self.last = Some((key, slot));
                slot
            }
        };
        let acc = &mut self.groups[slot].1;
        if acc.last_match != Some(m_idx) {
            acc.last_match = Some(m_idx);
            acc.collectives += 1;
        }
        acc
    }

    /// Every participant of `m` (matched over `obs`).
    /// With `only`, just that rank's participation (per rank).
    fn add_match(
        &mut self,
        obs: &'a [CollectiveObs],
        m: &MatchedCollective,
        m_idx: usize,
        per_rank: bool,
        only: Option<u32>,
    ) {
        for p in &m.participants {
            if only.is_some_and(|r| r != p.rank) {
                continue;
            }
            let o = &obs[p.obs_index];
            let key: KeyRef<'a> = (
                &o.process_group,
                o.op,
                &o.dtype,
                size_bucket(o.bytes),
                per_rank.then_some(o.rank),
            );
            let acc = self.acc(key, m_idx);
            acc.total_bytes += o.bytes;
            acc.bus_bytes += o.bytes as f64 * busbw_factor(o.op, o.group_size);
            acc.durations.push(p.duration_ns);
            acc.wait_ns += p.wait_ns;
            acc.transfer_ns += m.transfer_ns;
        }
    }

    /// What [`Self::add_match`] adds for the match of `u`'s observations,
    /// job-wide: the same sums, in the same order (so the floating-point
    /// bus bytes come out bit for bit the same).
    fn add_uniform(&mut self, u: &UniformMatch<'a>, m_idx: usize) {
        let Some(&transfer_ns) = u.durations_ns.iter().min() else {
            return;
        };
        let key: KeyRef<'a> = (u.process_group, u.op, u.dtype, size_bucket(u.bytes), None);
        let bus = u.bytes as f64 * busbw_factor(u.op, u.group_size);
        let acc = self.acc(key, m_idx);
        for &d in u.durations_ns {
            acc.total_bytes += u.bytes;
            acc.bus_bytes += bus;
            acc.wait_ns += d - transfer_ns;
            acc.transfer_ns += transfer_ns;
        }
        acc.durations.extend_from_slice(u.durations_ns);
    }

    /// What [`Self::add_match`] adds for `rank`'s participation in the match
    /// of `u`'s observations, per rank: `duration_ns` is the rank's own.
    fn add_uniform_of_rank(
        &mut self,
        u: &CallSummary<'a>,
        rank: u32,
        duration_ns: u64,
        m_idx: usize,
    ) {
        let transfer_ns = u.min_duration_ns;
        let key: KeyRef<'a> = (
            u.process_group,
            u.op,
            u.dtype,
            size_bucket(u.bytes),
            Some(rank),
        );
        let acc = self.acc(key, m_idx);
        acc.total_bytes += u.bytes;
        acc.bus_bytes += u.bytes as f64 * busbw_factor(u.op, u.group_size);
        acc.durations.push(duration_ns);
        acc.wait_ns += duration_ns - transfer_ns;
        acc.transfer_ns += transfer_ns;
    }

    fn finish(mut self) -> Vec<CollectiveStats> {
        self.groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.groups
            .into_iter()
            .map(|((pg, op, dtype, bucket, rank), acc)| {
                finish((pg.to_owned(), op, dtype.to_owned(), bucket, rank), acc)
            })
            .collect()
    }
}

/// Group `obs` (see the module doc); `per_rank` adds the rank to the key.
pub fn collective_stats(obs: &[CollectiveObs], per_rank: bool) -> Vec<CollectiveStats> {
    let mut groups = Groups::default();
    for (m_idx, m) in match_collectives(obs).iter().enumerate() {
        groups.add_match(obs, m, m_idx, per_rank, None);
    }
    groups.finish()
}

/// Job-wide statistics of the calls given as [`UniformMatch`]es plus those
/// matched from `rest`: the same result, to the bit, as
/// `collective_stats(all observations, false)` when every `(process_group,
/// seq)` is either one uniform match or entirely in `rest`. Lets a store
/// send per-call durations instead of rows for the common case.
pub fn job_collective_stats(
    uniform: &[UniformMatch<'_>],
    rest: &[CollectiveObs],
) -> Vec<CollectiveStats> {
    let matched = match_collectives(rest);
    let mut groups = Groups::default();
    for (m_idx, call) in in_call_order(uniform, |u| (u.process_group, u.seq), &matched)
        .into_iter()
        .enumerate()
    {
        match call {
            Call::Uniform(u) => groups.add_uniform(u, m_idx),
            Call::Matched(m) => groups.add_match(rest, m, m_idx, false, None),
        }
    }
    groups.finish()
}

/// Per-rank statistics of `rank` alone: the same, to the bit, as the rows
/// of `rank` in `collective_stats(all observations, true)`, under the
/// precondition of [`job_collective_stats`]. `uniform` pairs each uniform
/// call `rank` took part in (summarized: its minimum duration is its
/// transfer time) with the rank's own duration in it. Lets a store read one
/// rank's rows and a summary per call instead of every row.
pub fn rank_collective_stats(
    rank: u32,
    uniform: &[(CallSummary<'_>, u64)],
    rest: &[CollectiveObs],
) -> Vec<CollectiveStats> {
    let matched = match_collectives(rest);
    let mut groups = Groups::default();
    for (m_idx, call) in in_call_order(uniform, |u| (u.0.process_group, u.0.seq), &matched)
        .into_iter()
        .enumerate()
    {
        match call {
            Call::Uniform((u, d)) => groups.add_uniform_of_rank(u, rank, *d, m_idx),
            Call::Matched(m) => groups.add_match(rest, m, m_idx, true, Some(rank)),
        }
    }
    groups.finish()
}

enum Call<'c, T> {
    Uniform(&'c T),
    Matched(&'c MatchedCollective),
}

/// Uniform calls and matches merged in `(process_group, seq)` order, the
/// order `collective_stats` visits calls in, so floating-point sums add in
/// the same order. `matched` is sorted so already.
fn in_call_order<'c, 'u: 'c, T>(
    uniform: &'c [T],
    key: impl Fn(&T) -> (&'u str, u64),
    matched: &'c [MatchedCollective],
) -> Vec<Call<'c, T>> {
    let mut order: Vec<&T> = uniform.iter().collect();
    order.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    let mut out = Vec::with_capacity(order.len() + matched.len());
    let (mut u, mut r) = (order.into_iter().peekable(), matched.iter().peekable());
    loop {
        let take_uniform = match (u.peek(), r.peek()) {
            (Some(a), Some(b)) => key(a) <= (b.process_group.as_str(), b.seq),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.push(if take_uniform {
            Call::Uniform(u.next().expect("peeked"))
        } else {
            Call::Matched(r.next().expect("peeked"))
        });
    }
    out
}

fn finish((process_group, op, dtype, size_bucket, rank): Key, mut acc: Acc) -> CollectiveStats {
    let calls = acc.durations.len() as u64;
    let total_duration_ns: u64 = acc.durations.iter().sum();
    let per_call = |total: u64| total.checked_div(calls).unwrap_or(0);
    let busbw_gbps = (op != CollOp::Barrier && total_duration_ns > 0)
        .then(|| acc.bus_bytes / total_duration_ns as f64);
    CollectiveStats {
        process_group,
        op,
        dtype,
        size_bucket,
        rank,
        calls,
        collectives: acc.collectives,
        total_bytes: acc.total_bytes,
        avg_bytes: per_call(acc.total_bytes),
        total_duration_ns,
        mean_duration_ns: per_call(total_duration_ns),
        p50_duration_ns: percentile_nearest_rank_unsorted(&mut acc.durations, 50.0).unwrap_or(0),
        p99_duration_ns: percentile_nearest_rank_unsorted(&mut acc.durations, 99.0).unwrap_or(0),
        algbw_gbps: if op == CollOp::Barrier {
            None
        } else {
            algbw_gbps(acc.total_bytes, total_duration_ns)
        },
        busbw_gbps,
        wait_ns_total: acc.wait_ns,
        transfer_ns_total: acc.transfer_ns,
    }
}
