use super::matching::match_collectives;
use super::stats::{
    collective_stats, job_collective_stats, rank_collective_stats, CollectiveStats, UniformMatch,
};
use super::summary::CallSummary;
use super::*;
use crate::test_rng::Rng;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn nccl_tests_hand_computed_bandwidths() {
    // all_reduce, 8 ranks, 1 GiB in 10 ms: algbw = 2^30 B / 1e7 ns = 107.374 GB/s,
    // busbw = algbw * 2 * 7 / 8 = 187.905 GB/s.
    let alg = algbw_gbps(GIB, 10_000_000).unwrap();
    assert!(close(alg, 107.374_182_4));
    assert!(close(
        busbw_gbps(CollOp::AllReduce, 8, GIB, 10_000_000).unwrap(),
        187.904_819_2
    ));
    // reduce_scatter, 4 ranks, 256 MiB input in 4 ms: 67.109 GB/s, busbw x 3/4 = 50.332.
    assert!(close(algbw_gbps(256 * MIB, 4_000_000).unwrap(), 67.108_864));
    assert!(close(
        busbw_gbps(CollOp::ReduceScatter, 4, 256 * MIB, 4_000_000).unwrap(),
        50.331_648
    ));
    // all_gather, 16 ranks, 512 MiB output in 8 ms: busbw = 67.108864 * 15/16.
    assert!(close(
        busbw_gbps(CollOp::AllGather, 16, 512 * MIB, 8_000_000).unwrap(),
        62.914_56
    ));
    // all_to_all, 8 ranks: (n-1)/n.
    assert!(close(busbw_factor(CollOp::AllToAll, 8), 0.875));
    // broadcast, 8 ranks, 100 MB in 5 ms: 20 GB/s, factor 1.
    assert!(close(
        busbw_gbps(CollOp::Broadcast, 8, 100_000_000, 5_000_000).unwrap(),
        20.0
    ));
    for op in [CollOp::Reduce, CollOp::Send, CollOp::Recv] {
        assert_eq!(busbw_factor(op, 2), 1.0);
    }
    assert_eq!(busbw_factor(CollOp::AllReduce, 1), 0.0);
    assert_eq!(busbw_factor(CollOp::AllReduce, 0), 0.0);
    assert_eq!(busbw_factor(CollOp::Barrier, 8), 0.0);
    assert_eq!(busbw_gbps(CollOp::Barrier, 8, 0, 1000), None);
    assert_eq!(algbw_gbps(GIB, 0), None);
    assert_eq!(busbw_gbps(CollOp::AllReduce, 8, GIB, 0), None);
}

#[test]
fn nccl_tests_sizes() {
    // all_gather of 1 MiB per rank on 8 ranks: output 8 MiB is the size.
    assert_eq!(nccl_tests_bytes(MIB, 8 * MIB), 8 * MIB);
    // reduce_scatter: input is the size.
    assert_eq!(nccl_tests_bytes(8 * MIB, MIB), 8 * MIB);
    assert_eq!(nccl_tests_bytes(MIB, MIB), MIB);
    assert_eq!(nccl_tests_bytes(0, MIB), MIB);
}

#[test]
fn op_names_round_trip() {
    let names: Vec<&str> = CollOp::ALL.iter().map(|op| op.as_str()).collect();
    assert_eq!(
        names,
        [
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "all_to_all",
            "broadcast",
            "reduce",
            "send",
            "recv",
            "barrier"
        ]
    );
    for op in CollOp::ALL {
        assert_eq!(op.as_str().parse::<CollOp>(), Ok(op));
        assert_eq!(op.to_string(), op.as_str());
    }
    assert_eq!(
        "allreduce".parse::<CollOp>(),
        Err(UnknownCollOp("allreduce".into()))
    );
}

