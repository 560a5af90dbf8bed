use super::*;
use crate::store::fleet::{FleetEvidence, FleetHang, FleetPlacement, FleetVerdict};

const NOW: u64 = 1_800_000_000_000_000_000;
const DAY: u64 = 86_400_000_000_000;

#[test]
fn since_is_a_duration_back_from_now_or_a_past_time() {
    assert_eq!(parse_since("7d", NOW), Ok(NOW - 7 * DAY));
    assert_eq!(parse_since("12h", NOW), Ok(NOW - DAY / 2));
    assert_eq!(parse_since("90s", NOW), Ok(NOW - 90_000_000_000));
    assert_eq!(parse_since("2w", NOW), Ok(NOW - 14 * DAY));
    assert_eq!(parse_since(&(NOW - 5).to_string(), NOW), Ok(NOW - 5));
    for bad in [
        "",
        "d",
        "7",
        "7x",
        "7 d",
        "1.5d",
        "7dd",
        "0d",
        "99999999999999999999w",
    ] {
        let e = parse_since(bad, 1_000).unwrap_err();
        assert!(e.contains("since"), "{bad}: {e}");
    }
    assert!(parse_since("-1d", NOW).unwrap_err().contains("future"));
    assert!(parse_since(&(NOW + 1).to_string(), NOW)
        .unwrap_err()
        .contains("future"));
    assert!("rack"
        .parse::<By>()
        .unwrap_err()
        .contains("node, gpu or link"));
}

fn placed(job: &str, rank: u32, node: &str, gpu: &str) -> FleetPlacement {
    FleetPlacement {
        job_id: job.into(),
        rank,
        node: node.into(),
        gpu_label: gpu.into(),
        link_label: String::new(),
        first_ns: 0,
        last_ns: 3_600_000_000_000,
    }
}

fn verdict(job: &str, rank: u32, node: &str) -> FleetVerdict {
    FleetVerdict {
        job_id: job.into(),
        rank,
        node: node.into(),
        first_step: 3,
        last_step: 12,
        steps_flagged: 10,
        slowdown: 1.25,
        cause: "compute".into(),
        first_seen_ns: 5,
        updated_ns: 5 + 3_600_000_000_000,
    }
}

/// 12 jobs of 2 ranks: rank 0 on the slow GPU "bad" (node n1) and flagged
/// every time, rank 1 on the busy healthy "good" (node n2); one job with a
/// third rank on "once" (node n3).
fn facts() -> FleetFacts {
    let mut f = FleetFacts::default();
    for j in 0..12 {
        let job = format!("j{j:02}");
        f.placements.push(placed(&job, 0, "n1", "bad"));
        f.placements.push(placed(&job, 1, "n2", "good"));
        f.verdicts.push(verdict(&job, 0, "n1"));
    }
    f.placements.push(placed("j00", 2, "n3", "once"));
    f.evidence.push(FleetEvidence {
        job_id: "j00".into(),
        rank: 0,
        first_step: 3,
        evidence: "SM clock 1200 MHz vs 1980 MHz".into(),
        gpu_uuids: vec!["bad".into()],
        throttle_reasons: vec!["hw_slowdown".into()],
        sm_clock_mhz: 1200.0,
        peer_sm_clock_mhz: 1980.0,
    });
    f.hangs.push(FleetHang {
        job_id: "j03".into(),
        rank: 1,
        node: "n2".into(),
        suspects: 1,
    });
    f
}

#[test]
fn the_recurring_gpu_ranks_first_the_busy_one_scores_zero_one_job_is_low_exposure() {
    let rows = assemble(&facts(), By::Gpu, FleetPolicy::default());
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r.gpu_uuid.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["bad", "good", "once"]);
    let bad = &rows[0];
    assert_eq!((bad.place, bad.node.as_str()), (Some(1), "n1"));
    assert_eq!(
        (bad.jobs, bad.verdicts, bad.flagged_placements),
        (12, 12, 12)
    );
    assert_eq!(bad.verdict_steps, 120);
    // p = 12/25; all 12 of 12: score = -12 log10(12/25).
    assert!((bad.score - 12.0 * (25.0f64 / 12.0).log10()).abs() < 1e-9);
    // 12 verdicts x 1 h active x (1 - 1/1.25) x 2 GPUs (j00: 3) = 5 GPU-h.
    assert!(
        (bad.cost_gpu_hours - (11.0 * 0.4 + 0.6)).abs() < 1e-9,
        "{}",
        bad.cost_gpu_hours
    );
    assert_eq!(bad.hardware.clock_below_peers, 1);
    assert_eq!(bad.hardware.throttle_reasons, ["hw_slowdown"]);
    assert!((bad.rank_hours - 12.0).abs() < 1e-9);
    assert_eq!(bad.timeline.len(), 12);
    let good = &rows[1];
    assert_eq!(
        (good.score, good.hang_suspects, good.place),
        (0.0, 1, Some(2))
    );
    let once = &rows[2];
    assert!(once.low_exposure && once.place.is_none() && once.jobs == 1);
}

