//! CPU-side collectives: a real 2-rank gloo trace (see
//! cli/tests/fixtures/kineto/cpu_gloo_2rank/README.md) imports with one
//! `Collective` per call the script issued, matched across ranks by seq;
//! the GPU trace sets keep one collective per NCCL kernel.

use std::path::{Path, PathBuf};

use rankscope_kineto::{import_to_memory, ImportOptions, ImportedRank};
use rankscope_proto::v1 as proto;

use proto::event::Kind;
use proto::{CollectiveOp as Op, DataType as Dt};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/fixtures/kineto")
}

fn import(rel: &str) -> ImportedRank {
    import_to_memory(&fixtures().join(rel), &ImportOptions::new("j")).expect("import")
}

fn collectives(r: &ImportedRank) -> Vec<&proto::Collective> {
    r.events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(Kind::Collective(c)) => Some(c),
            _ => None,
        })
        .collect()
}

/// (op, dtype, count, bytes) of each call of one step of the script.
const STEP: [(Op, Dt, u64, u64); 5] = [
    (Op::AllReduce, Dt::Float32, 1024, 4096),
    (Op::AllGather, Dt::Float32, 512, 2048),
    (Op::Broadcast, Dt::Int64, 128, 1024),
    (Op::Barrier, Dt::Uint8, 0, 0),
    (Op::AllReduce, Dt::Float32, 64, 256),
];

#[test]
fn gloo_collectives_are_imported_once_per_call_and_match_across_ranks() {
    let ranks: Vec<ImportedRank> = (0..2)
        .map(|r| import(&format!("cpu_gloo_2rank/rank{r}.pt.trace.json.gz")))
        .collect();
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r.identity.rank, i as u32);
        assert_eq!(r.identity.world_size, 2);
        // Steps are still there.
        let steps: Vec<u64> = r
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::StepBegin(s)) => Some(s.step),
                _ => None,
            })
            .collect();
        assert_eq!(steps, [2, 3, 4]);
        let colls = collectives(r);
        assert_eq!(colls.len(), 15, "rank {i}: 3 steps x 5 calls");
        assert_eq!(r.stats.host_collectives, 15);
        for (k, c) in colls.iter().enumerate() {
            let (op, dtype, count, bytes) = STEP[k % 5];
            let got = (c.op(), c.dtype(), c.count, c.bytes);
            assert_eq!(got, (op, dtype, count, bytes), "rank {i} call {k}");
            assert_eq!(c.seq, k as u64, "rank {i} call {k}: seq in call order");
            assert_eq!(c.group_size, 2);
            assert_eq!(c.device, -1, "host collective");
            assert!(
                c.end_ns > c.start_ns,
                "rank {i} call {k}: the gloo work has a duration"
            );
        }
    }
    // The collector matches ranks by (process group, seq): same calls.
    let key = |r: &ImportedRank| -> Vec<(u32, u64, i32, u64)> {
        collectives(r)
            .iter()
            .map(|c| (c.process_group_id, c.seq, c.op, c.bytes))
            .collect()
    };
    assert_eq!(key(&ranks[0]), key(&ranks[1]));
    // Each collective lies inside its step: StepBegin < Collective < StepEnd.
    for r in &ranks {
        let mut in_step = false;
        for e in &r.events {
            match &e.kind {
                Some(Kind::StepBegin(_)) => in_step = true,
                Some(Kind::StepEnd(_)) => in_step = false,
                Some(Kind::Collective(_)) => assert!(in_step, "collective outside a step"),
                _ => {}
            }
        }
    }
}

#[test]
fn gpu_traces_keep_one_collective_per_nccl_kernel() {
    // (file, NCCL kernels with a known op) — CPU-side c10d ops and
    // record_param_comms in these traces must not add collectives.
    let sets = [
        "hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz",
        "hta_nccl_parser_rank0_a100/nccl_data.json.gz",
        "hta_negative_queue_rank0_a100/rank0.json.gz",
        "tracelens_b200_eager_rank0/eager_trace.json.gz",
        "tracelens_mi300_resnet_rank0/resnet_act_checkpoint.json.gz",
        "param_dlrm_8rank_v100/worker0_step_12.1694128201545.pt.trace.json.gz",
    ];
    for rel in sets {
        let r = import(rel);
        let colls = collectives(&r);
        assert_eq!(r.stats.host_collectives, 0, "{rel}");
        assert!(
            colls.iter().all(|c| c.device >= 0),
            "{rel}: only GPU collectives"
        );
        let nccl_kernels = colls.len();
        let kernels = r
            .events
            .iter()
            .filter(|e| matches!(&e.kind, Some(Kind::Kernel(_))))
            .count();
        assert!(nccl_kernels <= kernels, "{rel}");
    }
}