#[test]
fn size_buckets() {
    let cases = [
        (0, 0, 1, "0B-1B"),
        (1, 1, 2, "1B-2B"),
        (3, 2, 4, "2B-4B"),
        (1000, 512, 1024, "512B-1KiB"),
        (65_536, 65_536, 131_072, "64KiB-128KiB"),
        (100_000, 65_536, 131_072, "64KiB-128KiB"),
        (GIB, GIB, 2 * GIB, "1GiB-2GiB"),
        (3 * GIB, 2 * GIB, 4 * GIB, "2GiB-4GiB"),
        (u64::MAX, 1 << 63, u64::MAX, "8EiB-16EiB"),
    ];
    for (bytes, lo, hi, label) in cases {
        let b = size_bucket(bytes);
        assert_eq!((b.lower_bytes, b.upper_bytes), (lo, hi), "{bytes}");
        assert_eq!(b.label(), label);
        assert!(b.lower_bytes <= bytes && (bytes < b.upper_bytes || bytes == u64::MAX));
    }
}

pub(super) fn obs(rank: u32, seq: u64, start_ns: u64, end_ns: u64) -> CollectiveObs {
    CollectiveObs {
        rank,
        process_group: "0".into(),
        seq,
        op: CollOp::AllReduce,
        dtype: "float32".into(),
        group_size: 4,
        bytes: 64 * MIB,
        start_ns,
        end_ns,
    }
}

#[test]
fn matching_with_a_late_rank() {
    // Each rank has its own clock offset; only durations matter. Rank 3 is
    // 700 ns late, so the others wait 700 ns and the transfer takes 300 ns.
    let offsets = [0u64, 5_000_000, 123, 9_999_999];
    let mut input = Vec::new();
    for rank in 0..4u32 {
        let off = offsets[rank as usize];
        let (s, e) = if rank == 3 { (700, 1000) } else { (0, 1000) };
        input.push(obs(rank, 1, off + s, off + e));
    }
    // seq 2: rank 2 missing; rank 0 reported twice (keeps the earlier start).
    input.push(obs(0, 2, 2000, 2600));
    input.push(obs(0, 2, 2001, 2200));
    input.push(obs(1, 2, 2000, 2500));
    input.push(obs(3, 2, 2100, 2500));
    let m = match_collectives(&input);
    assert_eq!(m.len(), 2);
    let first = &m[0];
    assert_eq!(
        (
            first.seq,
            first.transfer_ns,
            first.complete,
            first.missing_ranks
        ),
        (1, 300, true, 0)
    );
    let waits: Vec<(u32, u64)> = first
        .participants
        .iter()
        .map(|p| (p.rank, p.wait_ns))
        .collect();
    assert_eq!(waits, vec![(0, 700), (1, 700), (2, 700), (3, 0)]);
    assert!(first.consistent);
    let second = &m[1];
    assert_eq!(
        (second.seq, second.complete, second.missing_ranks),
        (2, false, 1)
    );
    let ranks: Vec<(u32, u64)> = second
        .participants
        .iter()
        .map(|p| (p.rank, p.duration_ns))
        .collect();
    assert_eq!(ranks, vec![(0, 600), (1, 500), (3, 400)]);
    assert_eq!(second.transfer_ns, 400);

    let mut odd = obs(1, 7, 0, 10);
    odd.bytes = 1;
    let bad = match_collectives(&[obs(0, 7, 0, 10), odd]);
    assert!(!bad[0].consistent);
}

