//! Traces libkineto's daemon mode starts in an unmodified script: no
//! `ProfilerStep#N`, no `distributedInfo`. The iterations come from torch's
//! `Optimizer.step#*` ops, numbered 0.. within the trace, and the gloo
//! all-reduces are host collectives inside them.

use std::path::{Path, PathBuf};

use rankscope_kineto::{parse_trace_file, StepSource};
use rankscope_proto::v1 as proto;

fn fixture(rank: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/fixtures/daemon_cpu_2rank/rank{rank}.json.gz"
    ))
}

fn optimizer_steps(path: &Path) -> Vec<(f64, f64)> {
    let f = std::fs::File::open(path).expect("fixture");
    let v: serde_json::Value =
        serde_json::from_reader(flate2::read::MultiGzDecoder::new(f)).expect("json");
    let mut out: Vec<(f64, f64)> = v["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("Optimizer.step#"))
        })
        .map(|e| {
            let ts = e["ts"].as_f64().expect("ts");
            (ts, ts + e["dur"].as_f64().expect("dur"))
        })
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

#[test]
fn optimizer_steps_become_iterations_with_their_collectives() {
    for rank in [0, 1] {
        let path = fixture(rank);
        let id = proto::RankIdentity {
            job_id: "daemon".into(),
            rank,
            world_size: 2,
            ..Default::default()
        };
        let r = parse_trace_file(&path, &id, 64 << 20).expect("parse");
        assert_eq!(r.stats.steps_from, StepSource::OptimizerStep);
        let opt = optimizer_steps(&path);
        let mut begins = Vec::new();
        let mut ends = Vec::new();
        let mut in_step = None;
        let mut collectives_in_steps = 0;
        for ev in &r.events {
            match &ev.kind {
                Some(proto::event::Kind::StepBegin(b)) => {
                    begins.push((b.step, b.ts_ns));
                    in_step = Some(b.step);
                }
                Some(proto::event::Kind::StepEnd(e)) => {
                    assert_eq!(in_step, Some(e.step));
                    ends.push((e.step, e.ts_ns));
                    in_step = None;
                }
                Some(proto::event::Kind::Collective(_)) if in_step.is_some() => {
                    collectives_in_steps += 1
                }
                _ => {}
            }
        }
        // n optimizer steps bound n - 1 whole iterations, numbered from 0.
        assert_eq!(begins.len(), opt.len() - 1, "rank {rank}");
        let steps: Vec<u64> = begins.iter().map(|b| b.0).collect();
        assert_eq!(steps, (0..opt.len() as u64 - 1).collect::<Vec<_>>());
        // Iteration k ends where optimizer step k + 1 ends (to the microsecond).
        let base = ends[0].1 as f64 / 1e3 - opt[1].1;
        for (k, (_, end_ns)) in ends.iter().enumerate() {
            let got = end_ns.saturating_sub(ends[0].1) as f64 / 1e3;
            let want = opt[k + 1].1 - opt[1].1;
            assert!(
                (got - want).abs() < 1.0,
                "rank {rank} iteration {k}: {got} vs {want} (base {base})"
            );
        }
        // DDP's gradient all-reduce happens inside every iteration.
        assert!(
            collectives_in_steps >= begins.len(),
            "rank {rank}: {collectives_in_steps} collectives in {} iterations",
            begins.len()
        );
    }
}

#[test]
fn the_op_summary_counts_each_iterations_operators_with_self_time() {
    let path = fixture(0);
    let id = proto::RankIdentity {
        job_id: "daemon".into(),
        rank: 0,
        world_size: 2,
        ..Default::default()
    };
    let r = parse_trace_file(&path, &id, 64 << 20).expect("parse");
    let mut windows = Vec::new();
    let mut begin = 0;
    for ev in &r.events {
        match &ev.kind {
            Some(proto::event::Kind::StepBegin(b)) => begin = b.ts_ns,
            Some(proto::event::Kind::StepEnd(e)) => windows.push((begin, e.ts_ns)),
            _ => {}
        }
    }
    let ops = rankscope_kineto::op_summary(&path, &windows).expect("summary");
    // The same model runs every iteration: the same number of matmuls.
    let addmm: Vec<u64> = (0..windows.len())
        .map(|k| {
            ops.iter()
                .filter(|o| o.iteration == k && o.category == "CPU_OP" && o.name == "aten::addmm")
                .map(|o| o.calls)
                .sum()
        })
        .collect();
    assert!(addmm[0] > 0, "{addmm:?}");
    assert!(addmm.iter().all(|&n| n == addmm[0]), "{addmm:?}");
    // Self times do not double count nesting: an iteration's CPU self time
    // stays within its length on the training thread plus autograd's.
    for (k, w) in windows.iter().enumerate() {
        let total: u64 = ops
            .iter()
            .filter(|o| o.iteration == k && o.category == "CPU_OP")
            .map(|o| o.self_ns)
            .sum();
        assert!(
            total > 0 && total <= 2 * (w.1 - w.0),
            "iteration {k}: {total} ns of {} ns",
            w.1 - w.0
        );
    }
    assert!(
        ops.iter().all(|o| o.category == "CPU_OP"),
        "a CPU-only trace has no kernels"
    );
}

