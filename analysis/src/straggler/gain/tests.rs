use super::*;

fn row(step: u64, rank: u32, wait_ns: u64) -> RankStepWait {
    RankStepWait {
        step,
        rank,
        step_time_ns: 1000,
        // Work mirrors the wait: whoever waits less worked more.
        work_ns: 800 - wait_ns.min(800),
        wait_ns,
    }
}

#[test]
fn the_gain_is_what_the_next_slowest_rank_waited_for_the_straggler() {
    // Rank 3 arrives 200 ns after the next-slowest (rank 1, wait 200).
    let rows = [row(0, 0, 250), row(0, 1, 200), row(0, 2, 260), row(0, 3, 0)];
    assert_eq!(expected_gain_pct(&rows, 3), Some(20.0));
    // A healthy rank "costs" nothing: others waited less than it.
    assert_eq!(expected_gain_pct(&rows, 1), Some(0.0));
    // Steps without the rank or without peers do not count.
    assert_eq!(expected_gain_pct(&[row(0, 3, 0)], 3), None);
    assert_eq!(expected_gain_pct(&rows, 9), None);
}

#[test]
fn hidden_waits_do_not_count_beyond_the_excess_work() {
    // Overlapped collectives: peers "wait" 500 ns but S worked only
    // 100 ns more than the next-slowest.
    let r = |rank, work_ns, wait_ns| RankStepWait {
        step: 0,
        rank,
        step_time_ns: 1000,
        work_ns,
        wait_ns,
    };
    let rows = [r(0, 700, 500), r(1, 690, 520), r(2, 800, 0)];
    assert_eq!(expected_gain_pct(&rows, 2), Some(10.0));
}

#[test]
fn an_other_verdict_costs_what_its_next_peer_waited() {
    // Rank 3's extra time is outside its phases: its work is the
    // smallest, yet the others waited 300 ns or more for it.
    let r = |rank, work_ns, wait_ns| RankStepWait {
        step: 0,
        rank,
        step_time_ns: 1000,
        work_ns,
        wait_ns,
    };
    let rows = [r(0, 500, 320), r(1, 520, 300), r(2, 510, 330), r(3, 200, 0)];
    let peers = step_peers(&rows);
    let own = || rows.iter().filter(|r| r.rank == 3);
    assert_eq!(expected_gain_pct_of(&peers, own(), 3), Some(0.0));
    assert_eq!(
        expected_gain_pct_for(&peers, own(), 3, StragglerCause::Other),
        Some(30.0)
    );
    for c in [
        StragglerCause::Compute,
        StragglerCause::Input,
        StragglerCause::Communication,
    ] {
        assert_eq!(
            gain_per_step_for(&peers, own(), 3, c),
            gain_per_step_of(&peers, own(), 3)
        );
    }
    // Capped at the step time.
    let rows = [r(0, 1, 5000), r(1, 1, 5000), r(2, 1, 0)];
    let g = gain_per_step_for(&step_peers(&rows), &rows[2..], 2, StragglerCause::Other);
    assert_eq!(g.get(&0), Some(&(1000, 1000)));
}

#[test]
fn steps_are_weighted_by_their_time_and_the_gain_is_capped() {
    let mut rows = vec![row(0, 0, 100), row(0, 1, 0)];
    rows.push(RankStepWait {
        step: 1,
        rank: 0,
        step_time_ns: 3000,
        work_ns: 0,
        wait_ns: 9000,
    });
    rows.push(RankStepWait {
        step: 1,
        rank: 1,
        step_time_ns: 3000,
        work_ns: 9000,
        wait_ns: 0,
    });
    // (100 + min(9000, 3000)) / (1000 + 3000)
    let g = expected_gain_pct(&rows, 1).unwrap();
    assert!((g - 77.5).abs() < 1e-9, "{g}");
}

/// The definition, rank by rank (what `gain_per_step` computed before
/// the per-step peers were factored out).
fn reference(rows: &[RankStepWait], rank: u32) -> BTreeMap<u64, (u64, u64)> {
    let mut out = BTreeMap::new();
    let steps: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.step).collect();
    for step in steps {
        let ranks: Vec<&RankStepWait> = rows.iter().filter(|r| r.step == step).collect();
        let Some(s) = ranks.iter().find(|r| r.rank == rank) else {
            continue;
        };
        let others = ranks.iter().filter(|r| r.rank != rank);
        let Some(next_wait) = others.clone().map(|r| r.wait_ns).min() else {
            continue;
        };
        let next_work = others.map(|r| r.work_ns).max().unwrap_or(0);
        let mut times: Vec<u64> = ranks.iter().map(|r| r.step_time_ns).collect();
        times.sort_unstable();
        let t = times[times.len() / 2];
        let g = next_wait
            .saturating_sub(s.wait_ns)
            .min(s.work_ns.saturating_sub(next_work));
        out.insert(step, (g.min(t), t));
    }
    out
}

#[test]
fn per_step_peers_give_the_definitions_gain_for_every_rank() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for case in 0..300 {
        let ranks = 1 + next(6) as u32;
        let mut rows = Vec::new();
        for step in 0..1 + next(4) {
            for rank in 0..ranks {
                if next(5) == 0 {
                    continue; // a rank missing from a step
                }
                // Small ranges: ties are common.
                rows.push(RankStepWait {
                    step,
                    rank,
                    step_time_ns: 1 + next(8),
                    work_ns: next(6),
                    wait_ns: next(6),
                });
            }
        }
        for rank in 0..ranks + 1 {
            assert_eq!(
                gain_per_step(&rows, rank),
                reference(&rows, rank),
                "case {case}, rank {rank}: {rows:?}"
            );
        }
    }
}

/// The sorting definition of [`StepPeers`] (what `step_peers` computed
/// before the linear pass).
fn sorted_peers(step: u64, rows: &[RankStepWait]) -> StepPeers {
    let mut times: Vec<u64> = rows.iter().map(|r| r.step_time_ns).collect();
    times.sort_unstable();
    let mut by_wait: Vec<(u64, u32)> = rows.iter().map(|r| (r.wait_ns, r.rank)).collect();
    by_wait.sort_unstable();
    let mut by_work: Vec<(u64, u32)> = rows.iter().map(|r| (r.work_ns, r.rank)).collect();
    by_work.sort_unstable_by(|a, b| b.cmp(a));
    StepPeers {
        step,
        ranks: rows.len() as u64,
        median_step_ns: times[times.len() / 2],
        min_wait: (by_wait[0].1, by_wait[0].0),
        second_min_wait_ns: by_wait.get(1).map_or(0, |w| w.0),
        max_work: (by_work[0].1, by_work[0].0),
        second_max_work_ns: by_work.get(1).map_or(0, |w| w.0),
    }
}

#[test]
fn one_pass_peers_equal_the_sorted_ones_in_any_row_order() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    assert_eq!(peers_of_step(0, &[]), None);
    for case in 0..2000 {
        let n = 1 + next(9) as usize;
        let mut rows: Vec<RankStepWait> = (0..n as u32)
            .map(|rank| RankStepWait {
                step: 7,
                rank,
                step_time_ns: next(5),
                work_ns: next(4),
                wait_ns: next(4),
            })
            .collect();
        // Any order: shuffled.
        for i in (1..rows.len()).rev() {
            rows.swap(i, next(i as u64 + 1) as usize);
        }
        assert_eq!(
            peers_of_step(7, &rows),
            Some(sorted_peers(7, &rows)),
            "case {case}: {rows:?}"
        );
    }
}