#[test]
fn stats_job_wide_and_per_rank() {
    // Two all_reduces of 64 MiB on 4 ranks; in seq 1 rank 3 is late.
    let mut input = Vec::new();
    for rank in 0..4u32 {
        let (s, e) = if rank == 3 { (700, 1000) } else { (0, 1000) };
        input.push(obs(rank, 1, s, e));
        input.push(obs(rank, 2, 2000, 2500));
    }
    let job = collective_stats(&input, false);
    assert_eq!(job.len(), 1);
    let s = &job[0];
    assert_eq!((s.rank, s.calls, s.collectives), (None, 8, 2));
    assert_eq!(s.size_bucket.label(), "64MiB-128MiB");
    assert_eq!(s.total_bytes, 8 * 64 * MIB);
    assert_eq!(s.avg_bytes, 64 * MIB);
    // durations: 1000 x3, 300, 500 x4 -> total 5300, sorted [300,500x4,1000x3].
    assert_eq!(s.total_duration_ns, 5300);
    assert_eq!(s.mean_duration_ns, 662);
    assert_eq!(s.p50_duration_ns, 500);
    assert_eq!(s.p99_duration_ns, 1000);
    assert_eq!(s.wait_ns_total, 2100);
    assert_eq!(s.transfer_ns_total, 4 * 300 + 4 * 500);
    let alg = (8 * 64 * MIB) as f64 / 5300.0;
    assert!(close(s.algbw_gbps.unwrap(), alg));
    assert!(close(s.busbw_gbps.unwrap(), alg * 1.5));

    let per_rank = collective_stats(&input, true);
    assert_eq!(
        per_rank.iter().map(|s| s.rank).collect::<Vec<_>>(),
        vec![Some(0), Some(1), Some(2), Some(3)]
    );
    let r3 = &per_rank[3];
    assert_eq!(
        (
            r3.calls,
            r3.collectives,
            r3.total_duration_ns,
            r3.wait_ns_total
        ),
        (2, 2, 800, 0)
    );
    let r0 = &per_rank[0];
    assert_eq!(
        (r0.total_duration_ns, r0.wait_ns_total, r0.transfer_ns_total),
        (1500, 700, 800)
    );
}

#[test]
fn barrier_has_no_bandwidth() {
    let mut b = obs(0, 1, 0, 100);
    b.op = CollOp::Barrier;
    b.bytes = 0;
    let s = &collective_stats(&[b], false)[0];
    assert_eq!((s.algbw_gbps, s.busbw_gbps, s.calls), (None, None, 1));
}

#[test]
fn property_stats_invariants_and_order_independence() {
    let mut rng = Rng::new(99);
    let ops = [
        CollOp::AllReduce,
        CollOp::AllGather,
        CollOp::Broadcast,
        CollOp::Barrier,
    ];
    for _ in 0..200 {
        let mut input = Vec::new();
        for seq in 0..rng.below(12) {
            let pg = format!("pg{}", rng.below(2));
            let op = ops[rng.below(4) as usize];
            let bytes = rng.below(1 << 24);
            for rank in 0..4u32 {
                if rng.below(8) == 0 {
                    continue; // a missing rank
                }
                let start = rng.below(1_000_000);
                let mut o = obs(rank, seq, start, start + rng.below(50_000));
                (o.process_group, o.op, o.bytes) = (pg.clone(), op, bytes);
                input.push(o);
            }
        }
        for per_rank in [false, true] {
            let stats = collective_stats(&input, per_rank);
            assert_eq!(
                stats.iter().map(|s| s.calls).sum::<u64>(),
                input.len() as u64
            );
            for s in &stats {
                assert_eq!(s.wait_ns_total + s.transfer_ns_total, s.total_duration_ns);
                assert!(s.p50_duration_ns <= s.p99_duration_ns);
                assert!(s.collectives <= s.calls);
                if let (Some(a), Some(b)) = (s.algbw_gbps, s.busbw_gbps) {
                    assert!(b <= 2.0 * a + 1e-12);
                }
            }
            let mut shuffled = input.clone();
            rng.shuffle(&mut shuffled);
            assert_eq!(collective_stats(&shuffled, per_rank), stats);
        }
        for m in match_collectives(&input) {
            assert!(m.participants.iter().any(|p| p.wait_ns == 0));
        }
    }
}

/// Splits `input` as a store aggregating per `(process_group, seq, op,
/// dtype, bytes, group_size)` does: a call whose observations share one such
/// key and have distinct ranks becomes a [`UniformMatch`], the others stay
/// rows.
/// Uniform calls come with their durations, also by rank.
pub(super) type UniformCall = (CollectiveObs, Vec<u64>, std::collections::HashMap<u32, u64>);

