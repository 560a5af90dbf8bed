//! The single-job views of round 3 at scale (issue 38, goal 7): overview,
//! ops, memory and clocks of one job of [`RANKS`] ranks x [`STEPS`] steps,
//! through a collector's HTTP API, with the query strings the UI sends
//! (`ui/js/profiler.js`, `ui/js/views.js`).
//!
//! In: a ClickHouse server and a collector on a fresh database (its
//! migrations create the schema). Out: a [`ViewsRun`]: per route the cold
//! round trip (first request after the load) and the warm ones, and what the
//! answers hold.
//!
//! The job, generated inside ClickHouse (`INSERT ... SELECT FROM numbers`,
//! as [`crate::fleet`] does), 8 ranks per node, one step per second: per
//! (rank, step) the simulator's `--layers 1` GPU work
//! ([`KERNELS_PER_STEP`]: a memcpy, a memset, the 22 kernels of one forward
//! and backward layer, 3 NCCL kernels and the optimizer's), each with its
//! launch call (`kernel_launches`) and the compute kernels with their launch
//! figures (`kernel_configs`); a dataloader span; a `step_breakdown` row; the
//! rank SDK's per-step device peak (`memory_stats` kind `peak`, `per_step`);
//! 3 blocking collectives (the clocks estimate; node `n`'s clock runs `n` µs
//! ahead). Per rank, as one trace each would give: [`OPERATORS`] operator
//! rows (`operator_stats`), their memory rows (kind `op`), a peak, a
//! 100-point curve (`sample`) and 100 allocation events (`event`).
//!
//! The overview's per-rank figures: the cold request is the first after the
//! load, so it computes them from every stored row (and the collector keeps
//! them in `overview_ranks`, its own code, `api::overview::kept`, as for any
//! job). Then the collector is restarted on the same database and one more
//! request, the first the new process's memory cannot answer, is timed as
//! [`ViewsRun::overview_kept_ms`]: it must say `figures_from` `kept` and equal
//! the cold answer's figures.

use std::time::Instant;

use rankscope_collector::store::{Store, StoreConfig};

use crate::e2e::Ctx;
use crate::stack::CollectorProc;
use crate::BenchError;

/// Ranks of the generated job.
pub const RANKS: u64 = 1_024;
/// Steps of the generated job.
pub const STEPS: u64 = 100;
/// GPU activities per (rank, step): 2 + 22 + 3 + 1.
pub const KERNELS_PER_STEP: u64 = 28;
/// Operators per rank.
pub const OPERATORS: u64 = 40;
const JOB: &str = "bench-views-1024";

/// The generated job's kernel names, by position in the step.
const KERNEL_NAMES: [&str; KERNELS_PER_STEP as usize] = [
    "Memcpy HtoD (Pageable -> Device)",
    "Memset (Device)",
    "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas_relu",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::MulFunctor<float>>>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<c10::BFloat16>>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::layer_norm_grad_input_kernel<c10::BFloat16, float>",
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::layer_norm_grad_input_kernel<c10::BFloat16, float>",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>",
];

/// Timings of the four routes.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ViewsRun {
    pub ranks: u64,
    pub steps: u64,
    /// Rows written, all tables.
    pub rows: u64,
    pub load_s: f64,
    /// The overview's first request after a restart of the collector,
    /// answered from the per-rank figures the cold request kept
    /// (`overview_ranks`, migration 0018; module doc).
    #[serde(default)]
    pub overview_kept_ms: f64,
    pub routes: Vec<RouteRun>,
}

/// One route's round trips.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RouteRun {
    /// `overview`, `ops`, `memory` or `clocks`.
    pub view: String,
    /// Path and query after `/api/v1/jobs/{job}`.
    pub path: String,
    pub cold_ms: f64,
    pub warm_ms: Vec<f64>,
    pub response_bytes: usize,
}

impl ViewsRun {
    /// The route of `view`, when measured.
    pub fn route(&self, view: &str) -> Option<&RouteRun> {
        self.routes
            .iter()
            .find(|r| r.view == view && !r.warm_ms.is_empty())
    }
}

/// The routes and their queries, as the UI sends them.
pub const ROUTES: [(&str, &str); 4] = [
    ("overview", "/overview"),
    ("ops", "/ops?top=50"),
    (
        "memory",
        "/memory?ops=true&curve=true&events=true&limit=200",
    ),
    ("clocks", "/clocks"),
];

