use super::*;

fn straggler(active: bool) -> AlertInput {
    AlertInput::Straggler {
        job: "j".into(),
        rank: 3,
        node: "n3".into(),
        active,
        first_step: 2,
        last_step: 6,
        steps_flagged: 4,
        slowdown: 1.4,
        score: 12.0,
        cause: "compute".into(),
        evidence: String::new(),
        expected_gain_pct: Some(18.4),
    }
}

#[test]
fn straggler_fires_and_resolves_with_evidence() {
    let mut rules = Rules::new(RulesConfig::default());
    let mut e = Engine::new(0, 0);
    let t = rules.apply(straggler(true), &mut e, 1);
    assert_eq!(t.len(), 1);
    let a = t[0].alert();
    assert_eq!(
        (a.key.rule, a.key.rank, a.severity.as_str()),
        ("straggler", 3, "warning")
    );
    assert!(
        a.evidence.summary.contains("40% slower"),
        "{}",
        a.evidence.summary
    );
    assert_eq!(a.evidence.fields["first_step"], 2);
    assert!(
        a.evidence
            .summary
            .contains("job ~18% faster without rank 3"),
        "{}",
        a.evidence.summary
    );
    assert!(
        rules.apply(straggler(true), &mut e, 2).is_empty(),
        "one alert while active"
    );
    let t = rules.apply(straggler(false), &mut e, 3);
    assert!(matches!(t[0], Transition::Resolved(_)));
}

#[test]
fn an_other_straggler_says_own_time_and_where() {
    let mut rules = Rules::new(RulesConfig::default());
    let mut e = Engine::new(0, 0);
    let input = match straggler(true) {
        AlertInput::Straggler {
            job,
            rank,
            node,
            active,
            first_step,
            last_step,
            steps_flagged,
            score,
            expected_gain_pct,
            ..
        } => AlertInput::Straggler {
            job,
            rank,
            node,
            active,
            first_step,
            last_step,
            steps_flagged,
            slowdown: 5.0,
            score,
            cause: "other".into(),
            evidence: "170.0 ms per step ...; after backward, before optimizer".into(),
            expected_gain_pct,
        },
        _ => unreachable!(),
    };
    let t = rules.apply(input, &mut e, 1);
    let s = &t[0].alert().evidence.summary;
    assert!(
        s.contains(
            "(other): 400% more own time (step time minus collective wait) than the median rank"
        ),
        "{s}"
    );
    assert!(s.ends_with("after backward, before optimizer"), "{s}");
}

#[test]
fn hang_per_rank_and_per_job() {
    let mut rules = Rules::new(RulesConfig::default());
    let mut e = Engine::new(0, 0);
    let t = rules.apply(
        AlertInput::RankHang {
            job: "j".into(),
            rank: 5,
            node: "n".into(),
            last_step: Some(9),
            job_step: 12,
            silent_ns: 300_000_000_000,
        },
        &mut e,
        1,
    );
    assert_eq!(t[0].alert().key.rank, 5);
    assert!(t[0].alert().evidence.summary.contains("step 9"));
    let t = rules.apply(
        AlertInput::RankProgress {
            job: "j".into(),
            rank: 5,
        },
        &mut e,
        2,
    );
    assert!(matches!(t[0], Transition::Resolved(_)));
    let t = rules.apply(
        AlertInput::JobStalled {
            job: "j".into(),
            last_step: 12,
            silent_ns: 1,
        },
        &mut e,
        3,
    );
    assert_eq!(
        (t[0].alert().key.rank, t[0].alert().severity.as_str()),
        (-1, "critical")
    );
}

#[test]
fn low_gpu_utilization_uses_the_window_mean() {
    let mut cfg = RulesConfig::default();
    cfg.low_gpu_utilization.window_steps = 3;
    let mut rules = Rules::new(cfg);
    let mut e = Engine::new(0, 0);
    let mut feed = |step, pct: f64, e: &mut Engine| {
        rules.apply(
            AlertInput::RankStepGpu {
                job: "j".into(),
                rank: 1,
                node: "n".into(),
                step,
                gpu_util_pct: pct,
            },
            e,
            step,
        )
    };
    assert!(feed(0, 10.0, &mut e).is_empty());
    assert!(feed(1, 10.0, &mut e).is_empty(), "window not full");
    let t = feed(2, 10.0, &mut e);
    assert!(matches!(t[0], Transition::Firing(_)));
    // mean(10, 10, 95) = 38.3 >= 30: resolves.
    let t = feed(3, 95.0, &mut e);
    assert!(matches!(t[0], Transition::Resolved(_)));
    assert!(e.active().is_empty());
}

#[test]
fn collective_slowdown_against_the_jobs_baseline() {
    let mut cfg = RulesConfig::default();
    cfg.collective_slowdown.baseline_steps = 3;
    cfg.collective_slowdown.window_steps = 2;
    let mut rules = Rules::new(cfg);
    let mut e = Engine::new(0, 0);
    let mut feed = |step, bw: f64, e: &mut Engine| {
        rules.apply(
            AlertInput::CollectiveStep {
                job: "j".into(),
                step,
                key: "all_reduce pg0 64MiB-128MiB".into(),
                busbw_gbps: bw,
            },
            e,
            step,
        )
    };
    for (s, bw) in [(0, 100.0), (1, 110.0), (2, 90.0), (3, 95.0), (4, 98.0)] {
        assert!(feed(s, bw, &mut e).is_empty(), "healthy at step {s}");
    }
    assert!(
        feed(5, 40.0, &mut e).is_empty(),
        "median(98, 40) = 69 >= 60"
    );
    let t = feed(6, 40.0, &mut e);
    let a = t[0].alert();
    assert_eq!((a.key.rule, a.key.rank), ("collective_slowdown", -1));
    assert_eq!(a.evidence.fields["baseline_busbw_gbps"], 100.0);
    // median(40, 100) = 70 >= 60: back above the threshold.
    let t = feed(7, 100.0, &mut e);
    assert!(matches!(t[0], Transition::Resolved(_)));
}

