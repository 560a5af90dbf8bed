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
    let names: Vec<String> = [
        StragglerCause::Compute,
        StragglerCause::Input,
        StragglerCause::Communication,
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    assert_eq!(names, ["compute", "input", "communication"]);
}
