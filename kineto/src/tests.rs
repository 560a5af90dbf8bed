//! Unit tests of the placement plan and of the stream order on small
//! hand-written traces.

use super::nccl::CommMeta;
use super::scan::{Launch, NcclDraft, StepMark};
use super::*;

use proto::event::Kind;

fn mark(step: u64, start: u64, end: u64, ordinal: u64) -> StepMark {
    StepMark {
        step,
        start,
        end,
        ordinal,
    }
}

fn launch(corr: u64, ts: u64) -> Launch {
    Launch {
        corr,
        ts,
        end: ts,
        ext: 0,
        api: 0,
    }
}

#[test]
fn gpu_events_follow_their_launch() {
    let mut scan = Scan {
        cpu_steps: vec![mark(6, 200, 300, 9), mark(5, 100, 200, 1)],
        launches: vec![
            launch(1, 50),
            launch(2, 150),
            launch(3, 250),
            launch(4, 350),
            launch(2, 999),
        ],
        ..Scan::default()
    };
    let mut stats = ImportStats::default();
    let plan = Plan::new(&mut scan, 2, &[], &mut stats);
    assert_eq!(
        plan.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        vec![5, 6]
    );
    // Segments: 0 before step 5, 1 = step 5, 2 between, 3 = step 6, 4 after.
    assert_eq!(plan.cpu_seg(99), 0);
    assert_eq!(plan.cpu_seg(100), 1);
    assert_eq!(plan.cpu_seg(200), 3);
    assert_eq!(plan.cpu_seg(300), 4);
    // By launch, whatever the GPU start (GPU work lags the CPU).
    assert_eq!(plan.gpu_seg(Some(1), 120), (0, true));
    assert_eq!(
        plan.gpu_seg(Some(2), 260),
        (1, true),
        "first launch of a duplicate id wins"
    );
    assert_eq!(plan.gpu_seg(Some(3), 400), (3, true));
    assert_eq!(plan.gpu_seg(Some(4), 400), (4, true));
    // No launch: outside every step, in the gap at or after its start.
    assert_eq!(plan.gpu_seg(Some(77), 150), (2, false));
    assert_eq!(plan.gpu_seg(None, 10), (0, false));
}