#[test]
fn disabled_rules_do_nothing_and_job_gone_resolves() {
    let mut cfg = RulesConfig::default();
    cfg.straggler.enabled = false;
    let mut rules = Rules::new(cfg);
    let mut e = Engine::new(0, 0);
    assert!(rules.apply(straggler(true), &mut e, 1).is_empty());
    rules.apply(
        AlertInput::JobStalled {
            job: "j".into(),
            last_step: 1,
            silent_ns: 1,
        },
        &mut e,
        2,
    );
    let t = rules.apply(AlertInput::JobGone { job: "j".into() }, &mut e, 3);
    assert_eq!(t.len(), 1);
}

#[test]
fn validation_names_the_option() {
    let mut cfg = RulesConfig::default();
    cfg.collective_slowdown.min_fraction = 1.5;
    assert!(cfg.validate().unwrap_err().contains("min_fraction"));
}

#[test]
fn repeat_offender_fires_once_per_node_holds_down_to_half_and_respects_its_cooldown() {
    use super::Offender;
    let mut rules = Rules::new(RulesConfig::default());
    let mut engine = Engine::new(0, 0);
    let o = |score: f64| Offender {
        node: "n1".into(),
        gpu_uuids: vec!["GPU-1".into()],
        score,
        jobs: vec!["a".into(), "b".into()],
        verdicts: 8,
        placements: 8,
        cost_gpu_hours: 0.5,
    };
    let round = |rules: &mut Rules, engine: &mut Engine, v: Vec<Offender>, now| {
        rules.apply(AlertInput::FleetRound { offenders: v }, engine, now)
    };
    // Below the threshold: nothing.
    assert!(round(&mut rules, &mut engine, vec![o(5.0)], 1).is_empty());
    let t = round(&mut rules, &mut engine, vec![o(7.0)], 2);
    assert!(
        matches!(&t[..], [Transition::Firing(a)] if a.key.job == "fleet:n1"
        && a.evidence.summary.contains("GPU-1") && a.evidence.summary.contains("a, b"))
    );
    // Held while at or above half the threshold; once only.
    assert!(round(&mut rules, &mut engine, vec![o(3.5)], 3).is_empty());
    assert!(round(&mut rules, &mut engine, vec![o(9.0)], 4).is_empty());
    // Gone from the round: resolved; back above within the cooldown: silent.
    let t = round(&mut rules, &mut engine, vec![], 5);
    assert!(matches!(&t[..], [Transition::Resolved(_)]));
    assert!(round(&mut rules, &mut engine, vec![o(9.0)], 6).is_empty());
    let after = 6 + 86_400 * 1_000_000_000;
    let t = round(&mut rules, &mut engine, vec![o(9.0)], after);
    assert!(matches!(&t[..], [Transition::Firing(_)]));
}

#[test]
fn clock_skew_fires_per_job_above_the_offset_and_resolves_below() {
    let mut rules = Rules::new(RulesConfig::default());
    let mut engine = Engine::new(0, 0);
    let n = |node: &str, offset_ns: i64, samples: u64| NodeClock {
        node: node.into(),
        offset_ns,
        uncertainty_ns: 4_000.0,
        samples,
    };
    let round = |rules: &mut Rules, engine: &mut Engine, nodes: Vec<NodeClock>, now| {
        let input = AlertInput::ClockRound {
            job: "j".into(),
            reference: "n0".into(),
            nodes,
        };
        rules.apply(input, engine, now)
    };
    // 0.9 ms: under the 1 ms default; 3 ms from too few collectives: silent.
    let quiet = vec![n("n0", 0, 50), n("n1", 900_000, 50), n("n2", 3_000_000, 5)];
    assert!(round(&mut rules, &mut engine, quiet, 1).is_empty());
    let t = round(
        &mut rules,
        &mut engine,
        vec![
            n("n0", 0, 50),
            n("n1", -1_200_000, 50),
            n("n2", 3_000_000, 50),
        ],
        2,
    );
    let [Transition::Firing(a)] = &t[..] else {
        panic!("{t:?}")
    };
    assert_eq!(
        (a.key.rule, a.key.rank, a.key.job.as_str()),
        ("clock_skew", -1, "j")
    );
    assert_eq!(a.evidence.node, "n2", "the worst node");
    let s = &a.evidence.summary;
    assert!(
        s.contains("n1 -1200 us") && s.contains("n2 +3000 us") && s.contains("reference node n0"),
        "{s}"
    );
    let t = round(
        &mut rules,
        &mut engine,
        vec![n("n0", 0, 50), n("n1", 20_000, 50)],
        3,
    );
    assert!(matches!(&t[..], [Transition::Resolved(_)]), "{t:?}");
    let mut cfg = RulesConfig::default();
    cfg.clock_skew.max_offset_us = 0.0;
    assert!(cfg.validate().unwrap_err().contains("clock_skew"));
}
