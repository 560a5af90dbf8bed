//! The fleet view at fleet scale (issue 38, goal 7): `GET /api/v1/fleet` by
//! node and by GPU over a synthetic history of [`NODES`] nodes x [`DAYS`]
//! days, through a collector's HTTP API.
//!
//! In: a ClickHouse server and a collector on a fresh database (its
//! migrations create the schema, the rollup of migration 0014 included).
//! Out: a [`FleetRun`]: cold (first request after the load) and warm
//! round trips per grouping, and what the answers hold.
//!
//! History, generated inside ClickHouse (`INSERT ... SELECT FROM numbers`;
//! the `ranks` INSERTs go through the rollup's materialized view as the
//! writer's do): 8 GPUs per node; jobs of 64 ranks (8 nodes x 8 GPUs)
//! lasting 3 days, so every GPU runs one job per 3-day period: `nodes x 8 x
//! days / 3` rank placements in `ranks`, each stored twice (first and last
//! `seen_ns`). Verdicts: 1 % of placements at random plus 11 sick GPUs
//! (`node % 997 = 0`, GPU 3) flagged in every job, each verdict in three
//! versions (raised, updated, cleared: `FINAL` collapses them), with
//! `straggler_evidence` for the sick ones; hang suspects on 0.1 % of
//! placements. `rank_gpu_samples` is empty (GPUs come from the ranks'
//! `gpu_uuid` label).

use std::time::Instant;

use rankscope_collector::store::Store;

use crate::e2e::Ctx;
use crate::stack::CollectorProc;
use crate::BenchError;

/// Nodes of the generated fleet.
pub const NODES: u64 = 10_000;
/// Days of history.
pub const DAYS: u64 = 90;
const DAY_NS: u64 = 86_400_000_000_000;

/// Timings of the fleet route.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FleetRun {
    pub nodes: u64,
    pub days: u64,
    pub placements: u64,
    pub verdicts: usize,
    pub load_s: f64,
    /// `by=node`: first request after the load, then the warm ones.
    pub node_cold_ms: f64,
    pub node_ms: Vec<f64>,
    pub node_rows: usize,
    pub node_response_bytes: usize,
    /// `by=gpu`.
    pub gpu_cold_ms: f64,
    pub gpu_ms: Vec<f64>,
    pub gpu_rows: usize,
    /// Score of the top row by GPU (a sick GPU's).
    pub gpu_top_score: f64,
}