#[test]
fn by_node_and_link_group_the_same_placements() {
    let rows = assemble(&facts(), By::Node, FleetPolicy::default());
    assert_eq!(rows[0].node, "n1");
    assert!(rows.iter().all(|r| r.gpu_uuid.is_none()));
    // No rank has a link label: no link rows.
    assert!(assemble(&facts(), By::Link, FleetPolicy::default()).is_empty());
}

#[test]
fn a_verdict_whose_rank_row_is_older_than_the_window_still_counts() {
    let mut f = FleetFacts::default();
    f.verdicts.push(verdict("old", 4, "n9"));
    let rows = assemble(&f, By::Node, FleetPolicy { min_jobs: 1 });
    assert_eq!((rows[0].node.as_str(), rows[0].verdicts), ("n9", 1));
}

#[test]
fn offenders_are_named_per_node_with_their_gpus_and_jobs() {
    let f = facts();
    let policy = FleetPolicy::default();
    let (nodes, gpus) = (
        assemble(&f, By::Node, policy),
        assemble(&f, By::Gpu, policy),
    );
    let o = watch::offenders(&nodes, &gpus, 3.0);
    assert_eq!(o.len(), 1, "{o:?}");
    assert_eq!(
        (o[0].node.as_str(), o[0].gpu_uuids.as_slice()),
        ("n1", &["bad".to_string()][..])
    );
    assert_eq!(o[0].jobs.len(), 12);
    assert!(watch::offenders(&nodes, &gpus, 100.0).is_empty());
}

/// What the rollup (migration 0014) hands over for `facts()`: each unit's
/// exposure counted as SQL counts it, the placements of verdicts and hang
/// suspects only, and the verdict jobs' world sizes.
fn rolled(full: &FleetFacts, by: By) -> FleetFacts {
    use crate::store::fleet::{FleetExposure, FleetWorld};
    let unit_of = |p: &FleetPlacement| match by {
        By::Node => Some(String::new()),
        By::Gpu => Some(p.gpu_label.clone()).filter(|g| !g.is_empty()),
        By::Link => Some(p.link_label.clone()).filter(|l| !l.is_empty()),
    };
    let mut units: BTreeMap<(String, String), (BTreeSet<String>, u64, u64)> = BTreeMap::new();
    for p in &full.placements {
        let Some(unit) = unit_of(p) else { continue };
        let u = units.entry((p.node.clone(), unit)).or_default();
        u.0.insert(p.job_id.clone());
        u.1 += 1;
        u.2 += p.last_ns - p.first_ns;
    }
    let flagged: BTreeSet<(&str, u32)> = full
        .verdicts
        .iter()
        .map(|v| (v.job_id.as_str(), v.rank))
        .chain(full.hangs.iter().map(|h| (h.job_id.as_str(), h.rank)))
        .collect();
    let mut worlds: BTreeMap<&str, u32> = BTreeMap::new();
    for p in &full.placements {
        if full.verdicts.iter().any(|v| v.job_id == p.job_id) {
            let w = worlds.entry(p.job_id.as_str()).or_default();
            *w = (*w).max(p.rank + 1);
        }
    }
    FleetFacts {
        placements: full
            .placements
            .iter()
            .filter(|p| flagged.contains(&(p.job_id.as_str(), p.rank)))
            .cloned()
            .collect(),
        exposure: Some(
            units
                .into_iter()
                .map(
                    |((node, unit), (jobs, placements, rank_ns))| FleetExposure {
                        node,
                        unit,
                        jobs: jobs.len() as u64,
                        placements,
                        rank_ns,
                    },
                )
                .collect(),
        ),
        worlds: worlds
            .into_iter()
            .map(|(job, world)| FleetWorld {
                job_id: job.into(),
                world,
            })
            .collect(),
        ..full.clone()
    }
}

#[test]
fn the_rollup_path_gives_the_rows_of_counting_every_placement() {
    let mut full = facts();
    // A link label on some placements, so `by = link` has units too.
    for p in full.placements.iter_mut().step_by(3) {
        p.link_label = format!("nic-{}", p.rank);
    }
    for by in [By::Node, By::Gpu, By::Link] {
        let want = assemble(&full, by, FleetPolicy::default());
        let got = assemble(&rolled(&full, by), by, FleetPolicy::default());
        assert!(!want.is_empty(), "{by:?}");
        assert_eq!(got, want, "{by:?}");
    }
}
