//! The GPU side of a PaddlePaddle trace. The CPU wheel the producer tests
//! run writes no device events, so this document is written here after
//! Paddle 3.x's `ChromeTracingLogger` (SEED-VIEWS §3.3): host events on
//! `"<tid>(C++)"` threads with `[x.xxx ms]` name suffixes, a `CudaRuntime`
//! call with `args."correlation id"`, a `Kernel` and a `Memcpy` on
//! `pid` = device / `tid` = stream, the flow events, a `[memory]` instant
//! event and the trailing `{}`. Not a real CUDA trace: a check that the
//! fields Paddle documents land where Kineto's do.

use std::path::Path;

use rankscope_kineto::{import_bytes, op_summary, ImportOptions};
use rankscope_proto::v1 as proto;

use proto::event::Kind;

const TRACE: &str = r#"{
  "displayTimeUnit": "ms", "schemaVersion": "1.0.2", "span_index": "0",
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85000000000}],
  "traceEvents": [
  {"name": "ProfileStep#7[2.000 ms]", "pid": 11, "tid": "11(Python)", "ts": 1795744420000000,
   "dur": 2000.0, "ph": "X", "cat": "ProfileStep", "args": {"start_time": "0.000 us", "end_time": "2000.000 us"}},
  {"name": "Linear[900.000 us]", "pid": 11, "tid": "11(Python)", "ts": 1795744420000050,
   "dur": 900.0, "ph": "X", "cat": "Forward", "args": {}},
  {"name": "matmul dygraph[800.000 us]", "pid": 11, "tid": "11(C++)", "ts": 1795744420000100,
   "dur": 800.0, "ph": "X", "cat": "Operator", "args": {"input_shapes": {"X": [[4, 8]]}, "callstack": ""}},
  {"name": "cudaLaunchKernel[10.000 us]", "pid": 11, "tid": "11(C++)", "ts": 1795744420000200,
   "dur": 10.0, "ph": "X", "cat": "CudaRuntime", "cname": "thread_state_running",
   "args": {"correlation id": 42, "start_time": "200.000 us", "end_time": "210.000 us"}},
  {"name": "launch", "id": 42, "pid": 11, "tid": "11(C++)", "ts": 1795744420000205, "ph": "s", "cat": "async"},
  {"name": "cudaMemcpyAsync[5.000 us]", "pid": 11, "tid": "11(C++)", "ts": 1795744420000300,
   "dur": 5.0, "ph": "X", "cat": "CudaRuntime", "args": {"correlation id": 43}},
  {"name": "[memory]", "pid": 11, "tid": "11(C++)", "ts": 1795744420000400, "ph": "i", "cat": "Allocate",
   "args": {"place": "Place(gpu:0)", "addr": "1", "increase_bytes": 4096, "current_allocated": 4096,
            "current_reserved": 8192, "peak_allocated": 4096, "peak_reserved": 8192}},
  {"name": "volta_sgemm_128x64_nn[300.000 us]", "pid": 0, "tid": 7, "ts": 1795744420000500,
   "dur": 300.0, "ph": "X", "cat": "Kernel", "cname": "cq_build_failed",
   "args": {"start_time": "500.000 us", "end_time": "800.000 us", "device": 0, "context": 1, "stream": 7,
            "correlation id": 42, "registers per thread": 128, "shared memory": 0, "blocks per SM": 1.0,
            "warps per SM": 4.0, "grid": [4, 1, 1], "block": [128, 1, 1], "theoretical achieved occupancy %": 25.0}},
  {"name": "launch", "id": 42, "pid": 0, "tid": 7, "ts": 1795744420000650, "ph": "f", "cat": "async", "bp": "e"},
  {"name": "MEMCPY_HtoD[20.000 us]", "pid": 0, "tid": 7, "ts": 1795744420000900,
   "dur": 20.0, "ph": "X", "cat": "Memcpy",
   "args": {"start_time": "900.000 us", "end_time": "920.000 us", "stream": 7, "correlation id": 43,
            "bytes": 65536, "memory bandwidth (GB/s)": 3.2768}},
  {"name": "process_name", "pid": 0, "tid": 7, "ph": "M", "args": {"name": "Device 0 (GPU)"}},
  {}
  ],
  "ExtraInfo": {"11": "MainThread"}
}"#;

#[test]
fn paddle_kernels_and_memcpys_link_to_their_runtime_calls_in_the_step() {
    let mut opts = ImportOptions::new("j");
    opts.world_size_override = Some(4);
    let r = import_bytes(
        Path::new("rank2_time_x.paddle_trace.json"),
        TRACE.as_bytes(),
        &opts,
    )
    .expect("import");
    assert_eq!((r.identity.rank, r.identity.world_size), (2, 4));
    assert_eq!(r.identity.labels["source"], "paddle");
    assert_eq!(r.identity.labels["gpu"], "NVIDIA H100 80GB HBM3");
    assert_eq!(r.identity.labels["peak_allocated_bytes"], "4096");
    let name = |id: u32| {
        r.names
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.name.as_str())
            .unwrap_or("")
    };
    let base = 1_795_744_420_000_000_000u64;
    let mut kernels = Vec::new();
    let mut steps = Vec::new();
    let mut forward = 0;
    for e in &r.events {
        match &e.kind {
            Some(Kind::StepBegin(s)) => steps.push((s.step, s.ts_ns - base)),
            Some(Kind::Kernel(k)) => kernels.push((
                k.kind,
                name(k.name_id).to_owned(),
                k.stream,
                k.device,
                k.start_ns - base,
                k.correlation,
                k.launch_start_ns - base,
                name(k.launch_name_id).to_owned(),
                k.bytes,
            )),
            Some(Kind::Span(s)) if s.category == proto::SpanCategory::Forward as i32 => {
                forward += 1;
                assert_eq!(name(s.name_id), "Linear");
            }
            _ => {}
        }
    }
    assert_eq!(steps, [(7, 0)]);
    assert_eq!(forward, 1);
    use proto::KernelKind as K;
    assert_eq!(
        kernels,
        [
            (
                K::Kernel as i32,
                "volta_sgemm_128x64_nn".into(),
                7,
                0,
                500_000,
                42,
                200_000,
                "cudaLaunchKernel".into(),
                0
            ),
            (
                K::Memcpy as i32,
                "MEMCPY_HtoD".into(),
                7,
                0,
                900_000,
                43,
                300_000,
                "cudaMemcpyAsync".into(),
                65536
            ),
        ]
    );
    assert_eq!(r.stats.gpu_events_unlinked, 0);
    assert_eq!(r.stats.gpu_events_outside_steps, 0);

    // The operator, as `op_summary` gives Kineto's `cpu_op`s.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rank2.paddle_trace.json");
    std::fs::write(&path, TRACE).expect("write");
    let ops = op_summary(&path, &[(base, base + 2_000_000)]).expect("ops");
    let op = ops
        .iter()
        .find(|o| o.category == "CPU_OP")
        .expect("an operator");
    assert_eq!(
        (op.name.as_str(), op.calls, op.total_ns),
        ("matmul dygraph", 1, 800_000)
    );
    assert!(ops
        .iter()
        .any(|o| o.category == "COMPUTATION" && o.name == "volta_sgemm_128x64_nn"));
}
