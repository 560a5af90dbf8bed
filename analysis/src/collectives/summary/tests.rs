use std::collections::BTreeMap;

use super::super::stats::{collective_stats, UniformMatch};
use super::super::tests::{obs, split_uniform};
use super::*;
use crate::stats::percentile_nearest_rank_unsorted;
use crate::test_rng::Rng;

/// Groups the uniform calls of `uniform` by statistics key, with the
/// nearest-rank percentiles of each group's durations, as the store's
/// query does.
fn groups_of<'a>(uniform: &'a [UniformMatch<'a>]) -> Vec<GroupSummary<'a>> {
    type Key<'k> = (&'k str, CollOp, &'k str, super::super::SizeBucket);
    let mut by_key: BTreeMap<Key<'a>, (Vec<CallSummary<'a>>, Vec<u64>)> = BTreeMap::new();
    for u in uniform {
        let e = by_key
            .entry((u.process_group, u.op, u.dtype, size_bucket(u.bytes)))
            .or_default();
        e.0.extend(u.summary());
        e.1.extend_from_slice(u.durations_ns);
    }
    by_key
        .into_values()
        .rev() // any order
        .map(|(calls, mut d)| GroupSummary {
            calls,
            p50_duration_ns: percentile_nearest_rank_unsorted(&mut d, 50.0).unwrap_or(0),
            p99_duration_ns: percentile_nearest_rank_unsorted(&mut d, 99.0).unwrap_or(0),
        })
        .collect()
}

#[test]
fn property_group_summaries_give_the_row_statistics_to_the_bit() {
    let mut rng = Rng::new(3838);
    let ops = [
        CollOp::AllReduce,
        CollOp::AllGather,
        CollOp::Recv,
        CollOp::Barrier,
    ];
    let mut saw = 0;
    for _ in 0..300 {
        let mut input = Vec::new();
        for seq in 0..rng.below(16) {
            let pg = format!("pg{}", rng.below(3));
            let op = ops[rng.below(4) as usize];
            // Sizes within and across power-of-two buckets.
            let bytes = rng.below(3) * (1 << 20) + rng.below(1 << 18);
            let ranks = 1 + rng.below(9) as u32;
            for rank in 0..ranks {
                if rng.below(10) == 0 {
                    continue; // a missing rank
                }
                let start = rng.below(1_000_000);
                // Ties, inverted (0 ns) and long calls.
                let end = (start + 1_000 * rng.below(30)).saturating_sub(rng.below(2) * 5_000);
                let mut o = obs(rank, seq, start, end);
                (o.process_group, o.op, o.bytes, o.group_size) = (pg.clone(), op, bytes, ranks);
                if rng.below(4) == 0 {
                    o.dtype = "bfloat16".into(); // every rank of the call agrees
                }
                input.push(o);
            }
        }
        // Every rank of a call agrees on the dtype: make it the first's.
        for i in 1..input.len() {
            if (input[i].process_group.as_str(), input[i].seq)
                == (input[i - 1].process_group.as_str(), input[i - 1].seq)
            {
                input[i].dtype = input[i - 1].dtype.clone();
            }
        }
        let (uniform, rest) = split_uniform(&input);
        assert!(rest.is_empty(), "every call is uniform");
        saw += uniform.len();
        let matches: Vec<UniformMatch<'_>> = uniform
            .iter()
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
            job_collective_stats_of_groups(&groups_of(&matches)),
            collective_stats(&input, false)
        );
    }
    assert!(saw > 1_000, "calls exercised: {saw}");
}

#[test]
fn a_group_without_calls_is_left_out() {
    let g = GroupSummary {
        calls: Vec::new(),
        p50_duration_ns: 0,
        p99_duration_ns: 0,
    };
    assert!(job_collective_stats_of_groups(&[g]).is_empty());
}