#[test]
fn step_choice_and_cleanup() {
    let mut stats = ImportStats::default();
    let mut scan = Scan {
        cpu_steps: vec![
            mark(3, 0, 10, 0),
            mark(3, 10, 20, 1),
            mark(2, 20, 30, 2),
            mark(4, 30, 40, 3),
        ],
        gpu_steps: vec![mark(9, 0, 1, 4)],
        ..Scan::default()
    };
    let plan = Plan::new(&mut scan, 1, &[], &mut stats);
    assert_eq!(
        plan.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(stats.warnings.len(), 2, "{:?}", stats.warnings);
    // GPU-side steps when there are no CPU ones.
    let mut scan = Scan {
        gpu_steps: vec![mark(9, 5, 6, 4)],
        ..Scan::default()
    };
    let plan = Plan::new(&mut scan, 1, &[], &mut ImportStats::default());
    assert_eq!((plan.steps[0].step, plan.single_step), (9, false));
    // Neither: one step 0 over the bounds, everything in it.
    let mut scan = Scan {
        bounds: Some((7, 70)),
        launches: vec![launch(1, 100)],
        ..Scan::default()
    };
    let plan = Plan::new(&mut scan, 1, &[], &mut ImportStats::default());
    assert!(plan.single_step);
    assert_eq!(
        (plan.steps[0].step, plan.steps[0].start, plan.steps[0].end),
        (0, 7, 70)
    );
    assert_eq!(plan.gpu_seg(None, 1000), (1, false));
    assert_eq!(plan.gpu_seg(Some(1), 0), (1, true));
    assert_eq!(plan.cpu_seg(5), 1);
}

fn draft(ordinal: u64, start: u64, corr: u64, pg: Option<&str>, name: &str) -> NcclDraft {
    NcclDraft {
        ordinal,
        start,
        name: name.into(),
        corr: Some(corr),
        ext: None,
        meta: pg.map(|p| CommMeta {
            pg_name: Some(p.into()),
            ..CommMeta::default()
        }),
    }
}

#[test]
fn sequence_numbers_count_launch_order_per_process_group() {
    let ar = "ncclKernel_AllReduce_RING_LL_Sum_float";
    let mut scan = Scan {
        // File order differs from launch order; corr 99 has no launch.
        nccl: vec![
            draft(10, 500, 3, Some("1"), ar),
            draft(11, 100, 1, Some("1"), ar),
            draft(12, 300, 2, Some("2"), ar),
            draft(13, 50, 99, Some("1"), ar),
            draft(14, 60, 4, None, "ncclDevKernel_Generic"),
        ],
        launches: vec![launch(1, 10), launch(2, 20), launch(3, 30), launch(4, 5)],
        ..Scan::default()
    };
    let pg = raw::PgConfig {
        pg_name: raw::Scalar::Str("2".into()),
        pg_size: raw::Scalar::Num(raw::Num::U(4)),
        ranks: raw::Scalar::Ints(vec![0, 1, 2, 3]),
    };
    let mut stats = ImportStats::default();
    let plan = Plan::new(&mut scan, 8, &[pg], &mut stats);
    let seq = |o: u64| plan.collective_index(o).map(|(_, c)| (c.pg.clone(), c.seq));
    assert_eq!(
        seq(13),
        Some(("1".into(), 0)),
        "launched before the trace: first"
    );
    assert_eq!(seq(11), Some(("1".into(), 1)));
    assert_eq!(seq(10), Some(("1".into(), 2)));
    assert_eq!(seq(12), Some(("2".into(), 0)));
    let (_, c) = plan.collective_index(12).expect("pg 2");
    assert_eq!((c.group_size, c.group_ranks.clone()), (4, vec![0, 1, 2, 3]));
    let (_, c) = plan.collective_index(10).expect("pg 1");
    assert_eq!(
        (c.group_size, c.group_ranks.is_empty()),
        (8, true),
        "world by default"
    );
    let (_, g) = plan.collective_index(14).expect("generic");
    assert_eq!(g.op, None);
    assert_eq!(stats.collectives_unknown_op, 1);
    assert_eq!(plan.collective_index(15), None);
}

/// Writes `text` to a temp file and imports it in chunks of 3.
fn import_text(text: &str) -> ImportedRank {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.json");
    std::fs::write(&path, text).expect("write");
    let mut opts = ImportOptions::new("unit");
    opts.chunk_events = 3;
    opts.max_buffered_events = 2;
    import_to_memory(&path, &opts).expect("imports")
}

/// A compact rendering of the stream: "B5", "E5", "K:name@start", "C@start", "S@start".
fn render(r: &ImportedRank) -> Vec<String> {
    let name = |id: u32| {
        r.names
            .iter()
            .find(|n| n.id == id)
            .map_or("?", |n| n.name.as_str())
    };
    r.events
        .iter()
        .map(|e| match &e.kind {
            Some(Kind::StepBegin(b)) => format!("B{}", b.step),
            Some(Kind::StepEnd(b)) => format!("E{}", b.step),
            Some(Kind::Kernel(k)) => format!("K:{}@{}", name(k.name_id), k.start_ns),
            Some(Kind::Collective(c)) => format!("C@{}", c.start_ns),
            Some(Kind::Span(s)) => format!("S:{}@{}", name(s.name_id), s.start_ns),
            // Operator and memory view records: tested in tests/tbp_views.rs.
            Some(_) => String::new(),
            None => "?".into(),
        })
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn stream_order_with_lagging_gpu_and_warm_up() {
    let ev = |cat: &str, name: &str, ts: u64, dur: u64, corr: Option<u64>| {
        let args = corr.map_or(String::new(), |c| {
            format!(r#", "args": {{"correlation": {c}}}"#)
        });
        format!(
            r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}{args}}}"#
        )
    };
    let events = [
        // GPU events first, in no particular order.
        ev("kernel", "late", 205, 10, Some(2)),
        ev(
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            150,
            20,
            Some(3),
        ),
        ev("kernel", "warm", 120, 1, Some(1)),
        ev("kernel", "orphan", 110, 1, Some(42)),
        ev("gpu_memcpy", "Memcpy HtoD", 130, 1, Some(4)),
        ev("user_annotation", "ProfilerStep#7", 100, 100, None),
        ev("user_annotation", "ProfilerStep#8", 300, 50, None),
        ev("user_annotation", "## forward ##", 101, 10, None),
        ev("cuda_runtime", "cudaLaunchKernel", 90, 1, Some(1)),
        ev("cuda_runtime", "cudaLaunchKernel", 190, 1, Some(2)),
        ev("cuda_runtime", "cudaLaunchKernel", 140, 1, Some(3)),
        ev("cuda_runtime", "cudaMemcpyAsync", 120, 1, Some(4)),
    ];
    let text = format!(
        r#"{{"traceEvents": [{}], "distributedInfo": {{"rank": 1, "world_size": 2}}, "baseTimeNanoseconds": 1000}}"#,
        events.join(",")
    );
    let r = import_text(&text);
    let at = |us: u64| 1000 + us * 1000;
    let want = vec![
        format!("K:warm@{}", at(120)),
        "B7".into(),
        format!("S:## forward ##@{}", at(101)),
        format!("K:Memcpy HtoD@{}", at(130)),
        format!("K:ncclKernel_AllReduce_RING_LL_Sum_float@{}", at(150)),
        format!("C@{}", at(150)),
        format!("K:late@{}", at(205)),
        "E7".into(),
        format!("K:orphan@{}", at(110)),
        "B8".into(),
        "E8".into(),
    ];
    assert_eq!(render(&r), want);
    // Two ProfilerSteps: HTA's window ends with the last one (350 us).
    assert_eq!(
        r.identity.labels.get("hta_last_step_end_ns"),
        Some(&at(350).to_string())
    );
    assert_eq!(r.stats.chunks, 4);
    assert!(r.stats.passes > 3, "max_buffered_events 2 forces passes");
    assert_eq!(r.stats.gpu_events_unlinked, 1);
    assert_eq!(r.stats.gpu_events_outside_steps, 2);
    let memcpy = r.events.iter().find_map(|e| match &e.kind {
        Some(Kind::Kernel(k)) if k.kind == proto::KernelKind::Memcpy as i32 => Some(k),
        _ => None,
    });
    assert_eq!(
        memcpy.map(|k| (k.correlation, k.device, k.stream)),
        Some((4, 1, 1))
    );
}
