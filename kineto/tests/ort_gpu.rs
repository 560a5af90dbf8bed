//! The GPU side of an ONNX Runtime profile. The CPU wheel the producer
//! tests run (PyPI `onnxruntime`) has no GPU provider, and the CUDA one
//! (`onnxruntime-gpu`) writes `Kernel` events only when built with
//! `--enable_cuda_profiling` (`ENABLE_CUDA_PROFILING`), which as far as we
//! know the published wheels are not; no GPU producer runs here (no GPU on
//! the test machine). So `fixtures/ort_cuda/` is
//! written after ORT's own source, field for field (see `format::ort` for
//! the files and functions): `Profiler::EndProfiling`'s serialisation
//! (`"key" : "value"` args, whole-µs relative `ts`/`dur`),
//! `CUPTIManager::ProcessActivityBuffers`' kernel and memcpy records (pid
//! and tid -1, `stream` and `grid_*`/`block_*` as strings, memcpys named
//! by kind with grids of -1) and `GPUProfilerBase::MergeEvents`' placement
//! (right after the parent node, with its `op_name` and `parent_name`).

use std::path::Path;

use rankscope_kineto::{import_bytes, ImportOptions};
use rankscope_proto::v1 as proto;

use proto::event::Kind;

const FIXTURE: &str = include_str!("fixtures/ort_cuda/ort_profile_cuda.json");

#[test]
fn ort_gpu_kernels_land_on_their_stream_linked_to_their_node() {
    let r = import_bytes(
        Path::new("ort_profile_cuda.json"),
        FIXTURE.as_bytes(),
        &ImportOptions::new("ort"),
    )
    .expect("import");
    assert_eq!(r.identity.labels["source"], "onnxruntime");
    assert_eq!(r.identity.labels["providers"], "CUDAExecutionProvider");
    let name = |id: u32| {
        r.names
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.name.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let mut steps = Vec::new();
    let mut kernels = Vec::new();
    let mut ops = Vec::new();
    for e in &r.events {
        match &e.kind {
            Some(Kind::StepBegin(s)) => steps.push(s.step),
            Some(Kind::Kernel(k)) => kernels.push((
                k.kind,
                name(k.name_id),
                k.stream,
                k.device,
                k.start_ns,
                k.end_ns - k.start_ns,
                k.correlation,
            )),
            Some(Kind::OperatorStat(o)) if !o.by_shape => {
                ops.push((name(o.name_id), o.calls, o.host_total_ns, o.device_self_ns))
            }
            _ => {}
        }
    }
    assert_eq!(steps, [0, 1], "one step per model_run");
    use proto::KernelKind as K;
    let conv = "void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, \
                int, float, float, float, float, float, float>(cudnn::cnn::GroupedDirectFpropParams, \
                float const*, float const*, float*, float, float*, float const*, float const*, float)";
    let relu = "void onnxruntime::cuda::_UnaryElementWise<float, float, \
                onnxruntime::cuda::OP_Relu<float>, 256, 4>(float const*, float*, \
                onnxruntime::cuda::OP_Relu<float>, int)";
    let us = 1000u64;
    // (kind, name, stream, device, start, duration, correlation = the
    // ordinal of the node event its parent_name names).
    assert_eq!(
        kernels,
        [
            (
                K::Memcpy as i32,
                "MemcpyHostToDevice".into(),
                7,
                0,
                200_020 * us,
                2 * us,
                1
            ),
            (
                K::Kernel as i32,
                conv.into(),
                7,
                0,
                200_030 * us,
                11 * us,
                1
            ),
            (K::Kernel as i32, relu.into(), 7, 0, 200_070 * us, 3 * us, 2),
            (
                K::Kernel as i32,
                conv.into(),
                7,
                0,
                201_020 * us,
                10 * us,
                3
            ),
            (K::Kernel as i32, relu.into(), 7, 0, 201_060 * us, 3 * us, 4),
        ]
    );
    // The Operator view: host time per op type as the profile's own
    // totals, device time the kernels each node launched.
    ops.sort();
    assert_eq!(
        ops,
        [
            ("Conv".into(), 2, 70 * us, 23 * us),
            ("Relu".into(), 2, 35 * us, 6 * us),
        ]
    );
}
