//! A large synthetic PyTorch profiler (Kineto) trace for the import benchmark.
//!
//! In: a minimum size in bytes. Out: one uncompressed `.json` trace of one
//! rank (world size 1) at least that large, written with a `BufWriter`.
//!
//! Shape follows the real traces in `cli/tests/fixtures/kineto` (e.g.
//! `hta_negative_queue_rank0_a100`): CPU-side events first in time order
//! (`ProfilerStep#N` annotations and `cpu_op`s with `Input Dims` / `Input
//! type` args), then the launches and GPU activity interleaved in time
//! order: `cudaLaunchKernel` (`cuda_runtime`), `ac2g` flow start/finish
//! pairs and the kernel with the full set of Kineto kernel args. Every 50th
//! GPU activity is a memcpy, every 100th an NCCL all-reduce carrying the
//! collective metadata args (`Collective name`, `In msg nelems`, `Group
//! size`, `dtype`, process group). About 1.2 kB of JSON per kernel.

use std::io::Write;
use std::path::Path;

use crate::BenchError;

/// GPU activities per step.
pub const KERNELS_PER_STEP: u64 = 2_000;
/// Step length, µs (a CPU op launches each kernel, 20 µs apart).
const STEP_US: u64 = 50_000;
const T0_US: u64 = 1_750_000_000_000_000;
const PID: u32 = 4515;

const CPU_OPS: [&str; 6] = [
    "aten::mm",
    "aten::addmm",
    "aten::copy_",
    "aten::add_",
    "aten::native_layer_norm",
    "aten::_scaled_dot_product_flash_attention",
];

const KERNELS: [&str; 4] = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
];

/// What was written.
#[derive(Debug, Clone, Copy)]
pub struct SynthTrace {
    pub bytes: u64,
    pub steps: u64,
    pub kernels: u64,
}

fn cpu_op(step: u64, i: u64) -> String {
    let ts = T0_US + step * STEP_US + 10 + i * 20;
    let ext = step * KERNELS_PER_STEP + i + 1;
    let name = CPU_OPS[(i % CPU_OPS.len() as u64) as usize];
    format!(
        r#"{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {PID}, "tid": {PID}, "ts": {ts}, "dur": 12, "args": {{"External id": {ext}, "Ev Idx": {ext}, "Input Dims": [[8192, 4096], [4096, 4096], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}}}}"#
    )
}

fn gpu_part(step: u64, i: u64) -> String {
    let launch_ts = T0_US + step * STEP_US + 12 + i * 20;
    let corr = 1_000_000 + step * KERNELS_PER_STEP + i;
    let ext = step * KERNELS_PER_STEP + i + 1;
    let gpu_ts = launch_ts + 40;
    let launch = format!(
        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, "ts": {launch_ts}, "dur": 5, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}"#
    );
    let flow_s = format!(
        r#"{{"ph": "s", "id": {corr}, "pid": {PID}, "tid": {PID}, "ts": {launch_ts}, "cat": "ac2g", "name": "ac2g"}}"#
    );
    let flow_f = format!(
        r#"{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {gpu_ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
    );
    let gpu = if i % 100 == 99 {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 20, "ts": {gpu_ts}, "dur": 15, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 20, "correlation": {corr}, "registers per thread": 96, "shared memory": 87568, "blocks per SM": 0.07, "warps per SM": 1.26, "grid": [8, 1, 1], "block": [544, 1, 1], "est. achieved occupancy %": 0, "Collective name": "allreduce", "In msg nelems": 6637568, "Out msg nelems": 6637568, "Group size": 1, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[0]"}}}}"#
        )
    } else if i % 50 == 49 {
        format!(
            r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": {gpu_ts}, "dur": 3, "args": {{"External id": {ext}, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "bytes": 1048576, "memory bandwidth (GB/s)": 24.1}}}}"#
        )
    } else {
        let name = KERNELS[(i % KERNELS.len() as u64) as usize];
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {gpu_ts}, "dur": 18, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 168, "shared memory": 213248, "blocks per SM": 0.87, "warps per SM": 3.48, "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 6}}}}"#
        )
    };
    format!("{launch},\n{flow_s},\n{gpu},\n{flow_f}")
}

/// Writes a trace of at least `min_bytes` to `path`.
pub fn write(path: &Path, min_bytes: u64) -> Result<SynthTrace, BenchError> {
    let per_kernel = (cpu_op(0, 0).len() + gpu_part(0, 0).len() + 4) as u64;
    let steps = min_bytes.div_ceil(per_kernel * KERNELS_PER_STEP) + 1;
    let file = std::fs::File::create(path)
        .map_err(BenchError::io(format!("create {}", path.display())))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let io = BenchError::io(format!("write {}", path.display()));
    let result = (|| -> std::io::Result<()> {
        write!(
            w,
            r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85030365184, "computeMajor": 9, "computeMinor": 0, "numSms": 132}}], "record_shapes": 1, "distributedInfo": {{"backend": "nccl", "rank": 0, "world_size": 1}}, "traceEvents": ["#
        )?;
        let mut first = true;
        let mut sep = |w: &mut std::io::BufWriter<std::fs::File>| {
            let r = if first { Ok(()) } else { w.write_all(b",\n") };
            first = false;
            r
        };
        for step in 0..steps {
            let ts = T0_US + step * STEP_US;
            sep(&mut w)?;
            write!(
                w,
                r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {PID}, "tid": {PID}, "ts": {ts}, "dur": {}, "args": {{"External id": {}}}}}"#,
                STEP_US - 10,
                step * KERNELS_PER_STEP
            )?;
            for i in 0..KERNELS_PER_STEP {
                sep(&mut w)?;
                w.write_all(cpu_op(step, i).as_bytes())?;
            }
        }
        for step in 0..steps {
            for i in 0..KERNELS_PER_STEP {
                sep(&mut w)?;
                w.write_all(gpu_part(step, i).as_bytes())?;
            }
        }
        writeln!(w, "]}}")?;
        w.flush()
    })();
    result.map_err(io)?;
    let bytes = std::fs::metadata(path)
        .map_err(BenchError::io(format!("stat {}", path.display())))?
        .len();
    if bytes < min_bytes {
        return Err(BenchError::Check(format!(
            "synthetic trace has {bytes} bytes, wanted >= {min_bytes}"
        )));
    }
    Ok(SynthTrace {
        bytes,
        steps,
        kernels: steps * KERNELS_PER_STEP,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_trace_is_valid_json_with_the_expected_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let t = write(&path, 100_000).unwrap();
        assert!(t.bytes >= 100_000);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let count = |cat: &str| events.iter().filter(|e| e["cat"] == cat).count() as u64;
        assert_eq!(count("cuda_runtime"), t.kernels);
        assert_eq!(count("cpu_op"), t.kernels);
        assert_eq!(count("ac2g"), 2 * t.kernels);
        assert_eq!(count("user_annotation"), t.steps);
        assert_eq!(count("gpu_memcpy"), t.kernels / 100);
        assert_eq!(v["distributedInfo"]["world_size"], 1);
    }
}
