use super::*;

fn obs(gpu: u32, ts_ns: u64, clock: u32, reasons: &[&str]) -> GpuObs {
    GpuObs {
        node: "n".into(),
        gpu_index: gpu,
        uuid: format!("GPU-{gpu}"),
        ts_ns,
        period_ns: 100,
        ranks: vec![("j".into(), gpu)],
        sm_clock_mhz: Some(clock),
        throttle_reasons: reasons.iter().map(|r| r.to_string()).collect(),
        temp_c: Some(if clock < 1500 { 88.0 } else { 62.0 }),
        power_w: Some(300.0),
        gpu_util_pct: None,
    }
}

fn history(slow: Option<(u32, u32, &[&str])>) -> GpuHistory {
    let mut h = GpuHistory::new(64, 64);
    for t in [1100, 1200, 1300] {
        for g in 0..8 {
            let o = match slow {
                Some((s, clock, reasons)) if s == g => obs(g, t, clock, reasons),
                _ => obs(g, t, 1980, &[]),
            };
            h.push(o);
        }
    }
    h
}

#[test]
fn a_throttled_slow_gpu_is_named_with_numbers() {
    let h = history(Some((5, 1200, &["hw_thermal_slowdown", "gpu_idle"])));
    let e = h.evidence("j", 5, 1000, 1300).expect("evidence");
    assert_eq!(e.gpu_indexes, vec![5]);
    assert_eq!(e.gpu_uuids, vec!["GPU-5"]);
    assert_eq!(e.sm_clock_mhz, Some(1200.0));
    assert_eq!(e.peer_sm_clock_mhz, Some(1980.0));
    assert_eq!(
        e.throttle_reasons,
        vec!["hw_thermal_slowdown"],
        "gpu_idle is benign"
    );
    assert_eq!((e.temp_c, e.peer_temp_c), (Some(88.0), Some(62.0)));
    assert_eq!((e.samples, e.peer_gpus), (3, 7));
    assert_eq!(
        e.text,
        "GPU 5 (GPU-5) on n: SM clock 1200 MHz vs 1980 MHz median of 7 peer GPUs (-39.4%); \
         throttle reasons: hw_thermal_slowdown; 88 C vs 62 C; 300 W vs 300 W"
    );
    // A peer of the straggler shows nothing.
    assert_eq!(h.evidence("j", 2, 1000, 1300), None);
}

#[test]
fn no_evidence_without_a_difference() {
    assert_eq!(history(None).evidence("j", 5, 1000, 1300), None);
    // Only benign reasons.
    let h = history(Some((5, 1980, &["gpu_idle", "sync_boost"])));
    assert_eq!(h.evidence("j", 5, 1000, 1300), None);
    // Slightly lower clock, within the margin.
    let h = history(Some((5, 1900, &[])));
    assert_eq!(h.evidence("j", 5, 1000, 1300), None);
    // Unknown rank or job.
    assert_eq!(history(None).evidence("other", 5, 1000, 1300), None);
}

#[test]
fn a_reason_most_peers_share_is_not_evidence() {
    let mut h = GpuHistory::new(64, 64);
    for g in 0..8 {
        h.push(obs(g, 1200, 1980, &["sw_power_cap"]));
    }
    assert_eq!(h.evidence("j", 5, 1000, 1300), None);
    // But a lower clock still is.
    h.push(obs(5, 1250, 1400, &["sw_power_cap"]));
    let e = h.evidence("j", 5, 1000, 1300).expect("clock");
    assert!(e.throttle_reasons.is_empty());
    assert_eq!(e.sm_clock_mhz, Some(1690.0));
}

#[test]
fn only_samples_overlapping_the_window_count() {
    let mut h = history(None);
    // Slow before the window: ignored.
    h.push(obs(5, 500, 1000, &["hw_slowdown"]));
    assert_eq!(h.evidence("j", 5, 1000, 1300), None);
    assert!(h.evidence("j", 5, 400, 600).is_some());
}

#[test]
fn memory_is_bounded() {
    let mut h = GpuHistory::new(2, 3);
    for t in 0..10 {
        for g in 0..5 {
            h.push(obs(g, t, 1980, &[]));
        }
    }
    assert_eq!(h.len(), 3 * 2);
    assert_eq!(h.dropped, 20);
    let mut unmapped = obs(0, 99, 1, &[]);
    unmapped.ranks.clear();
    h.push(unmapped);
    assert_eq!(h.len(), 6);
    h.prune(100);
    assert!(h.is_empty());
}

#[test]
fn step_spans_cover_the_recent_steps_of_a_verdict() {
    let mut s = StepSpans::default();
    for step in 0..40u64 {
        s.record(step, step * 100, step * 100 + 90);
        s.record(step, step * 100 + 5, step * 100 + 95);
    }
    assert_eq!(s.window(2, 4), Some((200, 495)));
    assert_eq!(s.window(0, 39), Some((2400, 3995)), "last 16 steps only");
    assert_eq!(s.window(100, 200), None);
    for step in 40..400u64 {
        s.record(step, step, step);
    }
    assert_eq!(s.window(0, 10), None, "old steps are forgotten");
}

#[test]
fn only_active_compute_verdicts_get_evidence_rows() {
    let h = history(Some((5, 1200, &["hw_slowdown"])));
    let mut spans = StepSpans::default();
    spans.record(3, 1000, 1300);
    let v = Verdict {
        rank: 5,
        node: "n".into(),
        first_step: 3,
        last_step: 3,
        steps_flagged: 1,
        slowdown: 1.3,
        score: 9.0,
        cause: StragglerCause::Compute,
        excess_ns: 0,
        active: true,
    };
    let row = verdict_evidence("j", &v, &spans, &h, 11, 22).expect("row");
    assert_eq!(
        (row.rank, row.first_step, row.first_seen_ns, row.updated_ns),
        (5, 3, 11, 22)
    );
    assert_eq!(row.throttle_reasons, vec!["hw_slowdown"]);
    assert!(row
        .evidence
        .starts_with("GPU 5 (GPU-5) on n: SM clock 1200 MHz"));
    let input = Verdict {
        cause: StragglerCause::Input,
        ..v.clone()
    };
    assert_eq!(verdict_evidence("j", &input, &spans, &h, 11, 22), None);
    let cleared = Verdict {
        active: false,
        ..v.clone()
    };
    assert_eq!(verdict_evidence("j", &cleared, &spans, &h, 11, 22), None);
    let unknown_steps = Verdict {
        first_step: 50,
        last_step: 60,
        ..v
    };
    assert_eq!(
        verdict_evidence("j", &unknown_steps, &spans, &h, 11, 22),
        None
    );
}

#[test]
fn mean_util_averages_the_ranks_gpu_samples_in_the_window() {
    let mut h = GpuHistory::new(64, 64);
    for (t, util) in [
        (1100, Some(20.0)),
        (1200, Some(40.0)),
        (1300, None),
        (5000, Some(99.0)),
    ] {
        let mut o = obs(3, t, 1980, &[]);
        o.gpu_util_pct = util;
        h.push(o);
    }
    assert_eq!(h.mean_util("j", 3, 1000, 1400), Some(30.0));
    assert_eq!(h.mean_util("j", 4, 1000, 1400), None, "other rank");
    assert_eq!(h.mean_util("k", 3, 1000, 1400), None, "other job");
    assert_eq!(
        h.mean_util("j", 3, 2000, 3000),
        None,
        "no sample in the window"
    );
}
