use super::*;
use crate::test_rng::Rng;

const MS: u64 = 1_000_000;

/// Ranks with equal work; `wait` = max work - own work (a step-end collective).
pub(crate) fn step_stats(step: u64, work: &[(u64, u64)], transfer: &[u64]) -> Vec<RankStepStats> {
    let max_work = work.iter().map(|(c, d)| c + d).max().unwrap_or(0);
    work.iter()
        .zip(transfer)
        .enumerate()
        .map(|(rank, (&(compute_ns, dataloader_ns), &t))| {
            let wait = max_work - compute_ns - dataloader_ns;
            RankStepStats {
                rank: rank as u32,
                node: format!("node{}", rank / 8),
                step,
                compute_ns,
                dataloader_ns,
                step_time_ns: max_work + t,
                comm_wait_ns: wait,
                comm_ns: wait + t,
            }
        })
        .collect()
}

/// Ranks of equal work (300 ms compute, 20 ms input, 50 ms transfer) where
/// rank r also spends `extra[r]` outside its phases before the step-end
/// collective: wait = the slowest rank's time - own.
pub(crate) fn outside_stats(step: u64, extra: &[u64]) -> Vec<RankStepStats> {
    let max = extra.iter().max().copied().unwrap_or(0);
    extra
        .iter()
        .enumerate()
        .map(|(rank, &e)| RankStepStats {
            rank: rank as u32,
            node: format!("node{}", rank / 8),
            step,
            compute_ns: 300 * MS,
            dataloader_ns: 20 * MS,
            step_time_ns: 320 * MS + max + 50 * MS,
            comm_wait_ns: max - e,
            comm_ns: max - e + 50 * MS,
        })
        .collect()
}

fn balanced(n: usize) -> (Vec<(u64, u64)>, Vec<u64>) {
    (vec![(300 * MS, 20 * MS); n], vec![50 * MS; n])
}

#[test]
fn policy_validation() {
    let d = StragglerPolicy::default();
    assert_eq!(
        (
            d.z_threshold(),
            d.min_slowdown(),
            d.window_steps(),
            d.min_flagged(),
            d.min_ranks(),
            d.mad_floor_frac()
        ),
        (3.5, 1.10, 5, 3, 4, 0.01)
    );
    assert_eq!(StragglerPolicy::try_new(3.5, 1.1, 5, 3, 4, 0.01), Ok(d));
    let bad = [
        (
            StragglerPolicy::try_new(0.0, 1.1, 5, 3, 4, 0.01),
            PolicyError::ZThreshold(0.0),
        ),
        (
            StragglerPolicy::try_new(f64::INFINITY, 1.1, 5, 3, 4, 0.01),
            PolicyError::ZThreshold(f64::INFINITY),
        ),
        (
            StragglerPolicy::try_new(3.5, 0.9, 5, 3, 4, 0.01),
            PolicyError::MinSlowdown(0.9),
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 0, 0, 4, 0.01),
            PolicyError::WindowSteps(0),
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5000, 3, 4, 0.01),
            PolicyError::WindowSteps(5000),
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5, 6, 4, 0.01),
            PolicyError::MinFlagged {
                min_flagged: 6,
                window_steps: 5,
            },
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5, 0, 4, 0.01),
            PolicyError::MinFlagged {
                min_flagged: 0,
                window_steps: 5,
            },
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5, 3, 2, 0.01),
            PolicyError::MinRanks(2),
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5, 3, 4, 0.0),
            PolicyError::MadFloorFrac(0.0),
        ),
        (
            StragglerPolicy::try_new(3.5, 1.1, 5, 3, 4, 1.5),
            PolicyError::MadFloorFrac(1.5),
        ),
    ];
    for (got, want) in bad {
        assert_eq!(got, Err(want));
    }
    assert!(StragglerPolicy::try_new(3.5, f64::NAN, 5, 3, 4, 0.01).is_err());
    assert_eq!(d.min_gain_pct(), 2.0);
    assert_eq!(d.with_min_gain_pct(0.0).map(|p| p.min_gain_pct()), Ok(0.0));
    for bad in [-1.0, 100.0, f64::NAN, f64::INFINITY] {
        let got = d.with_min_gain_pct(bad).unwrap_err();
        assert!(got.to_string().contains("min_gain_pct"), "{got}");
    }
    assert!(PolicyError::MinRanks(2).to_string().contains("min_ranks"));
}