/// Writes the job ending at `now_ns`; returns the rows written.
pub async fn load(store: &Store, now_ns: u64) -> Result<u64, BenchError> {
    let t0 = now_ns - (STEPS + 60) * 1_000_000_000;
    let exec = |what: &'static str, sql: String| async move {
        store
            .client()
            .query(&sql)
            .execute()
            .await
            .map_err(|e| BenchError::ClickHouse(format!("views job, {what}: {e}")))
    };
    let names = format!(
        "[{}]",
        KERNEL_NAMES
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Columns of one GPU activity n: rank, step, position k, times.
    let k = KERNELS_PER_STEP;
    let kcols = format!(
        "toUInt32(intDiv(number, {STEPS} * {k})) AS r, intDiv(number % ({STEPS} * {k}), {k}) AS s, \
         number % {k} AS k, concat('node-', toString(intDiv(r, 8))) AS node_name, \
         {t0} + s * 1000000000 + 5000000 + k * 30000000 + (cityHash64(number) % 100000) AS st, \
         st + 20000000 + (cityHash64(number, 1) % 2000000) AS en, s * {k} + k + 1 AS corr, \
         arrayElement({names}, toUInt32(k) + 1) AS kname"
    );
    let kernels = RANKS * STEPS * k;
    exec(
        "kernels",
        format!(
            "INSERT INTO kernels (job_id, rank, node, kind, name, stream, device, start_ns, end_ns, \
             correlation, bytes) SELECT '{JOB}', r, node_name, \
             multiIf(k = 0, 'memcpy', k = 1, 'memset', 'kernel'), kname, \
             if(k >= 24 AND k <= 26, 20, 7), toInt32(r % 8), st, en, corr, \
             if(k <= 1, 67108864, 0) FROM (SELECT {kcols} FROM numbers({kernels}))"
        ),
    )
    .await?;
    exec(
        "kernel_launches",
        format!(
            "INSERT INTO kernel_launches (job_id, rank, node, correlation, stream, kernel_start_ns, \
             api, start_ns, end_ns) SELECT '{JOB}', r, node_name, corr, \
             if(k >= 24 AND k <= 26, 20, 7), st, \
             multiIf(k = 0, 'cudaMemcpyAsync', k = 1, 'cudaMemsetAsync', 'cudaLaunchKernel'), \
             st - 15000, st - 9000 FROM (SELECT {kcols} FROM numbers({kernels}))"
        ),
    )
    .await?;
    exec(
        "kernel_configs",
        format!(
            "INSERT INTO kernel_configs (job_id, rank, node, correlation, kernel_start_ns, \
             blocks_per_sm, est_achieved_occupancy_pct, grid, block, registers_per_thread, \
             shared_memory_bytes) SELECT '{JOB}', r, node_name, corr, st, \
             1.5 + (k % 4), 25.0 + (k % 5) * 10, [132, 1, 1], [256, 1, 1], 128, 49152 \
             FROM (SELECT {kcols} FROM numbers({kernels})) WHERE k >= 2"
        ),
    )
    .await?;
    // Per (rank, step): the step row, the dataloader span, the SDK's peak.
    let scols = format!(
        "toUInt32(intDiv(number, {STEPS})) AS r, number % {STEPS} AS s, \
         concat('node-', toString(intDiv(r, 8))) AS node_name, \
         {t0} + s * 1000000000 AS st"
    );
    let rank_steps = RANKS * STEPS;
    exec(
        "step_breakdown",
        format!(
            "INSERT INTO step_breakdown (job_id, step, rank, node, step_start_ns, step_time_ns, \
             gpu_span_ns, gpu_busy_ns, compute_ns, computed_ns) SELECT '{JOB}', s, r, node_name, \
             st, 900000000, 850000000, 800000000, 700000000, st + 1000000000 \
             FROM (SELECT {scols} FROM numbers({rank_steps}))"
        ),
    )
    .await?;
    exec(
        "spans",
        format!(
            "INSERT INTO spans (job_id, rank, node, category, name, start_ns, end_ns) \
             SELECT '{JOB}', r, node_name, 'dataloader', 'dataloader', st, st + 3000000 \
             FROM (SELECT {scols} FROM numbers({rank_steps}))"
        ),
    )
    .await?;
    exec(
        "memory_stats per step",
        format!(
            "INSERT INTO memory_stats (job_id, rank, node, kind, device, allocated_bytes, \
             reserved_bytes, device_total_bytes, step, per_step, ts_ns) SELECT '{JOB}', r, \
             node_name, 'peak', toInt32(r % 8), 60000000000 + (cityHash64(r, s) % 1000000000), \
             64000000000, 85899345920, s, 1, st + 900000000 \
             FROM (SELECT {scols} FROM numbers({rank_steps}))"
        ),
    )
    .await?;
    // Per rank: the trace's memory curve and events (kind sample / event).
    for kind in ["sample", "event"] {
        exec(
            "memory_stats curve / events",
            format!(
                "INSERT INTO memory_stats (job_id, rank, node, kind, device, name, \
                 size_increase_bytes, allocated_bytes, reserved_bytes, ts_ns) SELECT '{JOB}', r, \
                 node_name, '{kind}', toInt32(r % 8), if('{kind}' = 'event', 'aten::empty', ''), \
                 if(s % 2 = 0, 268435456, -268435456), 50000000000 + (s % 2) * 268435456, \
                 64000000000, st + 500000000 FROM (SELECT {scols} FROM numbers({rank_steps}))"
            ),
        )
        .await?;
    }
    // Per (rank, operator): operator rows and their memory rows; the trace's peak.
    let o = OPERATORS;
    let ocols = format!(
        "toUInt32(intDiv(number, {o})) AS r, number % {o} AS op, \
         concat('node-', toString(intDiv(r, 8))) AS node_name, \
         concat('aten::op_', toString(op)) AS oname, {t0} + 1000000000 AS ts"
    );
    exec(
        "operator_stats",
        format!(
            "INSERT INTO operator_stats (job_id, rank, node, name, call_stack, calls, host_self_ns, \
             host_total_ns, device_self_ns, device_total_ns, tc_self_ns, tc_total_ns, tc_eligible, \
             runtime_ns, host_total_min_ns, host_total_max_ns, device_total_min_ns, \
             device_total_max_ns, ts_ns) SELECT '{JOB}', r, node_name, oname, '', 100 * (1 + op % 3), \
             toInt64(1000000 * (op + 1)), 2000000 * (op + 1), 3000000 * (op + 1) + r, \
             4000000 * (op + 1), if(op % 4 = 0, 2000000 * (op + 1), 0), \
             if(op % 4 = 0, 3000000 * (op + 1), 0), op % 2, 50000 * (op + 1), 5000, 90000, 10000, \
             200000, ts FROM (SELECT {ocols} FROM numbers({}))",
            RANKS * o
        ),
    )
    .await?;
    exec(
        "memory_stats ops",
        format!(
            "INSERT INTO memory_stats (job_id, rank, node, kind, device, name, calls, \
             size_increase_bytes, self_size_increase_bytes, allocation_count, \
             self_allocation_count, allocation_size_bytes, self_allocation_size_bytes, ts_ns) \
             SELECT '{JOB}', r, node_name, 'op', toInt32(r % 8), oname, 100, 1048576 * op, \
             524288 * op, 10 * op, 5 * op, 2097152 * op, 1048576 * op, ts \
             FROM (SELECT {ocols} FROM numbers({}))",
            RANKS * o
        ),
    )
    .await?;
    exec(
        "memory_stats peak",
        format!(
            "INSERT INTO memory_stats (job_id, rank, node, kind, device, allocated_bytes, \
             reserved_bytes, ts_ns) SELECT '{JOB}', toUInt32(number), \
             concat('node-', toString(intDiv(number, 8))), 'peak', toInt32(number % 8), \
             61000000000, 64000000000, {t0} + 1000000000 FROM numbers({RANKS})"
        ),
    )
    .await?;
    exec(
        "ranks",
        format!(
            "INSERT INTO ranks (job_id, rank, world_size, local_rank, node, pid, seen_ns) \
             SELECT '{JOB}', toUInt32(number), {RANKS}, toUInt32(number % 8), \
             concat('node-', toString(intDiv(number, 8))), toUInt32(1000 + number), {t0} \
             FROM numbers({RANKS})"
        ),
    )
    .await?;
    // 3 blocking collectives per step; node n's clock is n µs ahead.
    let calls = 3;
    let collectives = RANKS * STEPS * calls;
    exec(
        "collectives",
        format!(
            "INSERT INTO collectives (job_id, rank, node, op, process_group, group_size, dtype, \
             count, bytes, seq, stream, device, start_ns, end_ns) SELECT '{JOB}', r, node_name, \
             arrayElement(['all_gather', 'reduce_scatter', 'all_reduce'], toUInt32(c) + 1), '0', \
             {RANKS}, if(c = 2, 'float32', 'bfloat16'), 1000000, 2000000, s * {calls} + c + 1, 20, \
             toInt32(r % 8), arrival + skew, last + 40000000 + (cityHash64(r, s, c) % 10000) + skew \
             FROM (SELECT toUInt32(intDiv(number, {STEPS} * {calls})) AS r, \
             intDiv(number % ({STEPS} * {calls}), {calls}) AS s, number % {calls} AS c, \
             concat('node-', toString(intDiv(r, 8))) AS node_name, intDiv(r, 8) * 1000 AS skew, \
             {t0} + s * 1000000000 + 100000000 + c * 300000000 AS base, \
             base + cityHash64(number) % 2000000 AS arrival, base + 2000000 AS last \
             FROM numbers({collectives}))"
        ),
    )
    .await?;
    Ok(kernels * 3 - RANKS * STEPS * 2 + rank_steps * 5 + RANKS * (o * 2 + 2) + collectives)
}

