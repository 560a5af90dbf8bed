//! Large synthetic PyTorch profiler (Kineto) traces for the import
//! benchmarks.
//!
//! In: a minimum size in bytes ([`write`]: one rank, world size 1), or a
//! job's ranks, steps and total size ([`write_job`]: one trace per rank,
//! one of them a compute straggler). Out: uncompressed `.json` traces,
//! written with a `BufWriter`.
//!
//! Shape follows the real traces in `cli/tests/fixtures/kineto` (e.g.
//! `hta_negative_queue_rank0_a100`): CPU-side events first in time order
//! (`ProfilerStep#N` annotations and `cpu_op`s with `Input Dims` / `Input
//! type` args), then the launches and GPU activity interleaved in time
//! order: `cudaLaunchKernel` (`cuda_runtime`), `ac2g` flow start/finish
//! pairs and the kernel with the full set of Kineto kernel args. Every 50th
//! GPU activity is a memcpy; every 100th, and the last of each step, an
//! NCCL all-reduce over every rank (on its own stream, 4 % of the step,
//! overlapping the compute kernels) carrying the collective metadata args
//! (`Collective name`, `In msg nelems`, `Group size`, `dtype`, process
//! group). About 1.2 kB of JSON per kernel.

use std::io::Write;
use std::path::Path;

use crate::BenchError;

/// GPU activities per step.
pub const KERNELS_PER_STEP: u64 = 2_000;
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

/// One rank of a job: who it is and how its steps look.
#[derive(Debug, Clone, Copy)]
pub struct RankShape {
    pub rank: u32,
    pub world_size: u32,
    pub steps: u64,
    pub kernels_per_step: u64,
    /// A compute straggler: its compute kernels take 1.5x as long, and it
    /// waits correspondingly less inside the collectives.
    pub slow: bool,
}

impl RankShape {
    fn step_us(&self) -> u64 {
        // 20 µs per kernel slot plus a 1 ms tail.
        self.kernels_per_step * 20 + 1_000
    }
}

fn cpu_op(shape: &RankShape, step: u64, i: u64) -> String {
    let ts = T0_US + step * shape.step_us() + 10 + i * 20;
    let ext = step * shape.kernels_per_step + i + 1;
    let name = CPU_OPS[(i % CPU_OPS.len() as u64) as usize];
    format!(
        r#"{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {PID}, "tid": {PID}, "ts": {ts}, "dur": 12, "args": {{"External id": {ext}, "Ev Idx": {ext}, "Input Dims": [[8192, 4096], [4096, 4096], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}}}}"#
    )
}

fn gpu_part(shape: &RankShape, step: u64, i: u64) -> String {
    let launch_ts = T0_US + step * shape.step_us() + 12 + i * 20;
    let corr = 1_000_000 + step * shape.kernels_per_step + i;
    let ext = step * shape.kernels_per_step + i + 1;
    let gpu_ts = launch_ts + 40;
    let world = shape.world_size;
    let group: Vec<String> = (0..world).map(|r| r.to_string()).collect();
    let group = group.join(", ");
    let compute_dur = if shape.slow { 18 } else { 12 };
    // The all-reduce runs on its own stream for 4 % of the step, beside the
    // compute kernels; every rank's ends together, a slow rank's starts a
    // third later (it arrives late). HTA's straggler analysis needs NCCL
    // kernels named `ncclKernel*`, on a stream > 0, of >= 1 % of the step.
    // The others arrive with up to 19 µs of jitter (a fixed function of
    // rank, step and slot, so the traces are reproducible), as real ranks
    // do: without it every fast rank ties and HTA flags them all.
    let nccl_full = shape.step_us() / 25;
    let late = if shape.slow {
        nccl_full / 3
    } else {
        (u64::from(shape.rank) * 7_919 + step * 104_729 + i * 31) % 19
    };
    let (nccl_ts, nccl_dur) = (gpu_ts + late, nccl_full - late);
    let launch = format!(
        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, "ts": {launch_ts}, "dur": 5, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}"#
    );
    let flow_s = format!(
        r#"{{"ph": "s", "id": {corr}, "pid": {PID}, "tid": {PID}, "ts": {launch_ts}, "cat": "ac2g", "name": "ac2g"}}"#
    );
    let flow_f = format!(
        r#"{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {gpu_ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
    );
    let gpu = if i % 100 == 99 || i + 1 == shape.kernels_per_step {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclWorkElem)", "pid": 0, "tid": 20, "ts": {nccl_ts}, "dur": {nccl_dur}, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 20, "correlation": {corr}, "registers per thread": 96, "shared memory": 87568, "blocks per SM": 0.07, "warps per SM": 1.26, "grid": [8, 1, 1], "block": [544, 1, 1], "est. achieved occupancy %": 0, "Collective name": "allreduce", "In msg nelems": 6637568, "Out msg nelems": 6637568, "Group size": {world}, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[{group}]"}}}}"#
        )
    } else if i % 50 == 49 {
        format!(
            r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": {gpu_ts}, "dur": 3, "args": {{"External id": {ext}, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "bytes": 1048576, "memory bandwidth (GB/s)": 24.1}}}}"#
        )
    } else {
        let name = KERNELS[(i % KERNELS.len() as u64) as usize];
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {gpu_ts}, "dur": {compute_dur}, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 168, "shared memory": 213248, "blocks per SM": 0.87, "warps per SM": 3.48, "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 6}}}}"#
        )
    };
    format!("{launch},\n{flow_s},\n{gpu},\n{flow_f}")
}

