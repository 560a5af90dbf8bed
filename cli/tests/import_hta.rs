//! The Kineto importer preserves what Holistic Trace Analysis computes: the
//! 8 real traces of `param_dlrm_8rank_v100` (copied into the fixtures with
//! their README and HTA 0.5.0's `expected-hta.json`) give, per rank, HTA's
//! temporal breakdown and comm/comp overlap within 0.5 percentage points
//! and 1 % for times, counting every GPU event including the warm-up
//! kernels outside the ProfilerStep.

mod import_common;

use import_common::{check_invariants, fixture, gpu_events, import_checked, segments, Stream};
use rankscope_analysis::KernelClass;
use rankscope_cli::import::{self, ImportOptions};
use rankscope_proto::v1 as proto;
use serde_json::Value;

use proto::event::Kind;

fn import_set() -> Vec<Stream> {
    let files = import::discover(&[fixture("param_dlrm_8rank_v100")]).expect("discover");
    assert_eq!(
        files.len(),
        8,
        "expected-hta.json and README are not traces: {files:?}"
    );
    let mut opts = ImportOptions::new("dlrm");
    opts.chunk_events = 100;
    let mut out: Vec<Stream> = files.iter().map(|f| import_checked(f, &opts)).collect();
    out.sort_by_key(|s| s.identity.rank);
    out
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixture("param_dlrm_8rank_v100/expected-hta.json"))
        .expect("expected-hta.json");
    serde_json::from_str(&text).expect("valid JSON")
}

fn row<'a>(v: &'a Value, table: &str, rank: u32) -> &'a Value {
    v[table]
        .as_array()
        .expect("table")
        .iter()
        .find(|r| r["rank"].as_u64() == Some(u64::from(rank)))
        .expect("row for rank")
}

fn close_time(ours_ns: u64, hta_us: f64, what: &str, rank: u32) {
    let ours_us = ours_ns as f64 / 1000.0;
    let tol = (hta_us.abs() * 0.01).max(1e-9);
    assert!(
        (ours_us - hta_us).abs() <= tol,
        "rank {rank} {what}: ours {ours_us} us, HTA {hta_us} us"
    );
}

fn close_pct(ours: Option<f64>, hta: f64, what: &str, rank: u32) {
    let ours = ours.expect("defined");
    assert!(
        (ours - hta).abs() <= 0.5,
        "rank {rank} {what}: ours {ours:.3} %, HTA {hta} %"
    );
}

#[test]
fn temporal_breakdown_and_overlap_match_hta() {
    let exp = expected();
    let streams = import_set();
    for (i, s) in streams.iter().enumerate() {
        let rank = s.identity.rank;
        assert_eq!(rank as usize, i);
        assert_eq!(s.identity.world_size, 8);
        let b = rankscope_analysis::breakdown(&gpu_events(s));
        let t = row(&exp, "temporal_breakdown", rank);
        let f = |k: &str| t[k].as_f64().expect(k);
        close_time(b.gpu_span_ns, f("kernel_time(us)"), "kernel_time", rank);
        close_time(b.idle_ns, f("idle_time(us)"), "idle_time", rank);
        close_time(b.compute_ns, f("compute_time(us)"), "compute_time", rank);
        close_time(
            b.non_compute_ns,
            f("non_compute_time(us)"),
            "non_compute_time",
            rank,
        );
        close_pct(b.idle_pct, f("idle_time_pctg"), "idle_pct", rank);
        close_pct(b.compute_pct, f("compute_time_pctg"), "compute_pct", rank);
        close_pct(
            b.non_compute_pct,
            f("non_compute_time_pctg"),
            "non_compute_pct",
            rank,
        );
        let o = row(&exp, "comm_comp_overlap", rank)["comp_comm_overlap_pctg"]
            .as_f64()
            .expect("overlap");
        close_pct(b.overlap_pct, o, "comp_comm_overlap", rank);
        check_invariants(s);
    }
}

#[test]
fn kernel_counts_per_class_match_hta() {
    let exp = expected();
    for s in import_set() {
        let events = gpu_events(&s);
        for r in exp["kernel_type_per_rank"].as_array().expect("table") {
            if r["rank"].as_u64() != Some(u64::from(s.identity.rank)) {
                continue;
            }
            let class = match r["kernel_type"].as_str() {
                Some("COMMUNICATION") => KernelClass::Communication,
                Some("COMPUTATION") => KernelClass::Computation,
                Some("MEMORY") => KernelClass::Memory,
                other => panic!("unexpected class {other:?}"),
            };
            let ours: Vec<_> = events.iter().filter(|e| e.class == class).collect();
            assert_eq!(
                ours.len() as u64,
                r["count"].as_u64().expect("count"),
                "{class:?}"
            );
            let sum_us: u64 = ours.iter().map(|e| e.end_ns - e.start_ns).sum::<u64>() / 1000;
            assert_eq!(
                sum_us as f64,
                r["sum_dur_us"].as_f64().expect("sum"),
                "{class:?}"
            );
        }
    }
}

#[test]
fn steps_warm_up_and_collectives() {
    let streams = import_set();
    for s in &streams {
        let segs = segments(s);
        // One ProfilerStep#10 per rank.
        let steps: Vec<_> = segs.iter().filter_map(|(st, _)| *st).collect();
        assert_eq!(steps, vec![10]);
        assert_eq!(s.stats.skipped_bad_events, 0);
        assert_eq!(s.identity.labels["gpu"], "Tesla V100-SXM2-32GB");
        assert_eq!(s.identity.local_rank, s.identity.rank);
        // Ranks 1 and 3 have 64 warm-up GPU events with no launch in the
        // trace: kept, outside the step.
        let warm_up = if matches!(s.identity.rank, 1 | 3) {
            64
        } else {
            0
        };
        assert_eq!(
            s.stats.gpu_events_unlinked, warm_up,
            "rank {}",
            s.identity.rank
        );
        assert_eq!(s.stats.gpu_events_outside_steps, warm_up);
        // 3 AllReduce + 5 SendRecv (all_to_all), no metadata: default
        // process group, whole world, seq 0..8 in launch order.
        let colls: Vec<&proto::Collective> = s
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::Collective(c)) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(colls.len(), 8);
        let ops = |op: proto::CollectiveOp| colls.iter().filter(|c| c.op == op as i32).count();
        assert_eq!(ops(proto::CollectiveOp::AllReduce), 3);
        assert_eq!(ops(proto::CollectiveOp::AllToAll), 5);
        let mut seqs: Vec<u64> = colls.iter().map(|c| c.seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..8).collect::<Vec<_>>());
        for c in &colls {
            assert_eq!((c.process_group_id, c.group_size, c.bytes), (0, 8, 0));
            let dt = if c.op == proto::CollectiveOp::AllReduce as i32 {
                proto::DataType::Float32
            } else {
                proto::DataType::Int8
            };
            assert_eq!(c.dtype, dt as i32);
        }
    }
    // Same op at the same seq on every rank: ranks match by (pg, seq).
    let op_at = |s: &Stream| -> Vec<(u64, i32)> {
        let mut v: Vec<_> = s
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::Collective(c)) => Some((c.seq, c.op)),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    };
    let first = op_at(&streams[0]);
    for s in &streams[1..] {
        assert_eq!(op_at(s), first, "rank {}", s.identity.rank);
    }
}