#[test]
fn score_step_table() {
    let p = StragglerPolicy::default();
    let t = vec![50 * MS; 8];
    // (description, work per rank, expected flags as (rank, cause))
    type Case = (&'static str, Vec<(u64, u64)>, Vec<(u32, StragglerCause)>);
    let mut cases: Vec<Case> = Vec::new();
    cases.push(("balanced", balanced(8).0, vec![]));
    let mut w = balanced(8).0;
    w[3].0 = 315 * MS; // +5% of work: MAD 0 -> floor 1% -> z 3.3, slowdown 1.05
    cases.push((
        "slightly slower rank of a perfectly balanced job",
        w,
        vec![],
    ));
    let mut w = balanced(8).0;
    w[3].0 = 360 * MS; // +60 ms of 320 ms work: slowdown 1.19, z huge
    cases.push(("compute straggler", w, vec![(3, StragglerCause::Compute)]));
    let mut w = balanced(8).0;
    w[6].1 = 80 * MS; // dataloader +60 ms
    cases.push(("input straggler", w, vec![(6, StragglerCause::Input)]));
    let mut w = balanced(8).0;
    w[1].0 = 400 * MS;
    w[5].0 = 420 * MS;
    cases.push((
        "two stragglers",
        w,
        vec![(1, StragglerCause::Compute), (5, StragglerCause::Compute)],
    ));
    for (name, work, want) in cases {
        let got: Vec<(u32, StragglerCause)> = score_step(&p, &step_stats(7, &work, &t))
            .iter()
            .map(|f| (f.rank, f.cause))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn slowdown_and_score_values() {
    let p = StragglerPolicy::default();
    let (mut w, t) = balanced(8);
    w[2] = (396 * MS, 20 * MS); // work 416 vs median 320: slowdown 1.3
    let flags = score_step(&p, &step_stats(4, &w, &t));
    assert_eq!(flags.len(), 1);
    let f = flags[0];
    assert_eq!((f.rank, f.step, f.cause), (2, 4, StragglerCause::Compute));
    assert!((f.slowdown - 1.3).abs() < 1e-12);
    // MAD = 0 -> floored at 1% of 320 ms = 3.2 ms; z = 0.6745 * 96 / 3.2.
    assert!((f.score - 0.6745 * 96.0 / 3.2).abs() < 1e-9);
}

#[test]
fn too_few_ranks_or_zero_work_flags_nothing() {
    let p = StragglerPolicy::default();
    let work = [(300 * MS, 0), (300 * MS, 0), (900 * MS, 0)];
    assert!(score_step(&p, &step_stats(0, &work, &[MS; 3])).is_empty());
    assert!(score_step(&p, &step_stats(0, &[(0, 0); 8], &[0; 8])).is_empty());
    assert!(score_step(&p, &[]).is_empty());
}

#[test]
fn a_slow_rank_that_waits_is_not_the_straggler() {
    // Rank 0 computes longer but still waits the most: someone else holds
    // the job, so it is not flagged.
    let p = StragglerPolicy::default();
    let (mut w, t) = balanced(8);
    w[0].0 = 400 * MS;
    let mut stats = step_stats(0, &w, &t);
    stats[0].comm_wait_ns = 200 * MS;
    stats[0].comm_ns = 250 * MS;
    assert!(score_step(&p, &stats).is_empty());
}

#[test]
fn slow_transfer_with_normal_compute_is_communication() {
    let p = StragglerPolicy::default();
    let (w, mut t) = balanced(8);
    t[4] = 80 * MS;
    let flags = score_step(&p, &step_stats(0, &w, &t));
    assert_eq!(flags.len(), 1);
    assert_eq!(
        (flags[0].rank, flags[0].cause),
        (4, StragglerCause::Communication)
    );
    assert!((flags[0].slowdown - 1.6).abs() < 1e-12);
}

#[test]
fn duplicates_and_order_do_not_matter() {
    let p = StragglerPolicy::default();
    let mut rng = Rng::new(5);
    let (mut w, t) = balanced(12);
    w[9].0 = 390 * MS;
    let stats = step_stats(1, &w, &t);
    let want = score_step(&p, &stats);
    assert_eq!(want.len(), 1);
    for _ in 0..20 {
        let mut s = stats.clone();
        s.push(stats[3].clone());
        rng.shuffle(&mut s);
        assert_eq!(score_step(&p, &s), want);
    }
}

#[test]
fn cause_names() {
    let names: Vec<String> = StragglerCause::ALL.iter().map(|c| c.to_string()).collect();
    assert_eq!(names, ["compute", "input", "communication", "other"]);
    for c in StragglerCause::ALL {
        assert_eq!(StragglerCause::parse(c.as_str()), Some(c));
    }
    assert_eq!(StragglerCause::parse("gpu"), None);
}

#[test]
fn time_outside_the_phases_is_cause_other_with_its_amount() {
    let p = StragglerPolicy::default();
    // (description, extra ms per rank, expected (rank, cause, excess ms))
    type Case = (&'static str, Vec<u64>, Vec<(u32, StragglerCause, u64)>);
    let cases: Vec<Case> = vec![
        ("balanced", vec![0; 8], vec![]),
        (
            "last by a hair (1 ms of 370)",
            vec![0, 0, 0, 0, 0, 1, 0, 0],
            vec![],
        ),
        (
            "last by a little more (5 ms: 1.4% of the step)",
            vec![0, 0, 5, 0, 0, 0, 0, 0],
            vec![],
        ),
        (
            "170 ms between backward and the optimizer",
            vec![0, 0, 170, 0, 0, 0, 0, 0],
            vec![(2, StragglerCause::Other, 170)],
        ),
        (
            "with some jitter on the others",
            vec![3, 0, 2, 1, 0, 90, 2, 1],
            vec![(5, StragglerCause::Other, 89)],
        ),
    ];
    for (name, extra, want) in cases {
        let extra: Vec<u64> = extra.iter().map(|e| e * MS).collect();
        let got: Vec<(u32, StragglerCause, u64)> = score_step(&p, &outside_stats(3, &extra))
            .iter()
            .map(|f| (f.rank, f.cause, f.excess_ns.div_ceil(MS)))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn own_time_explained_by_compute_keeps_cause_compute() {
    let p = StragglerPolicy::default();
    // Small steps: compute 100 ms, transfer 10 ms. Rank 1 computes 9 ms more
    // (1.09x: below min_slowdown) and spends 6 ms elsewhere: its own time
    // is 1.14x the median, 60% of the excess is compute.
    let mut stats: Vec<RankStepStats> = (0..6)
        .map(|rank| RankStepStats {
            rank,
            node: "n".into(),
            step: 0,
            compute_ns: 100 * MS,
            dataloader_ns: 0,
            step_time_ns: 125 * MS,
            comm_wait_ns: 15 * MS,
            comm_ns: 25 * MS,
        })
        .collect();
    stats[1].compute_ns = 109 * MS;
    stats[1].comm_wait_ns = 0;
    stats[1].comm_ns = 10 * MS;
    let flags = score_step(&p, &stats);
    assert_eq!(flags.len(), 1, "{flags:?}");
    assert_eq!(
        (flags[0].rank, flags[0].cause),
        (1, StragglerCause::Compute)
    );
    assert_eq!(flags[0].excess_ns, 15 * MS);
    // 9 ms of compute no longer explains 25 ms of own time: `other`.
    stats[1].step_time_ns = 135 * MS;
    for s in stats.iter_mut().filter(|s| s.rank != 1) {
        s.step_time_ns = 135 * MS;
        s.comm_wait_ns = 25 * MS;
        s.comm_ns = 35 * MS;
    }
    let flags = score_step(&p, &stats);
    assert_eq!((flags[0].rank, flags[0].cause), (1, StragglerCause::Other));
}

#[test]
fn an_own_time_outlier_needs_the_least_wait_and_the_minimum_gain() {
    let extra: Vec<u64> = [0, 0, 170, 0, 0, 0].iter().map(|e| e * MS).collect();
    let stats = outside_stats(0, &extra);
    // The others waited 170 ms of a 540 ms step: 31%.
    let p = StragglerPolicy::default();
    assert_eq!(score_step(&p, &stats).len(), 1);
    let strict = p.with_min_gain_pct(32.0).unwrap();
    assert!(score_step(&strict, &stats).is_empty());
    let loose = p.with_min_gain_pct(31.0).unwrap();
    assert_eq!(score_step(&loose, &stats).len(), 1);
    // Not the least wait: someone else holds the job.
    let mut s = stats.clone();
    s[2].comm_wait_ns = 200 * MS;
    s[2].comm_ns = 250 * MS;
    assert!(score_step(&p, &s).is_empty());
    // Waits summed over collectives in flight together count at most the
    // time in collectives: 900 ms "waited" in a 540 ms step is the 220 ms
    // the others spent in collectives (their transfer included).
    let mut s = stats.clone();
    for r in s.iter_mut().filter(|r| r.rank != 2) {
        r.comm_wait_ns = 900 * MS;
    }
    let flags = score_step(&p, &s);
    assert_eq!(
        (flags[0].rank, flags[0].excess_ns),
        (2, 220 * MS),
        "{flags:?}"
    );
    // Order and duplicates do not matter.
    let want = score_step(&p, &stats);
    let mut rng = Rng::new(9);
    for _ in 0..20 {
        let mut s = stats.clone();
        s.push(stats[4].clone());
        rng.shuffle(&mut s);
        assert_eq!(score_step(&p, &s), want);
    }
}