/// Loads the job, starts a collector and times a cold then `reps` warm
/// requests per route.
pub async fn run(ctx: &Ctx, reps: usize) -> Result<ViewsRun, BenchError> {
    let db = "bench_views";
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let collector = CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    let store = Store::connect(&StoreConfig {
        url: ctx.ch.http_url.clone(),
        database: db.to_owned(),
        ..StoreConfig::default()
    })
    .map_err(|e| BenchError::ClickHouse(e.to_string()))?;
    let started = Instant::now();
    let rows = load(&store, rankscope_collector::service::now_ns()).await?;
    let mut out = ViewsRun {
        ranks: RANKS,
        steps: STEPS,
        rows,
        load_s: started.elapsed().as_secs_f64(),
        overview_kept_ms: 0.0,
        routes: Vec::new(),
    };
    let mut cold_overview = serde_json::Value::Null;
    for (view, path) in ROUTES {
        let url = format!("{}/api/v1/jobs/{JOB}{path}", collector.http_url);
        let mut run = RouteRun {
            view: view.to_owned(),
            path: path.to_owned(),
            ..RouteRun::default()
        };
        for i in 0..=reps {
            let r = ctx.http.get_ok(&url).await?;
            let ms = r.elapsed.as_secs_f64() * 1e3;
            if i == 0 {
                run.cold_ms = ms;
                run.response_bytes = r.body.len();
                let v = r.json()?;
                check(view, &v)?;
                if view == "overview" {
                    cold_overview = v;
                }
            } else {
                run.warm_ms.push(ms);
            }
        }
        out.routes.push(run);
    }
    drop(collector);
    // A restarted collector: its first overview comes from the kept figures.
    let collector = CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    let url = format!("{}/api/v1/jobs/{JOB}/overview", collector.http_url);
    let r = ctx.http.get_ok(&url).await?;
    out.overview_kept_ms = r.elapsed.as_secs_f64() * 1e3;
    check_kept(&r.json()?, &cold_overview)?;
    drop(collector);
    crate::e2e::drop_after(&ctx.ch, db);
    Ok(out)
}

