//! Match one collective call across the ranks that took part in it.
//!
//! In: [`CollectiveObs`] from any number of ranks, any order. Out: one
//! [`MatchedCollective`] per `(process_group, seq)`, sorted by that key.
//!
//! Definitions (PyTorch Profiler distributed view, "synchronizing" vs
//! "transfer" time of NCCL kernels): a blocking collective cannot finish
//! before its last rank arrives, so the fastest rank's duration is the time
//! the data movement itself took:
//! - `transfer_ns` = min over participating ranks of `end_ns - start_ns`;
//! - `wait_ns` (per rank) = its duration - `transfer_ns`, the time it waited
//!   for the others (synchronizing).
//!
//! Only durations are compared, never timestamps of different ranks, so
//! cross-node clock offsets do not matter.
//!
//! Invariants: every `wait_ns >= 0` and at least one participant has
//! `wait_ns == 0`; participants are sorted by rank, one per rank (a
//! duplicate observation of the same rank, e.g. from at-least-once delivery,
//! keeps the one that started first); `missing_ranks = group_size -
//! participants` when fewer ranks reported than the group holds
//! (`complete == false`). In an incomplete match the missing rank may be the
//! late one, so `transfer_ns` can include waiting.

use super::{CollOp, CollectiveObs};

/// One rank's part in a [`MatchedCollective`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Participant {
    /// Global rank.
    pub rank: u32,
    /// The rank's duration of the call, ns.
    pub duration_ns: u64,
    /// `duration_ns - transfer_ns`: time spent waiting for other ranks.
    pub wait_ns: u64,
    /// Index of this rank's observation in the input slice.
    pub obs_index: usize,
}

/// One collective call matched across ranks by `(process_group, seq)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedCollective {
    /// Process group name.
    pub process_group: String,
    /// Sequence number within the process group.
    pub seq: u64,
    /// Operation (as reported by the lowest participating rank).
    pub op: CollOp,
    /// Element type (as reported by the lowest participating rank).
    pub dtype: String,
    /// Group size (the largest any participant reported).
    pub group_size: u32,
    /// nccl-tests size in bytes (as reported by the lowest participating rank).
    pub bytes: u64,
    /// Minimum duration over the participants, ns.
    pub transfer_ns: u64,
    /// Ranks that reported the call, sorted by rank.
    pub participants: Vec<Participant>,
    /// `group_size - participants.len()` (0 when complete).
    pub missing_ranks: u32,
    /// True when every rank of the group reported the call.
    pub complete: bool,
    /// False when participants disagree on op, dtype, bytes or group size
    /// (a desynchronised job, or mislabelled sequence numbers).
    pub consistent: bool,
}

/// Group `obs` by `(process_group, seq)` and compute transfer and wait times.
pub fn match_collectives(obs: &[CollectiveObs]) -> Vec<MatchedCollective> {
    // Strings become their rank among the distinct values, so the sort
    // compares integers only (millions of observations: string compares
    // were most of the work) and orders exactly as by the strings.
    let pg = ordinals(obs.iter().map(|o| o.process_group.as_str()));
    let dtype = ordinals(obs.iter().map(|o| o.dtype.as_str()));
    let mut order: Vec<usize> = (0..obs.len()).collect();
    // Content first, index last: duplicates resolve the same way whatever
    // the input order.
    order.sort_unstable_by_key(|&i| {
        let o = &obs[i];
        (
            pg[i],
            o.seq,
            o.rank,
            o.start_ns,
            o.end_ns,
            o.op,
            dtype[i],
            o.bytes,
            o.group_size,
            i,
        )
    });
    let mut out = Vec::new();
    let mut rest = order.as_slice();
    while let Some(&head) = rest.first() {
        let key = (pg[head], obs[head].seq);
        let len = rest
            .iter()
            .take_while(|&&i| (pg[i], obs[i].seq) == key)
            .count();
        let (group, tail) = rest.split_at(len);
        out.push(match_one(obs, group));
        rest = tail;
    }
    out
}

/// For each string, its rank among the distinct strings (in string order).
fn ordinals<'a>(values: impl Iterator<Item = &'a str> + Clone) -> Vec<u32> {
    let mut distinct: Vec<&str> = Vec::new();
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut last: Option<&str> = None;
    for v in values.clone() {
        if last != Some(v) {
            last = Some(v);
            if seen.insert(v) {
                distinct.push(v);
            }
        }
    }
    distinct.sort_unstable();
    let rank: std::collections::HashMap<&str, u32> = distinct
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, i as u32))
        .collect();
    let mut last: Option<(&str, u32)> = None;
    values
        .map(|v| match last {
            Some((l, r)) if l == v => r,
            _ => {
                let r = rank[v];
                last = Some((v, r));
                r
            }
        })
        .collect()
}

/// `group`: indices of one `(process_group, seq)`, sorted by (rank, start).
fn match_one(obs: &[CollectiveObs], group: &[usize]) -> MatchedCollective {
    let mut members: Vec<usize> = group.to_vec();
    // Sorted by (rank, start): keeping the first per rank keeps the earliest.
    members.dedup_by_key(|i| obs[*i].rank);
    let first = &obs[members[0]];
    let transfer_ns = members
        .iter()
        .map(|&i| obs[i].duration_ns())
        .min()
        .unwrap_or(0);
    let group_size = members
        .iter()
        .map(|&i| obs[i].group_size)
        .max()
        .unwrap_or(0);
    let consistent = members.iter().all(|&i| {
        let o = &obs[i];
        o.op == first.op
            && o.dtype == first.dtype
            && o.bytes == first.bytes
            && o.group_size == group_size
    });
    let participants: Vec<Participant> = members
        .iter()
        .map(|&i| {
            let d = obs[i].duration_ns();
            Participant {
                rank: obs[i].rank,
                duration_ns: d,
                wait_ns: d - transfer_ns,
                obs_index: i,
            }
        })
        .collect();
    let present = u32::try_from(participants.len()).unwrap_or(u32::MAX);
    let missing_ranks = group_size.saturating_sub(present);
    MatchedCollective {
        process_group: first.process_group.clone(),
        seq: first.seq,
        op: first.op,
        dtype: first.dtype.clone(),
        group_size,
        bytes: first.bytes,
        transfer_ns,
        participants,
        missing_ranks,
        complete: missing_ranks == 0,
        consistent,
    }
}