/// Writes the history of `nodes` x `days` ending at `now_ns`; returns the
/// rank placements written.
pub async fn load(store: &Store, nodes: u64, days: u64, now_ns: u64) -> Result<u64, BenchError> {
    let t0 = now_ns - days * DAY_NS + 3_600_000_000_000;
    let per_period = nodes / 8 * 64; // placements per 3-day period
    let placements = per_period * (days / 3);
    let period_ns = 3 * DAY_NS;
    // Columns of one placement n (period, node, GPU, job, rank), as SQL.
    let cols = format!(
        "intDiv(number, {per_period}) AS period, intDiv(number % {per_period}, 8) AS nd, \
         (number % {per_period}) % 8 AS g, \
         concat('job-', toString(period), '-', toString(intDiv(nd, 8))) AS job, \
         toUInt32((nd % 8) * 8 + g) AS r, concat('node-', toString(nd)) AS node_name, \
         concat('GPU-', toString(nd), '-', toString(g)) AS uuid, \
         {t0} + period * {period_ns} AS start_ns, \
         (cityHash64(number) % 100 = 0) OR (nd % 997 = 0 AND g = 3) AS flagged, \
         nd % 997 = 0 AND g = 3 AS sick, cityHash64(number) % 1000 = 7 AS hung"
    );
    let exec = |sql: String| async move {
        store
            .client()
            .query(&sql)
            .execute()
            .await
            .map_err(|e| BenchError::ClickHouse(format!("fleet history: {e}")))
    };
    for (version, at) in [
        (0u64, "start_ns + 60000000000"),
        (1, "start_ns + 259000000000000"),
    ] {
        exec(format!(
            "INSERT INTO ranks (job_id, run_id, rank, world_size, local_rank, node, pid, \
             label_keys, label_values, seen_ns) SELECT job, '', r, 64, g, node_name, \
             toUInt32(1000 + r), ['gpu_uuid'], [uuid], toUInt64({at} + {version}) \
             FROM (SELECT {cols} FROM system.numbers LIMIT {placements})"
        ))
        .await?;
    }
    // Three versions per verdict: raised (active), updated, cleared.
    for (v, active, steps) in [(0u64, 1, 3u64), (1, 1, 40), (2, 0, 80)] {
        exec(format!(
            "INSERT INTO straggler_verdicts (job_id, rank, node, first_step, last_step, \
             steps_flagged, slowdown, score, cause, active, first_seen_ns, updated_ns) \
             SELECT job, r, node_name, toUInt64(1000), toUInt64(1000 + {steps}), \
             toUInt64({steps}), if(sick, 1.3, 1.15), 5.0, 'compute', toUInt8({active}), \
             toUInt64(start_ns + 3600000000000), toUInt64(start_ns + 3600000000000 + {v} * 600000000000) \
             FROM (SELECT {cols} FROM system.numbers LIMIT {placements}) WHERE flagged"
        ))
        .await?;
    }
    exec(format!(
        "INSERT INTO straggler_evidence (job_id, rank, first_step, node, evidence, gpu_indexes, \
         gpu_uuids, sm_clock_mhz, peer_sm_clock_mhz, throttle_reasons, temp_c, peer_temp_c, \
         power_w, peer_power_w, samples, peer_gpus, first_seen_ns, updated_ns) \
         SELECT job, r, toUInt64(1000), node_name, 'SM clock 1200 MHz vs peers 1980 MHz', \
         [toUInt32(g)], [uuid], 1200.0, 1980.0, ['hw_slowdown'], 88.0, 70.0, 280.0, 300.0, \
         toUInt32(16), toUInt32(63), toUInt64(start_ns + 3600000000000), \
         toUInt64(start_ns + 3600000000000) \
         FROM (SELECT {cols} FROM system.numbers LIMIT {placements}) WHERE sick"
    ))
    .await?;
    exec(format!(
        "INSERT INTO hang_suspects (job_id, rank, node, last_step, job_step, silent_ns, detected_ns) \
         SELECT job, r, node_name, toInt64(500), toUInt64(520), toUInt64(300000000000), \
         toUInt64(start_ns + 7200000000000) \
         FROM (SELECT {cols} FROM system.numbers LIMIT {placements}) WHERE hung"
    ))
    .await?;
    Ok(placements)
}

/// Loads the history, starts a collector and times `reps` warm requests per
/// grouping after a cold one.
pub async fn run(ctx: &Ctx, nodes: u64, days: u64, reps: usize) -> Result<FleetRun, BenchError> {
    let db = "bench_fleet";
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let collector = CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    let store = Store::connect(&rankscope_collector::store::StoreConfig {
        url: ctx.ch.http_url.clone(),
        database: db.to_owned(),
        ..rankscope_collector::store::StoreConfig::default()
    })
    .map_err(|e| BenchError::ClickHouse(e.to_string()))?;
    let started = Instant::now();
    let placements = load(&store, nodes, days, rankscope_collector::service::now_ns()).await?;
    let mut out = FleetRun {
        nodes,
        days,
        placements,
        load_s: started.elapsed().as_secs_f64(),
        ..FleetRun::default()
    };
    let url = |by: &str| format!("{}/api/v1/fleet?since={days}d&by={by}", collector.http_url);
    for by in ["node", "gpu"] {
        let url = url(by);
        for i in 0..=reps {
            let r = ctx.http.get_ok(&url).await?;
            let ms = r.elapsed.as_secs_f64() * 1e3;
            if i == 0 {
                let v = r.json()?;
                let rows = v["rows"].as_array().cloned().unwrap_or_default();
                let want = if by == "node" { nodes } else { nodes * 8 } as usize;
                if rows.len() != want {
                    return Err(BenchError::Check(format!(
                        "fleet by {by} answered {} rows, want {want}",
                        rows.len()
                    )));
                }
                let verdicts: u64 = rows.iter().filter_map(|r| r["verdicts"].as_u64()).sum();
                out.verdicts = verdicts as usize;
                if by == "node" {
                    out.node_cold_ms = ms;
                    out.node_rows = rows.len();
                    out.node_response_bytes = r.body.len();
                } else {
                    out.gpu_cold_ms = ms;
                    out.gpu_rows = rows.len();
                    out.gpu_top_score = rows[0]["score"].as_f64().unwrap_or(0.0);
                }
            } else if by == "node" {
                out.node_ms.push(ms);
            } else {
                out.gpu_ms.push(ms);
            }
        }
    }
    drop(collector);
    crate::e2e::drop_after(&ctx.ch, db);
    Ok(out)
}
