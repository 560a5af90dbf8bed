use super::*;
use crate::straggler::tests::step_stats;
use crate::test_rng::Rng;

const MS: u64 = 1_000_000;

/// Per-rank multipliers for one step: (compute, dataloader, transfer).
type Slow = fn(u32, u64) -> (f64, f64, f64);

fn normal(_: u32, _: u64) -> (f64, f64, f64) {
    (1.0, 1.0, 1.0)
}

/// A synchronous data-parallel job: compute 300 ms, dataloader 20 ms,
/// log-normal jitter (2.5% compute, 3% input), 2% of rank-steps with a 5%
/// hiccup, a persistent per-rank bias of ~1%, and a step-end collective
/// (wait = slowest work - own work, transfer 50 ms shared by the group).
fn simulate(seed: u64, ranks: u32, steps: u64, slow: Slow) -> Vec<Vec<RankStepStats>> {
    let mut rng = Rng::new(seed);
    let bias: Vec<f64> = (0..ranks).map(|_| (0.01 * rng.normal()).exp()).collect();
    (0..steps)
        .map(|step| {
            let transfer_base = 50.0 * MS as f64 * (0.01 * rng.normal()).exp();
            let mut work = Vec::new();
            let mut transfer = Vec::new();
            for rank in 0..ranks {
                let (fc, fd, ft) = slow(rank, step);
                let hiccup = if rng.below(50) == 0 { 1.05 } else { 1.0 };
                let c = 300.0
                    * MS as f64
                    * bias[rank as usize]
                    * (0.025 * rng.normal()).exp()
                    * hiccup
                    * fc;
                let d = 20.0 * MS as f64 * (0.03 * rng.normal()).exp() * fd;
                work.push((c as u64, d as u64));
                transfer.push((transfer_base * ft) as u64);
            }
            step_stats(step, &work, &transfer)
        })
        .collect()
}

fn run(tracker: &mut StragglerTracker, job: &[Vec<RankStepStats>]) -> Vec<(u64, VerdictChange)> {
    let mut out = Vec::new();
    for (step, stats) in job.iter().enumerate() {
        for c in tracker.observe(step as u64, stats) {
            out.push((step as u64, c));
        }
    }
    out
}

#[test]
fn balanced_jobs_with_jitter_give_no_verdict() {
    for seed in 0..5 {
        let job = simulate(seed, 16, 200, normal);
        let mut t = StragglerTracker::new(StragglerPolicy::default());
        let changes = run(&mut t, &job);
        assert!(changes.is_empty(), "seed {seed}: {changes:?}");
        assert!(t.verdicts().is_empty());
    }
}

