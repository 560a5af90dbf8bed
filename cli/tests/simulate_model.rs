//! Properties of the pure job model (`simulate::plan`).

use rankscope_cli::simulate::model::{
    catalog::Name, event_end_ns, event_name_id, event_start_ns, name_text,
};
use rankscope_cli::simulate::{plan, plan_iter, EventCounts, JobPlan, SimConfig, Straggler};
use rankscope_proto::v1 as proto;
use rankscope_proto::validate::{validate_events, StepState};
use std::collections::{BTreeMap, HashMap};

use proto::event::Kind;

fn cfg(ranks: u32, steps: u64) -> SimConfig {
    SimConfig {
        job: "model-test".into(),
        ranks,
        steps,
        layers: 4,
        ..SimConfig::default()
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Per rank: total time spent in spans of `category`, ns.
fn span_ns(plan: &JobPlan, rank: u32, category: proto::SpanCategory) -> u64 {
    plan.rank_events(rank)
        .filter_map(|e| match &e.kind {
            Some(Kind::Span(s)) if s.category == category as i32 => Some(s.end_ns - s.start_ns),
            _ => None,
        })
        .sum()
}

/// Per rank: total duration of its collectives, ns.
fn collective_ns(plan: &JobPlan, rank: u32) -> u64 {
    plan.rank_events(rank)
        .filter_map(|e| match &e.kind {
            Some(Kind::Collective(c)) => Some(c.end_ns - c.start_ns),
            _ => None,
        })
        .sum()
}

/// Per rank: total duration of compute kernels (not NCCL, not memcpy/memset), ns.
fn compute_kernel_ns(plan: &JobPlan, rank: u32) -> u64 {
    plan.rank_events(rank)
        .filter_map(|e| match &e.kind {
            Some(Kind::Kernel(k))
                if k.kind == proto::KernelKind::Kernel as i32
                    && !name_text(k.name_id).unwrap().starts_with("nccl") =>
            {
                Some(k.end_ns - k.start_ns)
            }
            _ => None,
        })
        .sum()
}

#[test]
fn same_seed_same_plan_other_seed_other_timing() {
    let a = plan(&cfg(4, 3));
    assert_eq!(a, plan(&cfg(4, 3)));
    let b = plan(&SimConfig {
        seed: 2,
        ..cfg(4, 3)
    });
    assert_ne!(a.step_times(), b.step_times());
    assert_eq!(a.event_counts(), b.event_counts());
}

#[test]
fn lazy_iteration_equals_materialised_plan() {
    let c = cfg(3, 5);
    let p = plan(&c);
    let lazy: Vec<_> = plan_iter(&c).collect();
    assert_eq!(plan_iter(&c).len(), 5);
    assert_eq!(p.steps, lazy);
}

#[test]
fn steps_are_ordered_and_contiguous_per_rank() {
    let c = cfg(8, 6);
    let p = plan(&c);
    let times = p.step_times();
    assert_eq!(times.len(), 8 * 6);
    let mut by_rank: BTreeMap<u32, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for (step, rank, start, end) in times {
        by_rank.entry(rank).or_default().push((step, start, end));
    }
    for (rank, steps) in by_rank {
        assert_eq!(
            steps[0].1, c.start_ns,
            "rank {rank} step 0 starts at start_ns"
        );
        for (i, w) in steps.windows(2).enumerate() {
            assert_eq!(w[0].0, i as u64);
            assert_eq!(w[1].0, w[0].0 + 1);
            assert!(w[0].1 < w[0].2, "rank {rank}: step {} is empty", w[0].0);
            assert_eq!(
                w[1].1, w[0].2,
                "rank {rank}: next step begins when the last ended"
            );
        }
    }
}

#[test]
fn every_rank_step_is_framed_sorted_and_valid() {
    let p = plan(&cfg(4, 3));
    let names: HashMap<u32, String> = Name::ALL
        .iter()
        .map(|n| (n.id(), n.text().to_string()))
        .collect();
    for rank in 0..4 {
        let mut state = StepState::default();
        for s in &p.steps {
            let r = &s.ranks[rank as usize];
            assert_eq!(r.rank, rank);
            assert!(matches!(
                r.events.first().unwrap().kind,
                Some(Kind::StepBegin(_))
            ));
            assert!(matches!(
                r.events.last().unwrap().kind,
                Some(Kind::StepEnd(_))
            ));
            let body = &r.events[1..r.events.len() - 1];
            assert!(body
                .windows(2)
                .all(|w| event_start_ns(&w[0]) <= event_start_ns(&w[1])));
            for e in body {
                assert!(
                    event_start_ns(e) >= r.start_ns && event_end_ns(e) <= r.end_ns,
                    "{e:?}"
                );
                assert!(name_text(event_name_id(e)).is_some(), "{e:?}");
            }
            state = validate_events(&r.events, &[], &names, state).expect("valid events");
        }
    }
}

#[test]
fn kernels_on_one_stream_never_overlap() {
    let p = plan(&cfg(2, 2));
    for rank in 0..2 {
        let mut by_stream: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for e in p.rank_events(rank) {
            if let Some(Kind::Kernel(k)) = &e.kind {
                by_stream
                    .entry(k.stream)
                    .or_default()
                    .push((k.start_ns, k.end_ns));
            }
        }
        assert_eq!(by_stream.len(), 2, "compute and NCCL streams");
        for (stream, mut ks) in by_stream {
            ks.sort_unstable();
            for w in ks.windows(2) {
                assert!(w[0].1 <= w[1].0, "stream {stream}: {w:?} overlap");
            }
        }
    }
}

#[test]
fn collectives_match_across_ranks() {
    let c = cfg(8, 3);
    let p = plan(&c);
    // seq -> per rank (op, bytes, count, dtype, group_size, end)
    type Shape = (i32, u64, u64, i32, u32, u64);
    let mut by_seq: BTreeMap<u64, Vec<(u32, Shape)>> = BTreeMap::new();
    for rank in 0..8 {
        for e in p.rank_events(rank) {
            if let Some(Kind::Collective(col)) = &e.kind {
                assert_eq!(col.process_group_id, Name::DefaultPg.id());
                assert_eq!(col.device, (rank % 8) as i32);
                by_seq.entry(col.seq).or_default().push((
                    rank,
                    (
                        col.op,
                        col.bytes,
                        col.count,
                        col.dtype,
                        col.group_size,
                        col.end_ns,
                    ),
                ));
            }
        }
    }
    let per_step = 2 * u64::from(c.layers) + 1;
    let seqs: Vec<u64> = by_seq.keys().copied().collect();
    assert_eq!(
        seqs,
        (1..=per_step * 3).collect::<Vec<_>>(),
        "seq increases by one across the job"
    );
    for (seq, ranks) in by_seq {
        let who: Vec<u32> = ranks.iter().map(|r| r.0).collect();
        assert_eq!(
            who,
            (0..8).collect::<Vec<_>>(),
            "seq {seq} on every rank once"
        );
        assert!(
            ranks.iter().all(|r| r.1 == ranks[0].1),
            "seq {seq}: {ranks:?}"
        );
    }
}

#[test]
fn collective_sizes_are_realistic() {
    let p = plan(&cfg(8, 3));
    let mut seen = BTreeMap::new();
    for e in p.rank_events(0) {
        if let Some(Kind::Collective(c)) = &e.kind {
            let op = proto::CollectiveOp::try_from(c.op).unwrap();
            seen.insert(
                op.as_str_name(),
                (c.bytes, c.count, c.dtype, c.group_size, c.group_ranks.len()),
            );
        }
    }
    let layer_bytes = 12 * 4096 * 4096 * 2;
    let bf16 = proto::DataType::Bfloat16 as i32;
    let fp32 = proto::DataType::Float32 as i32;
    assert_eq!(seen["COLLECTIVE_OP_ALL_GATHER"].0, layer_bytes);
    assert_eq!(seen["COLLECTIVE_OP_ALL_GATHER"].2, bf16);
    assert_eq!(seen["COLLECTIVE_OP_REDUCE_SCATTER"].0, layer_bytes);
    assert_eq!(seen["COLLECTIVE_OP_REDUCE_SCATTER"].1, layer_bytes / 2);
    assert_eq!(seen["COLLECTIVE_OP_ALL_REDUCE"].0, 4);
    assert_eq!(seen["COLLECTIVE_OP_ALL_REDUCE"].2, fp32);
    assert!(seen.values().all(|v| v.3 == 8));
    // The job's group is the world: it travels as the empty list (as the
    // rank SDK sends it), never as its 8 ranks.
    let named: Vec<Vec<u32>> = p
        .rank_events(3)
        .filter_map(|e| match &e.kind {
            Some(Kind::Collective(c)) => Some(c.group_ranks.clone()),
            _ => None,
        })
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(named, Vec::<Vec<u32>>::new());
}

#[test]
fn event_counts_match_the_closed_form_and_the_events() {
    let c = cfg(3, 4);
    let p = plan(&c);
    let counts = p.event_counts();
    assert_eq!(counts, EventCounts::expected(&c));
    let all: usize = p
        .steps
        .iter()
        .flat_map(|s| &s.ranks)
        .map(|r| r.events.len())
        .sum();
    assert_eq!(counts.total(), all as u64);
    assert_eq!(counts.steps, 2 * 3 * 4);
    assert_eq!(counts.spans, 4 * 3 * 4);
    assert_eq!(counts.collectives, (2 * 4 + 1) * 3 * 4);
}

#[test]
fn balanced_job_step_times_stay_within_jitter() {
    let p = plan(&cfg(8, 10));
    let mut times: Vec<f64> = p.step_times().iter().map(|t| (t.3 - t.2) as f64).collect();
    let med = median(&mut times);
    for t in &times {
        assert!(
            (t / med - 1.0).abs() < 0.08,
            "step time {t} vs median {med}"
        );
    }
    // ~36 ms per layer forward+backward, 4 layers, plus dataloader/optimizer.
    assert!((140e6..200e6).contains(&med), "median step {med} ns");
}

#[test]
fn without_jitter_all_ranks_take_the_same_time() {
    let p = plan(&SimConfig {
        jitter: 0.0,
        ..cfg(8, 3)
    });
    for s in &p.steps {
        let d0 = s.ranks[0].end_ns - s.ranks[0].start_ns;
        assert!(
            s.ranks.iter().all(|r| r.end_ns - r.start_ns == d0),
            "step {}",
            s.step
        );
    }
}

#[test]
fn a_straggler_slows_its_compute_and_makes_the_others_wait() {
    let slow = SimConfig {
        stragglers: vec![Straggler {
            rank: 5,
            factor: 1.3,
        }],
        ..cfg(8, 10)
    };
    let p = plan(&slow);
    let balanced = plan(&cfg(8, 10));

    let mut others_bwd: Vec<f64> = (0..8)
        .filter(|&r| r != 5)
        .map(|r| span_ns(&p, r, proto::SpanCategory::Backward) as f64)
        .collect();
    let bwd_ratio = span_ns(&p, 5, proto::SpanCategory::Backward) as f64 / median(&mut others_bwd);
    assert!(
        (1.25..1.35).contains(&bwd_ratio),
        "backward span ratio {bwd_ratio}"
    );

    let mut others_kernels: Vec<f64> = (0..8)
        .filter(|&r| r != 5)
        .map(|r| compute_kernel_ns(&p, r) as f64)
        .collect();
    let k_ratio = compute_kernel_ns(&p, 5) as f64 / median(&mut others_kernels);
    assert!(
        (1.25..1.35).contains(&k_ratio),
        "compute kernel ratio {k_ratio}"
    );

    let straggler_comm = collective_ns(&p, 5);
    for r in (0..8).filter(|&r| r != 5) {
        let waited = collective_ns(&p, r);
        assert!(
            waited > straggler_comm * 2,
            "rank {r}: {waited} vs straggler {straggler_comm}"
        );
    }

    // Every rank's steps are pushed out by the straggler.
    let mean = |p: &JobPlan, rank: u32| {
        let t: Vec<u64> = p
            .step_times()
            .iter()
            .filter(|t| t.1 == rank)
            .map(|t| t.3 - t.2)
            .collect();
        t.iter().sum::<u64>() as f64 / t.len() as f64
    };
    for r in 0..8 {
        let ratio = mean(&p, r) / mean(&balanced, r);
        assert!(
            (1.2..1.35).contains(&ratio),
            "rank {r}: step time ratio {ratio}"
        );
    }
}

#[test]
fn multi_node_jobs_place_ranks_on_nodes() {
    let c = SimConfig {
        ranks_per_node: 4,
        ..cfg(8, 1)
    };
    let id = rankscope_cli::simulate::model::identity(&c, 6);
    assert_eq!((id.rank, id.local_rank, id.world_size), (6, 2, 8));
    assert_eq!(id.node, "sim-node-1");
    assert_eq!(id.pid, 10_006);
    assert_eq!(id.labels.get("simulated").map(String::as_str), Some("true"));
    let p = plan(&c);
    let dev = p.rank_events(6).find_map(|e| match &e.kind {
        Some(Kind::Kernel(k)) => Some(k.device),
        _ => None,
    });
    assert_eq!(dev, Some(2));
}

/// A run continued with `first_step` goes on with the step numbers and the
/// collective sequence numbers of the first run.
#[test]
fn continued_run_continues_steps_and_sequence_numbers() {
    use rankscope_cli::simulate::{plan, SimConfig};
    use rankscope_proto::v1::event::Kind;
    let first = SimConfig {
        ranks: 2,
        steps: 3,
        layers: 2,
        ..SimConfig::default()
    };
    let second = SimConfig {
        first_step: 3,
        steps: 2,
        ..first.clone()
    };
    let seqs = |cfg: &SimConfig| -> Vec<u64> {
        plan(cfg)
            .rank_events(0)
            .filter_map(|e| match &e.kind {
                Some(Kind::Collective(c)) => Some(c.seq),
                _ => None,
            })
            .collect()
    };
    let (a, b) = (seqs(&first), seqs(&second));
    assert_eq!(b.first().copied(), a.last().map(|s| s + 1));
    let steps: Vec<u64> = plan(&second).steps.iter().map(|s| s.step).collect();
    assert_eq!(steps, vec![3, 4]);
}

#[test]
fn time_outside_the_phases_delays_the_optimizer_and_no_span_covers_it() {
    let c = SimConfig {
        outside: vec!["3:2.5".parse().unwrap()],
        ..cfg(8, 4)
    };
    let (p, balanced) = (plan(&c), plan(&cfg(8, 4)));
    // Rank 3: 2.5 ms between its last backward or collective event and its
    // optimizer span, with nothing in between; every step is 2.5 ms longer.
    for s in &p.steps {
        let r = &s.ranks[3];
        let opt = r
            .events
            .iter()
            .find_map(|e| match &e.kind {
                Some(Kind::Span(x)) if x.category == proto::SpanCategory::Optimizer as i32 => {
                    Some(x.start_ns)
                }
                _ => None,
            })
            .expect("an optimizer span");
        let before = r
            .events
            .iter()
            .filter(|e| event_start_ns(e) < opt)
            .map(event_end_ns)
            .max()
            .unwrap();
        assert_eq!(opt - before, 2_500_000, "step {}", s.step);
    }
    let t = |p: &JobPlan| p.step_times().iter().map(|t| t.3 - t.2).sum::<u64>();
    let added = t(&p) - t(&balanced);
    assert!(
        (4 * 8 * 2_400_000..=4 * 8 * 2_600_000).contains(&added),
        "{added}"
    );
    assert!("3:-1".parse::<rankscope_cli::simulate::Outside>().is_err());
    let bad = SimConfig {
        outside: vec!["9:1".parse().unwrap()],
        ..cfg(8, 4)
    };
    assert!(bad.validate().is_err());
}