/// Writes a single-rank trace (world size 1) of at least `min_bytes` to
/// `path`.
pub fn write(path: &Path, min_bytes: u64) -> Result<SynthTrace, BenchError> {
    let mut shape = RankShape {
        rank: 0,
        world_size: 1,
        steps: 1,
        kernels_per_step: KERNELS_PER_STEP,
        slow: false,
    };
    let per_kernel = bytes_per_kernel(&shape);
    shape.steps = min_bytes.div_ceil(per_kernel * KERNELS_PER_STEP) + 1;
    let t = write_rank(path, &shape)?;
    if t.bytes < min_bytes {
        return Err(BenchError::Check(format!(
            "synthetic trace has {} bytes, wanted >= {min_bytes}",
            t.bytes
        )));
    }
    Ok(t)
}

fn bytes_per_kernel(shape: &RankShape) -> u64 {
    (cpu_op(shape, 0, 0).len() + gpu_part(shape, 0, 0).len() + 4) as u64
}

/// Writes one Kineto trace per rank of a `world_size`-rank job with `steps`
/// steps, `rank{r}.json` in `dir`, about `total_bytes` in all; rank
/// `slow_rank` is a compute straggler. Returns what each file holds.
pub fn write_job(
    dir: &Path,
    world_size: u32,
    steps: u64,
    total_bytes: u64,
    slow_rank: u32,
) -> Result<Vec<SynthTrace>, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(format!("create {}", dir.display())))?;
    // Slot 0 of a long step is a compute kernel, the common case.
    let probe = RankShape {
        rank: 0,
        world_size,
        steps,
        kernels_per_step: 1_000,
        slow: false,
    };
    let per_rank_step = total_bytes / u64::from(world_size.max(1)) / steps.max(1);
    let kernels_per_step = (per_rank_step / bytes_per_kernel(&probe)).max(10);
    (0..world_size)
        .map(|rank| {
            let shape = RankShape {
                rank,
                world_size,
                steps,
                kernels_per_step,
                slow: rank == slow_rank,
            };
            write_rank(&dir.join(format!("rank{rank}.json")), &shape)
        })
        .collect()
}

/// Writes the trace of one rank.
pub fn write_rank(path: &Path, shape: &RankShape) -> Result<SynthTrace, BenchError> {
    let file = std::fs::File::create(path)
        .map_err(BenchError::io(format!("create {}", path.display())))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let io = BenchError::io(format!("write {}", path.display()));
    let (rank, world) = (shape.rank, shape.world_size);
    let result = (|| -> std::io::Result<()> {
        write!(
            w,
            r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85030365184, "computeMajor": 9, "computeMinor": 0, "numSms": 132}}], "record_shapes": 1, "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}}, "traceEvents": ["#
        )?;
        let mut first = true;
        let mut sep = |w: &mut std::io::BufWriter<std::fs::File>| {
            let r = if first { Ok(()) } else { w.write_all(b",\n") };
            first = false;
            r
        };
        for step in 0..shape.steps {
            let ts = T0_US + step * shape.step_us();
            sep(&mut w)?;
            write!(
                w,
                r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {PID}, "tid": {PID}, "ts": {ts}, "dur": {}, "args": {{"External id": {}}}}}"#,
                shape.step_us() - 10,
                step * shape.kernels_per_step
            )?;
            for i in 0..shape.kernels_per_step {
                sep(&mut w)?;
                w.write_all(cpu_op(shape, step, i).as_bytes())?;
            }
        }
        for step in 0..shape.steps {
            for i in 0..shape.kernels_per_step {
                sep(&mut w)?;
                w.write_all(gpu_part(shape, step, i).as_bytes())?;
            }
        }
        writeln!(w, "]}}")?;
        w.flush()
    })();
    result.map_err(io)?;
    let bytes = std::fs::metadata(path)
        .map_err(BenchError::io(format!("stat {}", path.display())))?
        .len();
    Ok(SynthTrace {
        bytes,
        steps: shape.steps,
        kernels: shape.steps * shape.kernels_per_step,
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

    #[test]
    fn a_job_has_one_trace_per_rank_and_one_slow_rank() {
        let dir = tempfile::tempdir().unwrap();
        let want = 4 * 3 * 150_000;
        let traces = write_job(dir.path(), 4, 3, want, 2).unwrap();
        assert_eq!(traces.len(), 4);
        let total: u64 = traces.iter().map(|t| t.bytes).sum();
        assert!(
            total.abs_diff(want) < want / 10,
            "{total} bytes written for {want} asked"
        );
        let dur_of_first_gemm = |rank: u32| {
            let path = dir.path().join(format!("rank{rank}.json"));
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            assert_eq!(v["distributedInfo"]["rank"], rank);
            assert_eq!(v["distributedInfo"]["world_size"], 4);
            let events = v["traceEvents"].as_array().unwrap();
            let steps = events
                .iter()
                .filter(|e| e["cat"] == "user_annotation")
                .count();
            assert_eq!(steps, 3);
            let nccl = events
                .iter()
                .find(|e| e["args"]["Collective name"] == "allreduce")
                .unwrap();
            assert_eq!(nccl["args"]["Group size"], 4);
            assert_eq!(nccl["args"]["Process Group Ranks"], "[0, 1, 2, 3]");
            events
                .iter()
                .find(|e| e["cat"] == "kernel" && e["name"].as_str().unwrap().contains("gemm"))
                .unwrap()["dur"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(dur_of_first_gemm(0), 12);
        assert_eq!(dur_of_first_gemm(2), 18);
        assert_eq!(dur_of_first_gemm(3), 12);
    }
}