#[test]
fn compute_straggler_is_found_at_the_third_step() {
    let job = simulate(1, 16, 200, |rank, _| {
        if rank == 5 {
            (1.3, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    let changes = run(&mut t, &job);
    let (step, first) = &changes[0];
    assert_eq!(*step, 2, "K = 3: active exactly at the third step");
    let VerdictChange::Activated(v) = first else {
        panic!("{first:?}")
    };
    assert_eq!(
        (v.rank, v.first_step, v.last_step, v.steps_flagged),
        (5, 0, 2, 3)
    );
    assert_eq!(v.cause, StragglerCause::Compute);
    assert_eq!(v.node, "node0");
    // Only rank 5 ever appears, and it stays active to the end.
    assert!(changes.iter().all(|(_, c)| c.verdict().rank == 5));
    let all = t.verdicts();
    assert_eq!(all.len(), 1);
    let v = &all[0];
    assert!(v.active && v.steps_flagged == 200 && v.last_step == 199);
    // Work = 1.3 x 300 + 20 vs 320: slowdown ~1.28.
    assert!((v.slowdown - 410.0 / 320.0).abs() < 0.02, "{}", v.slowdown);
    assert!(v.score > 3.5);
}

#[test]
fn input_straggler_has_cause_input() {
    let job = simulate(2, 16, 50, |rank, _| {
        if rank == 11 {
            (1.0, 4.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    run(&mut t, &job);
    let v = t.active_verdicts();
    assert_eq!(v.len(), 1);
    assert_eq!(
        (v[0].rank, v[0].cause, v[0].first_step),
        (11, StragglerCause::Input, 0)
    );
}

#[test]
fn communication_straggler() {
    let job = simulate(3, 16, 30, |rank, _| {
        if rank == 2 {
            (1.0, 1.0, 1.5)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    run(&mut t, &job);
    let v = t.active_verdicts();
    assert_eq!(v.len(), 1);
    assert_eq!((v[0].rank, v[0].cause), (2, StragglerCause::Communication));
    assert!((v[0].slowdown - 1.5).abs() < 0.01);
}

#[test]
fn recovery_clears_and_keeps_history() {
    // Rank 9 is slow in steps 10..30, then recovers.
    let job = simulate(4, 16, 60, |rank, step| {
        if rank == 9 && (10..30).contains(&step) {
            (1.3, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    let changes = run(&mut t, &job);
    let kinds: Vec<(u64, &str)> = changes
        .iter()
        .filter_map(|(s, c)| match c {
            VerdictChange::Activated(_) => Some((*s, "activated")),
            VerdictChange::Cleared(_) => Some((*s, "cleared")),
            VerdictChange::Updated(_) => None,
        })
        .collect();
    // Flagged 10..=29; the window of 5 holds no flag from step 34 on.
    assert_eq!(kinds, vec![(12, "activated"), (34, "cleared")]);
    let all = t.verdicts();
    assert_eq!(all.len(), 1);
    let v = &all[0];
    assert_eq!(
        (v.rank, v.first_step, v.last_step, v.steps_flagged, v.active),
        (9, 10, 29, 20, false)
    );
    assert!(t.active_verdicts().is_empty());
}

#[test]
fn intermittent_flags_below_k_give_no_verdict() {
    // Slow every third step: at most 2 flags in any 5-step window.
    let job = simulate(6, 16, 60, |rank, step| {
        if rank == 0 && step % 3 == 0 {
            (1.3, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    assert!(run(&mut t, &job).is_empty());
}

#[test]
fn rank_order_does_not_matter() {
    let job = simulate(8, 16, 80, |rank, step| {
        if rank == 3 && step > 20 {
            (1.25, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut a = StragglerTracker::new(StragglerPolicy::default());
    let want = run(&mut a, &job);
    assert!(!want.is_empty());
    let mut rng = Rng::new(77);
    let shuffled: Vec<Vec<RankStepStats>> = job
        .iter()
        .map(|s| {
            let mut s = s.clone();
            rng.shuffle(&mut s);
            s
        })
        .collect();
    let mut b = StragglerTracker::new(StragglerPolicy::default());
    assert_eq!(run(&mut b, &shuffled), want);
    assert_eq!(b.verdicts(), a.verdicts());
}

#[test]
fn out_of_order_steps_are_ignored() {
    let job = simulate(9, 8, 3, |rank, _| {
        if rank == 1 {
            (1.5, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    assert!(t.observe(10, &job[0]).is_empty());
    assert!(t.observe(10, &job[1]).is_empty());
    assert!(t.observe(9, &job[1]).is_empty());
    assert_eq!(t.ignored_steps(), 2);
    assert!(t.observe(11, &job[1]).is_empty());
    let changes = t.observe(12, &job[2]);
    assert_eq!(changes.len(), 1);
    assert_eq!(t.last_step(), Some(12));
    let v = changes[0].verdict();
    assert_eq!((v.rank, v.first_step, v.last_step), (1, 10, 12));
}

#[test]
fn missing_rank_steps_count_as_not_flagged() {
    // Policy K = 2 of N = 3: a straggler absent from steps clears.
    let policy = StragglerPolicy::try_new(3.5, 1.1, 3, 2, 4, 0.01).unwrap();
    let job = simulate(10, 8, 10, |rank, _| {
        if rank == 7 {
            (1.4, 1.0, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        }
    });
    let mut t = StragglerTracker::new(policy);
    assert!(t.observe(0, &job[0]).is_empty());
    let c = t.observe(1, &job[1]);
    assert!(matches!(&c[..], [VerdictChange::Activated(v)] if v.rank == 7));
    let without_7: Vec<Vec<RankStepStats>> = job.iter().map(|s| s[..7].to_vec()).collect();
    assert!(t.observe(2, &without_7[2]).is_empty());
    assert!(t.observe(3, &without_7[3]).is_empty());
    let c = t.observe(4, &without_7[4]);
    assert!(
        matches!(&c[..], [VerdictChange::Cleared(v)] if v.rank == 7 && !v.active && v.last_step == 1)
    );
}

/// `job` with `extra_ns` of time outside the phases on `rank` in every
/// step (before the step-end collective: it moves the others' waits).
fn with_outside_time(
    mut job: Vec<Vec<RankStepStats>>,
    rank: u32,
    extra_ns: u64,
) -> Vec<Vec<RankStepStats>> {
    for step in &mut job {
        // Arrival at the collective: work (= step time - transfer - wait).
        let arrive = |r: &RankStepStats| {
            r.step_time_ns - (r.comm_ns - r.comm_wait_ns) - r.comm_wait_ns
                + if r.rank == rank { extra_ns } else { 0 }
        };
        let last = step.iter().map(arrive).max().unwrap_or(0);
        let arrivals: Vec<u64> = step.iter().map(arrive).collect();
        for (r, a) in step.iter_mut().zip(arrivals) {
            let transfer = r.comm_ns - r.comm_wait_ns;
            r.comm_wait_ns = last - a;
            r.comm_ns = r.comm_wait_ns + transfer;
            r.step_time_ns = last + transfer;
        }
    }
    job
}

#[test]
fn time_outside_the_phases_is_found_with_cause_other() {
    let job = with_outside_time(simulate(4, 16, 40, normal), 7, 120 * MS);
    let mut t = StragglerTracker::new(StragglerPolicy::default());
    let changes = run(&mut t, &job);
    let (step, first) = &changes[0];
    assert_eq!(*step, 2, "{changes:?}");
    let VerdictChange::Activated(v) = first else {
        panic!("{first:?}")
    };
    assert_eq!((v.rank, v.cause), (7, StragglerCause::Other));
    assert!(changes.iter().all(|(_, c)| c.verdict().rank == 7));
    let v = &t.active_verdicts()[0];
    assert_eq!(v.steps_flagged, 40);
    // ~120 ms above the median own time (less the jitter it absorbs).
    let excess_ms = v.excess_ns as f64 / MS as f64;
    assert!((100.0..=125.0).contains(&excess_ms), "{excess_ms}");
}

#[test]
fn a_rank_last_by_a_hair_in_every_step_gives_no_verdict() {
    for seed in 0..5 {
        // 1.5 ms outside the phases on rank 3 every step: it is (almost
        // always) the one the others wait for, by 0.4% of the step.
        let job = with_outside_time(simulate(seed, 16, 200, normal), 3, 3 * MS / 2);
        let mut t = StragglerTracker::new(StragglerPolicy::default());
        let changes = run(&mut t, &job);
        assert!(changes.is_empty(), "seed {seed}: {changes:?}");
        // And exactly last, with no jitter at all: still none.
        let exact: Vec<Vec<RankStepStats>> = (0..50)
            .map(|s| {
                let mut extra = vec![0; 8];
                extra[3] = MS;
                crate::straggler::tests::outside_stats(s, &extra)
            })
            .collect();
        let mut t = StragglerTracker::new(StragglerPolicy::default());
        assert!(run(&mut t, &exact).is_empty());
    }
}

#[test]
fn an_other_verdict_does_not_depend_on_rank_order() {
    let job = with_outside_time(simulate(6, 12, 20, normal), 4, 80 * MS);
    let mut rng = Rng::new(3);
    let mut a = StragglerTracker::new(StragglerPolicy::default());
    let mut b = StragglerTracker::new(StragglerPolicy::default());
    for (step, stats) in job.iter().enumerate() {
        let mut shuffled = stats.clone();
        rng.shuffle(&mut shuffled);
        assert_eq!(
            a.observe(step as u64, stats),
            b.observe(step as u64, &shuffled)
        );
    }
    assert_eq!(a.verdicts(), b.verdicts());
    assert_eq!(a.verdicts()[0].cause, StragglerCause::Other);
}
