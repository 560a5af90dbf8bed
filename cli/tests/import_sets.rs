//! Every real trace set (vendored in `tests/fixtures/kineto`) imports
//! without error, the output satisfies the stream and breakdown invariants,
//! and each set's particularity (see its README) comes out right.

mod import_common;

use std::path::Path;

use import_common::{check_invariants, import_checked, segments, trace_sets, Stream};
use rankscope_cli::import::{self, ImportOptions};
use rankscope_proto::v1 as proto;

use proto::event::Kind;

fn import_set(dir: &Path) -> Vec<Stream> {
    let files = import::discover(&[dir.to_path_buf()]).expect("discover");
    let mut opts = ImportOptions::new("sets");
    opts.chunk_events = 5_000;
    files
        .iter()
        .map(|f| {
            let s = import_checked(f, &opts);
            check_invariants(&s);
            s
        })
        .collect()
}

fn collectives(s: &Stream) -> Vec<&proto::Collective> {
    s.events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(Kind::Collective(c)) => Some(c),
            _ => None,
        })
        .collect()
}

fn steps(s: &Stream) -> Vec<u64> {
    segments(s).iter().filter_map(|(st, _)| *st).collect()
}

fn step_begin_ns(s: &Stream) -> u64 {
    s.events
        .iter()
        .find_map(|e| match &e.kind {
            Some(Kind::StepBegin(b)) => Some(b.ts_ns),
            _ => None,
        })
        .expect("a step")
}

#[test]
fn every_set_imports_with_invariants() {
    let root = trace_sets();
    let mut sets: Vec<_> = std::fs::read_dir(&root)
        .expect("read traces")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    assert!(sets.len() >= 7, "{sets:?}");
    for name in [
        "param_dlrm_8rank_v100",
        "hta_nccl_parser_rank0_a100",
        "tracelens_b200_eager_rank0",
        "tracelens_mi300_resnet_rank0",
        "hta_df_index_resolver_rank1_v100",
        "hta_trace_filter_2rank_sm80",
        "hta_negative_queue_rank0_a100",
    ] {
        assert!(
            root.join(name).is_dir(),
            "{name} missing from {}",
            root.display()
        );
    }
    for dir in sets {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let streams = import_set(&dir);
        assert!(!streams.is_empty(), "{name}");
        for s in &streams {
            assert_eq!(s.stats.skipped_bad_events, 0, "{name}");
            // Epoch nanoseconds: all of these traces are from 2022..2027.
            let t = step_begin_ns(s);
            assert!(
                (1_640_000_000_000_000_000..1_830_000_000_000_000_000).contains(&t),
                "{name}: {t}"
            );
        }
        match name.as_str() {
            "hta_nccl_parser_rank0_a100" => nccl_metadata(&streams[0]),
            "tracelens_b200_eager_rank0" => no_profiler_step(&streams[0]),
            "tracelens_mi300_resnet_rank0" => rocm_generic(&streams[0]),
            "hta_df_index_resolver_rank1_v100" => many_allreduces(&streams[0]),
            "hta_trace_filter_2rank_sm80" => {
                let ranks: Vec<u32> = streams.iter().map(|s| s.identity.rank).collect();
                assert_eq!(ranks, vec![0, 1]);
                for s in &streams {
                    assert_eq!(s.identity.world_size, 128);
                    assert_eq!(steps(s), vec![551, 552]);
                    assert_eq!(collectives(s).len(), 10);
                }
            }
            "cpu_gloo_2rank" => {
                // CPU-only: no kernels; every call of the script is a host
                // collective (kineto/tests/cpu_gloo.rs checks each one).
                for s in &streams {
                    assert_eq!(steps(s), vec![2, 3, 4]);
                    assert_eq!(s.stats.events_by_kind.kernel, 0);
                    assert_eq!(collectives(s).len(), 15);
                    assert!(collectives(s).iter().all(|c| c.device == -1));
                }
            }
            "hta_negative_queue_rank0_a100" => {
                let s = &streams[0];
                assert_eq!(steps(s), vec![550, 551, 552, 553, 554]);
                let c = collectives(s);
                assert_eq!(c.len(), 80);
                assert!(c
                    .iter()
                    .all(|c| c.op == proto::CollectiveOp::AllToAll as i32));
                assert_eq!(c.iter().map(|c| c.group_size).max(), Some(16));
            }
            _ => {}
        }
    }
}