#[test]
fn a_trace_started_at_an_iteration_boundary_counts_its_first_iteration() {
    // libkineto's iteration form starts at an iteration: the time before the
    // first optimizer step (50 us) is as long as the others, so it counts.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let op = |name: &str, ts: u64, dur: u64| {
        format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}"#
        )
    };
    let opt = |ts: u64| {
        format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"Optimizer.step#SGD.step","pid":1,"tid":1,"ts":{ts},"dur":5}}"#
        )
    };
    let events = [
        op("aten::mm", 1000, 10),
        opt(1045),
        op("aten::mm", 1060, 10),
        opt(1095),
        op("aten::mm", 1110, 10),
        opt(1145),
    ];
    std::fs::write(
        &path,
        format!(r#"{{"traceEvents":[{}]}}"#, events.join(",")),
    )
    .unwrap();
    let id = proto::RankIdentity {
        job_id: "j".into(),
        world_size: 1,
        ..Default::default()
    };
    let r = parse_trace_file(&path, &id, 1 << 20).expect("parse");
    let steps: Vec<(u64, u64)> = r
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(proto::event::Kind::StepEnd(x)) => Some((x.step, x.ts_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(steps, [(0, 1_050_000), (1, 1_100_000), (2, 1_150_000)]);
    // Started 20 us into an iteration instead: that tail is left out.
    let mut late = events.to_vec();
    late[0] = op("aten::mm", 1030, 10);
    std::fs::write(&path, format!(r#"{{"traceEvents":[{}]}}"#, late.join(","))).unwrap();
    let r = parse_trace_file(&path, &id, 1 << 20).expect("parse");
    let n = r
        .events
        .iter()
        .filter(|e| matches!(e.kind, Some(proto::event::Kind::StepEnd(_))))
        .count();
    assert_eq!(n, 2);
}

#[test]
fn host_ops_carry_the_summarys_self_time_with_their_times() {
    let path = fixture(0);
    let id = proto::RankIdentity {
        job_id: "daemon".into(),
        rank: 0,
        world_size: 2,
        ..Default::default()
    };
    let r = parse_trace_file(&path, &id, 64 << 20).expect("parse");
    let mut windows = Vec::new();
    let mut begin = 0;
    for ev in &r.events {
        match &ev.kind {
            Some(proto::event::Kind::StepBegin(b)) => begin = b.ts_ns,
            Some(proto::event::Kind::StepEnd(e)) => windows.push((begin, e.ts_ns)),
            _ => {}
        }
    }
    let (ops, host) =
        rankscope_kineto::op_summary_with_host_ops(&path, &windows, usize::MAX).expect("summary");
    // Every host operator inside the windows, per name the summary's self
    // time, at absolute times inside an iteration, in time order.
    let mut by_name: std::collections::BTreeMap<&str, u64> = Default::default();
    for o in &host {
        *by_name.entry(o.name.as_str()).or_default() += o.self_ns;
        assert!(o.self_ns <= o.end_ns - o.start_ns, "{o:?}");
        assert!(
            windows
                .iter()
                .any(|w| w.0 <= o.start_ns && o.start_ns < w.1),
            "{o:?}"
        );
    }
    assert!(host.windows(2).all(|p| p[0].start_ns <= p[1].start_ns));
    let mut want: std::collections::BTreeMap<&str, u64> = Default::default();
    for o in ops.iter().filter(|o| o.category == "CPU_OP") {
        *want.entry(o.name.as_str()).or_default() += o.self_ns;
    }
    assert_eq!(by_name, want);
    // Capped: the operators of most self time.
    let (_, top) = rankscope_kineto::op_summary_with_host_ops(&path, &windows, 5).expect("top");
    assert_eq!(top.len(), 5);
    let least_kept = top.iter().map(|o| o.self_ns).min().unwrap();
    let dropped = host.iter().filter(|o| !top.contains(o)).map(|o| o.self_ns);
    assert!(dropped.into_iter().all(|s| s <= least_kept));
    assert_eq!(rankscope_kineto::op_summary(&path, &windows).unwrap(), ops);
}