pub(super) fn split_uniform(input: &[CollectiveObs]) -> (Vec<UniformCall>, Vec<CollectiveObs>) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut calls: BTreeMap<(String, u64), Vec<&CollectiveObs>> = BTreeMap::new();
    for o in input {
        calls
            .entry((o.process_group.clone(), o.seq))
            .or_default()
            .push(o);
    }
    let (mut uniform, mut rest) = (Vec::new(), Vec::new());
    for obs in calls.into_values() {
        let first = obs[0];
        let same = obs.iter().all(|o| {
            (o.op, &o.dtype, o.bytes, o.group_size)
                == (first.op, &first.dtype, first.bytes, first.group_size)
        });
        let ranks: BTreeSet<u32> = obs.iter().map(|o| o.rank).collect();
        if same && ranks.len() == obs.len() {
            uniform.push((
                first.clone(),
                obs.iter().map(|o| o.duration_ns()).collect(),
                obs.iter().map(|o| (o.rank, o.duration_ns())).collect(),
            ));
        } else {
            rest.extend(obs.into_iter().cloned());
        }
    }
    (uniform, rest)
}

#[test]
fn property_uniform_matches_give_the_row_statistics_to_the_bit() {
    let mut rng = Rng::new(4242);
    let ops = [
        CollOp::AllReduce,
        CollOp::ReduceScatter,
        CollOp::Send,
        CollOp::Barrier,
    ];
    let mut saw = (0, 0);
    for _ in 0..300 {
        let mut input = Vec::new();
        for seq in 0..rng.below(16) {
            let pg = format!("pg{}", rng.below(3));
            let op = ops[rng.below(4) as usize];
            let bytes = 1 + rng.below(1 << 26);
            let ranks = 1 + rng.below(6) as u32;
            for rank in 0..ranks {
                if rng.below(10) == 0 {
                    continue; // a missing rank
                }
                let start = rng.below(1_000_000);
                // Some inverted (0 ns), some long.
                let end = (start + rng.below(80_000)).saturating_sub(rng.below(2) * 40_000);
                let mut o = obs(rank, seq, start, end);
                (o.process_group, o.op, o.bytes, o.group_size) = (pg.clone(), op, bytes, ranks);
                if rng.below(12) == 0 {
                    o.bytes += 1; // a rank that disagrees
                }
                if rng.below(12) == 0 {
                    o.dtype = "bfloat16".into();
                }
                input.push(o.clone());
                if rng.below(15) == 0 {
                    o.start_ns += rng.below(3); // a duplicate observation
                    input.push(o);
                }
            }
        }
        let (uniform, rest) = split_uniform(&input);
        saw.0 += uniform.len();
        saw.1 += rest.len();
        let matches: Vec<UniformMatch<'_>> = uniform
            .iter()
            .rev() // any order
            .map(|(o, d, _)| UniformMatch {
                process_group: &o.process_group,
                seq: o.seq,
                op: o.op,
                dtype: &o.dtype,
                bytes: o.bytes,
                group_size: o.group_size,
                durations_ns: d,
            })
            .collect();
        assert_eq!(
            job_collective_stats(&matches, &rest),
            collective_stats(&input, false)
        );
        // Per rank: the rank's own duration in each uniform call it joined.
        let per_rank = collective_stats(&input, true);
        for rank in 0..6u32 {
            let joined: Vec<(CallSummary<'_>, u64)> = uniform
                .iter()
                .zip(matches.iter().rev())
                .filter_map(|((_, _, by_rank), m)| Some((m.summary()?, *by_rank.get(&rank)?)))
                .collect();
            let want: Vec<CollectiveStats> = per_rank
                .iter()
                .filter(|s| s.rank == Some(rank))
                .cloned()
                .collect();
            assert_eq!(rank_collective_stats(rank, &joined, &rest), want);
        }
    }
    assert!(saw.0 > 300 && saw.1 > 300, "both kinds exercised: {saw:?}");
}