/// The restarted collector's overview came from the kept figures and equals
/// the cold request's, computed from every row.
fn check_kept(v: &serde_json::Value, full: &serde_json::Value) -> Result<(), BenchError> {
    if v["figures_from"] != "kept" || full["figures_from"] != "stored_rows" {
        return Err(BenchError::Check(format!(
            "the overview's figures_from: cold {}, after a restart {} (want \"stored_rows\", \"kept\")",
            full["figures_from"], v["figures_from"]
        )));
    }
    for k in ["overview", "job_wide"] {
        if v[k] != full[k] {
            return Err(BenchError::Check(format!(
                "the kept overview's {k} differs from the full computation's"
            )));
        }
    }
    Ok(())
}

/// The answer covers the whole job.
fn check(view: &str, v: &serde_json::Value) -> Result<(), BenchError> {
    let len = |k: &str| v[k].as_array().map_or(0, Vec::len) as u64;
    let (got, want, what) = match view {
        "overview" => (len("overview"), RANKS, "ranks"),
        "ops" => (len("rows"), OPERATORS, "operator rows"),
        "memory" => (len("peaks"), RANKS, "peaks"),
        _ => (len("nodes"), RANKS / 8, "nodes"),
    };
    if got == want {
        Ok(())
    } else {
        Err(BenchError::Check(format!(
            "{view} answered {got} {what}, want {want}"
        )))
    }
}