/// Float ns-precision timestamps relative to baseTimeNanoseconds; NCCL
/// metadata on the kernels.
fn nccl_metadata(s: &Stream) {
    assert_eq!(steps(s), vec![4, 5, 6]);
    // ProfilerStep#4 ts 4458676416788.066 us + base 1711964646000000000 ns.
    assert_eq!(
        step_begin_ns(s),
        1_711_964_646_000_000_000 + 4_458_676_416_788_066
    );
    let c = collectives(s);
    assert_eq!(c.len(), 21);
    let pg = c[0].process_group_id;
    assert_eq!(s.name(pg), "0");
    for op in [
        proto::CollectiveOp::AllReduce,
        proto::CollectiveOp::Broadcast,
    ] {
        let mut seqs: Vec<u64> = c
            .iter()
            .filter(|x| x.op == op as i32)
            .map(|x| x.seq)
            .collect();
        assert_eq!(
            seqs.len(),
            if op == proto::CollectiveOp::AllReduce {
                15
            } else {
                6
            }
        );
        seqs.dedup();
    }
    let mut seqs: Vec<u64> = c.iter().map(|x| x.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..21).collect::<Vec<_>>());
    // The kernel at ts 4458677009853.422: allreduce of 6637568 floats.
    let k = c
        .iter()
        .find(|x| x.start_ns == 1_711_964_646_000_000_000 + 4_458_677_009_853_422)
        .expect("that allreduce");
    assert_eq!(k.op, proto::CollectiveOp::AllReduce as i32);
    assert_eq!(
        (k.count, k.bytes, k.group_size),
        (6_637_568, 6_637_568 * 4, 2)
    );
    assert_eq!(k.dtype, proto::DataType::Float32 as i32);
    assert_eq!(k.end_ns - k.start_ns, 2_636_669);
    // Ranks are sent with the first collective of the group in a chunk.
    assert_eq!(c[0].group_ranks, vec![0, 1]);
    assert!(c
        .iter()
        .all(|x| x.process_group_id == pg && x.group_size == 2));
    // A broadcast of 53 Longs.
    assert!(c
        .iter()
        .any(|x| x.op == proto::CollectiveOp::Broadcast as i32
            && x.count == 53
            && x.bytes == 53 * 8
            && x.dtype == proto::DataType::Int64 as i32));
    let spans = s.stats.events_by_kind.span;
    assert!(
        spans >= 9,
        "forward/backward/optimizer annotations: {spans}"
    );
}

/// No ProfilerStep: one step 0 with everything in it.
fn no_profiler_step(s: &Stream) {
    assert_eq!(steps(s), vec![0]);
    assert_eq!(s.stats.gpu_events_outside_steps, 0);
    assert_eq!(s.stats.events_by_kind.kernel, 929);
    let c = collectives(s);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].op, proto::CollectiveOp::AllGather as i32);
    assert_eq!(
        (c[0].count, c[0].bytes, c[0].group_size),
        (201_088, 201_088 * 2, 8)
    );
    assert_eq!(c[0].dtype, proto::DataType::Bfloat16 as i32);
    assert_eq!(s.name(c[0].process_group_id), "3");
    assert_eq!(c[0].group_ranks, (0..8).collect::<Vec<u32>>());
    assert_eq!(s.identity.labels["gpu"], "NVIDIA B200");
    // The Triton launcher cpu_op with a `stream` argument (HTA counts it as
    // GPU work): an `other` span on stream 0, device -2.
    let host_stream: Vec<(&str, u32, i64)> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(Kind::Span(sp)) if sp.device == rankscope_kineto::HOST_STREAM_DEVICE => Some((
                s.name(sp.name_id),
                sp.stream,
                (sp.end_ns - sp.start_ns) as i64,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        host_stream,
        vec![(
            "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0",
            0,
            74_391
        )]
    );
}

/// ROCm: ncclDevKernel_Generic, metadata only through launch -> External id
/// -> record_param_comms; CPU steps win over the GPU-side ones.
fn rocm_generic(s: &Stream) {
    assert_eq!(steps(s), vec![15, 16, 17]);
    assert_eq!(s.stats.collectives_unknown_op, 5);
    let c = collectives(s);
    assert_eq!(c.len(), 12);
    let ar = c
        .iter()
        .filter(|x| x.op == proto::CollectiveOp::AllReduce as i32)
        .count();
    assert_eq!(ar, 6);
    assert!(c
        .iter()
        .all(|x| x.group_size == 8 && s.name(x.process_group_id) == "0"));
    assert!(c
        .iter()
        .any(|x| x.count == 8_816_192 && x.bytes == 8_816_192 * 2));
    assert_eq!(s.stats.gpu_events_unlinked, 968);
    assert_eq!(s.identity.local_rank, 2);
}

/// 2020 AllReduce kernels without metadata, five steps.
fn many_allreduces(s: &Stream) {
    assert_eq!(steps(s), vec![2, 3, 4, 5, 6]);
    let c = collectives(s);
    assert_eq!(c.len(), 2020);
    let mut seqs: Vec<u64> = c.iter().map(|x| x.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..2020).collect::<Vec<_>>());
    // 404 per step (each launched inside its step).
    for (step, evs) in segments(s) {
        let n = evs
            .iter()
            .filter(|e| matches!(e.kind, Some(Kind::Collective(_))))
            .count();
        assert_eq!(n, if step.is_some() { 404 } else { 0 });
    }
}
