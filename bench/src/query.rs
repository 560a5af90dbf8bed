//! Query latency of the collector's HTTP API over stored analytics results.
//!
//! In: a ClickHouse server and a collector on a fresh database (its
//! migrations create the schema). Out: a [`QueryRun`] with the round-trip
//! times of `GET /api/v1/jobs/{job}/breakdown?step=N` for a 4,096-rank job
//! and `GET /api/v1/jobs/{job}/stragglers` for a 16,384-rank job.
//!
//! Data, generated and written with the collector's own row types and store
//! client (RowBinary, as its writer does), one INSERT per step and table as
//! the live writer produces them when it stores a finalized step:
//! * `step_breakdown`: 4,096 ranks x [`STEPS`] steps (job A) and 16,384
//!   ranks x [`STEPS`] steps (job B), 2.05 M rows in all;
//! * `straggler_verdicts`: every version the live analytics would write: 1%
//!   of the ranks are stragglers from step 3 on (activated at step 5, then
//!   updated at every step: 95 versions each) and another 6% have one short
//!   episode (activated, then cleared 5 steps later: 2 versions each);
//! * `straggler_gains`: each version's what-if gain as the stream stores it
//!   with the version (migration 0017; `rankscope_analysis::expected_gain_pct`
//!   over the verdict's steps, computed here from the generated rows).
//!
//! * `collectives`: job B's collectives as its ranks store them, 16,384
//!   ranks x [`STEPS`] steps x [`COLLECTIVES_PER_STEP`] (the simulator's
//!   `--layers 1` step: an all-gather and a reduce-scatter of one layer,
//!   then the loss all-reduce; 4.9 M rows), arrival jitter and the
//!   stragglers' late arrivals included, so the cross-rank matching has
//!   waits to find. `GET /api/v1/jobs/{job}/collectives` is job-wide: it
//!   aggregates every row per call in ClickHouse, which also computes each
//!   statistics group's percentiles, and reads per-call sums
//!   ([`COLLECTIVES_REPS`] warm requests).
//!
//! The stragglers route reads `straggler_verdicts FINAL` and
//! `straggler_gains FINAL` of the job (no breakdowns: every version's gain
//! is stored), so its cost follows the number of verdict versions; the breakdown route reads
//! one step's rows of `step_breakdown FINAL`. The first request per route
//! (cold: the first read after the load) is recorded apart; it and one more
//! are not counted among the warm ones.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};

use rankscope_analysis::{
    expected_gain_pct_for, peers_of_step, RankStepWait, StepPeers, StragglerCause,
};
use rankscope_collector::store::{BreakdownRow, GainRow, Store, StoreConfig, VerdictRow};

use crate::e2e::Ctx;
use crate::stack::CollectorProc;
use crate::BenchError;

/// Steps per generated job.
pub const STEPS: u64 = 100;
/// Ranks of the breakdown job.
pub const BREAKDOWN_RANKS: u32 = 4_096;
/// Ranks of the stragglers job.
pub const STRAGGLER_RANKS: u32 = 16_384;
/// The step whose breakdown is queried.
pub const QUERIED_STEP: u64 = 50;
/// Collectives per rank and step of job B.
pub const COLLECTIVES_PER_STEP: u64 = 3;
/// The rank of the per-rank collectives request.
pub const COLLECTIVES_RANK: u32 = 777;
/// Warm requests of the collectives route (each reads the whole job).
pub const COLLECTIVES_REPS: usize = 3;

/// Timings of both routes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueryRun {
    /// Warm: after two uncounted requests.
    pub breakdown_ms: Vec<f64>,
    /// `breakdown?step=50` of the 16,384-rank job.
    #[serde(default)]
    pub breakdown_16k_ms: Vec<f64>,
    pub stragglers_ms: Vec<f64>,
    /// Cold: the first request of each route after the load (fresh
    /// collector, nothing read yet).
    pub breakdown_cold_ms: f64,
    #[serde(default)]
    pub breakdown_16k_cold_ms: f64,
    pub stragglers_cold_ms: f64,
    /// Rows the breakdown answer holds (= ranks).
    pub breakdown_rows: usize,
    #[serde(default)]
    pub breakdown_16k_rows: usize,
    #[serde(default)]
    pub breakdown_16k_response_bytes: usize,
    /// Verdicts the stragglers answer holds.
    pub verdicts: usize,
    /// Verdict versions stored for the stragglers job.
    pub verdict_versions: u64,
    pub breakdown_response_bytes: usize,
    /// The same SQL as the routes, sent straight to ClickHouse over HTTP.
    pub sql_breakdown_ms: Vec<f64>,
    #[serde(default)]
    pub sql_breakdown_16k_ms: Vec<f64>,
    pub sql_stragglers_ms: Vec<f64>,
    /// `GET .../collectives` of the 16,384-rank job (job-wide), warm.
    #[serde(default)]
    pub collectives_16k_ms: Vec<f64>,
    #[serde(default)]
    pub collectives_16k_cold_ms: f64,
    /// `GET .../collectives?rank=777` of that job (one rank's statistics,
    /// matched against every rank), warm and cold.
    #[serde(default)]
    pub collectives_rank_16k_ms: Vec<f64>,
    #[serde(default)]
    pub collectives_rank_16k_cold_ms: f64,
    /// Calls the rank's answer counts.
    #[serde(default)]
    pub collectives_rank_calls: u64,
    /// Collective rows of that job.
    #[serde(default)]
    pub collective_rows: u64,
    /// The route's SQL alone (`job_collective_groups.sql`, fetched as
    /// RowBinary, not decoded).
    #[serde(default)]
    pub sql_collectives_16k_ms: Vec<f64>,
    pub loaded_rows: u64,
    pub load_s: f64,
}

/// What one generated job wrote.
struct Loaded {
    rows: u64,
    verdicts: usize,
    versions: u64,
    /// (rank, first step, last flagged step) of every straggler episode.
    stragglers: Vec<(u32, u64, u64)>,
}

/// Loads the data, starts a collector and times `reps` requests per route.
pub async fn run(ctx: &Ctx, reps: usize) -> Result<QueryRun, BenchError> {
    let db = "bench_query";
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let mut collector =
        CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    let store = Store::connect(&StoreConfig {
        url: ctx.ch.http_url.clone(),
        database: db.to_owned(),
        ..StoreConfig::default()
    })
    .map_err(|e| BenchError::ClickHouse(e.to_string()))?;
    let started = std::time::Instant::now();
    let job_a = "bench-query-4096";
    let job_b = "bench-query-16384";
    let a = load_job(&store, job_a, BREAKDOWN_RANKS, 1).await?;
    let b = load_job(&store, job_b, STRAGGLER_RANKS, 2).await?;
    let collective_rows =
        load_collectives(&store, job_b, STRAGGLER_RANKS, &b.stragglers, 3).await?;
    let load_s = started.elapsed().as_secs_f64();

    let breakdown_url = format!(
        "{}/api/v1/jobs/{job_a}/breakdown?step={QUERIED_STEP}",
        collector.http_url
    );
    let breakdown_16k_url = format!(
        "{}/api/v1/jobs/{job_b}/breakdown?step={QUERIED_STEP}",
        collector.http_url
    );
    let stragglers_url = format!("{}/api/v1/jobs/{job_b}/stragglers", collector.http_url);
    let mut out = QueryRun {
        loaded_rows: a.rows + b.rows + collective_rows,
        collective_rows,
        load_s,
        verdict_versions: b.versions,
        ..QueryRun::default()
    };
    for i in 0..reps + 2 {
        let r = ctx.http.get_ok(&breakdown_url).await?;
        let r16 = ctx.http.get_ok(&breakdown_16k_url).await?;
        let s = ctx.http.get_ok(&stragglers_url).await?;
        if i == 0 {
            out.breakdown_cold_ms = r.elapsed.as_secs_f64() * 1e3;
            out.breakdown_16k_cold_ms = r16.elapsed.as_secs_f64() * 1e3;
            out.stragglers_cold_ms = s.elapsed.as_secs_f64() * 1e3;
            out.breakdown_rows = r.json()?["breakdown"].as_array().map_or(0, Vec::len);
            out.breakdown_response_bytes = r.body.len();
            out.breakdown_16k_rows = r16.json()?["breakdown"].as_array().map_or(0, Vec::len);
            out.breakdown_16k_response_bytes = r16.body.len();
            out.verdicts = s.json()?["stragglers"].as_array().map_or(0, Vec::len);
            if out.breakdown_rows != BREAKDOWN_RANKS as usize
                || out.breakdown_16k_rows != STRAGGLER_RANKS as usize
                || out.verdicts != b.verdicts
            {
                return Err(BenchError::Check(format!(
                    "breakdown answered {} and {} rows (want {BREAKDOWN_RANKS} and {STRAGGLER_RANKS}), stragglers {} verdicts (want {})",
                    out.breakdown_rows, out.breakdown_16k_rows, out.verdicts, b.verdicts
                )));
            }
        }
        if i >= 2 {
            out.breakdown_ms.push(r.elapsed.as_secs_f64() * 1e3);
            out.breakdown_16k_ms.push(r16.elapsed.as_secs_f64() * 1e3);
            out.stragglers_ms.push(s.elapsed.as_secs_f64() * 1e3);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let collectives_url = format!("{}/api/v1/jobs/{job_b}/collectives", collector.http_url);
    for i in 0..=COLLECTIVES_REPS {
        let r = ctx.http.get_ok(&collectives_url).await?;
        let ms = r.elapsed.as_secs_f64() * 1e3;
        if i == 0 {
            out.collectives_16k_cold_ms = ms;
            let v = r.json()?;
            let rows = v["collectives"].as_array().cloned().unwrap_or_default();
            let calls: u64 = rows.iter().filter_map(|c| c["calls"].as_u64()).sum();
            if rows.len() != COLLECTIVES_PER_STEP as usize || calls != collective_rows {
                return Err(BenchError::Check(format!(
                    "collectives answered {} rows of {calls} calls (want {COLLECTIVES_PER_STEP} of {collective_rows})",
                    rows.len()
                )));
            }
        } else {
            out.collectives_16k_ms.push(ms);
        }
    }
    let rank_url = format!(
        "{}/api/v1/jobs/{job_b}/collectives?rank={COLLECTIVES_RANK}",
        collector.http_url
    );
    for i in 0..=COLLECTIVES_REPS {
        let r = ctx.http.get_ok(&rank_url).await?;
        let ms = r.elapsed.as_secs_f64() * 1e3;
        if i == 0 {
            out.collectives_rank_16k_cold_ms = ms;
            let v = r.json()?;
            let rows = v["collectives"].as_array().cloned().unwrap_or_default();
            out.collectives_rank_calls = rows.iter().filter_map(|c| c["calls"].as_u64()).sum();
            let want = STEPS * COLLECTIVES_PER_STEP;
            if rows.iter().any(|c| c["rank"] != COLLECTIVES_RANK)
                || out.collectives_rank_calls != want
            {
                return Err(BenchError::Check(format!(
                    "collectives?rank={COLLECTIVES_RANK} answered {} calls (want {want}): {rows:?}",
                    out.collectives_rank_calls
                )));
            }
        } else {
            out.collectives_rank_16k_ms.push(ms);
        }
    }
    collector.stop();
    let collectives_sql = format!(
        "{} FORMAT RowBinary",
        bind(JOB_COLLECTIVE_GROUPS_SQL, &[&quote(job_b)])
    );
    for _ in 0..COLLECTIVES_REPS {
        let t = std::time::Instant::now();
        ctx.ch.query_in(db, &collectives_sql)?;
        out.sql_collectives_16k_ms
            .push(t.elapsed().as_secs_f64() * 1e3);
    }
    let breakdown_sql = bind(
        BREAKDOWN_SQL,
        &[
            &quote(job_a),
            &QUERIED_STEP.to_string(),
            &QUERIED_STEP.to_string(),
        ],
    );
    let breakdown_16k_sql = bind(
        BREAKDOWN_SQL,
        &[
            &quote(job_b),
            &QUERIED_STEP.to_string(),
            &QUERIED_STEP.to_string(),
        ],
    );
    let stragglers_sql = bind(STRAGGLERS_SQL, &[&quote(job_b)]);
    for i in 0..reps + 2 {
        let t = std::time::Instant::now();
        ctx.ch.query_in(db, &breakdown_sql)?;
        let b = t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        ctx.ch.query_in(db, &breakdown_16k_sql)?;
        let b16 = t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        ctx.ch.query_in(db, &stragglers_sql)?;
        let s = t.elapsed().as_secs_f64() * 1e3;
        if i >= 2 {
            out.sql_breakdown_ms.push(b);
            out.sql_breakdown_16k_ms.push(b16);
            out.sql_stragglers_ms.push(s);
        }
    }
    crate::e2e::drop_after(&ctx.ch, db);
    Ok(out)
}

/// The collector's own query files.
const BREAKDOWN_SQL: &str = include_str!("../../collector/queries/breakdown.sql");
const STRAGGLERS_SQL: &str = include_str!("../../collector/queries/stragglers.sql");
const JOB_COLLECTIVE_GROUPS_SQL: &str =
    include_str!("../../collector/queries/job_collective_groups.sql");

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Drops `--` comment lines and replaces each `?` with the next value.
fn bind(sql: &str, values: &[&str]) -> String {
    let body: Vec<&str> = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    let mut out = String::new();
    let mut next = values.iter();
    for c in body.join("\n").chars() {
        match (c, c == '?') {
            (_, true) => out.push_str(next.next().copied().unwrap_or("?")),
            (c, false) => out.push(c),
        }
    }
    out
}

/// Generates and inserts one job; returns rows written and the number of
/// distinct verdicts.
async fn load_job(store: &Store, job: &str, ranks: u32, seed: u64) -> Result<Loaded, BenchError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let t0 = now_ns().saturating_sub(STEPS * 2_000_000_000);
    // Stragglers: (rank, first_step, last_flagged_step, cleared).
    let mut episodes: Vec<(u32, u64, u64, bool)> = Vec::new();
    let persistent = (ranks / 100).max(1);
    for i in 0..persistent {
        episodes.push((i * 97 % ranks, 3, STEPS - 1, false));
    }
    let short = ranks * 6 / 100;
    for i in 0..short {
        let rank = (persistent + i) * 89 % ranks;
        // From step 4: (rank, first_step) never equals a persistent one.
        let s = rng.random_range(4..STEPS - 10);
        episodes.push((rank, s, s + 2, true));
    }
    let mut rows = 0;
    let mut versions = 0;
    // What the versions' gains need: every step's peers, the verdict ranks' rows.
    let straggler_ranks: std::collections::HashSet<u32> = episodes.iter().map(|e| e.0).collect();
    let mut peers: BTreeMap<u64, StepPeers> = BTreeMap::new();
    let mut own: HashMap<u32, Vec<RankStepWait>> = HashMap::new();
    for step in 0..STEPS {
        let step_start_ns = t0 + step * 2_000_000_000;
        let mut ins = store
            .client()
            .insert::<BreakdownRow>("step_breakdown")
            .await?;
        let mut waits = Vec::with_capacity(ranks as usize);
        for rank in 0..ranks {
            let j = rng.random_range(0..50_000_000u64);
            let compute = 900_000_000 + j;
            // What the what-if gain reads of the row (step_peers.sql).
            let wait = RankStepWait {
                step,
                rank,
                step_time_ns: 1_500_000_000 + j,
                work_ns: compute + 5_000_000,
                wait_ns: (100_000_000 + j / 2).min(400_000_000),
            };
            waits.push(wait);
            if straggler_ranks.contains(&rank) {
                own.entry(rank).or_default().push(wait);
            }
            ins.write(&BreakdownRow {
                job_id: job.to_owned(),
                run_id: String::new(),
                step,
                rank,
                node: format!("node-{}", rank / 8),
                step_start_ns,
                step_time_ns: 1_500_000_000 + j,
                gpu_span_ns: 1_450_000_000 + j,
                gpu_busy_ns: 1_300_000_000 + j,
                idle_ns: 150_000_000,
                compute_ns: compute,
                comm_ns: 400_000_000,
                memory_ns: 10_000_000,
                overlap_ns: 250_000_000,
                exposed_comm_ns: 150_000_000,
                non_compute_ns: 400_000_000,
                dataloader_ns: 5_000_000,
                comm_wait_ns: 100_000_000 + j / 2,
                comm_transfer_ns: 300_000_000,
                gpu_events: 3_400,
                computed_ns: step_start_ns + 1_600_000_000,
            })
            .await?;
        }
        ins.end().await?;
        rows += u64::from(ranks);
        if let Some(p) = peers_of_step(step, &waits) {
            peers.insert(step, p);
        }

        // Versions the tracker writes when this step is finalized.
        let computed_ns = step_start_ns + 1_600_000_000;
        let mut ins = store
            .client()
            .insert::<VerdictRow>("straggler_verdicts")
            .await?;
        let mut gains = Vec::new();
        let mut n = 0;
        for &(rank, first, last, cleared) in &episodes {
            let activated = first + 2;
            let write = if cleared {
                step == activated || step == last + 5
            } else {
                step >= activated && step <= last
            };
            if !write {
                continue;
            }
            let active = !(cleared && step == last + 5);
            let last_step = step.min(last);
            let first_seen_ns = t0 + activated * 2_000_000_000 + 1_600_000_000;
            ins.write(&VerdictRow {
                job_id: job.to_owned(),
                rank,
                node: format!("node-{}", rank / 8),
                first_step: first,
                last_step,
                steps_flagged: last_step - first + 1,
                slowdown: 1.3,
                score: 12.5,
                cause: "compute".into(),
                active: u8::from(active),
                first_seen_ns,
                updated_ns: computed_ns,
            })
            .await?;
            n += 1;
            // Its gain, as the stream stores it with the version (every
            // step of the verdict held in memory: the definition's value).
            let steps = own.get(&rank).into_iter().flatten();
            gains.push(GainRow {
                job_id: job.to_owned(),
                rank,
                first_step: first,
                last_step,
                expected_gain_pct: expected_gain_pct_for(
                    &peers,
                    steps.filter(|r| (first..=last_step).contains(&r.step)),
                    rank,
                    StragglerCause::Compute,
                ),
                first_seen_ns,
                updated_ns: computed_ns,
            });
        }
        ins.end().await?;
        rows += n;
        versions += n;
        let mut ins = store.client().insert::<GainRow>("straggler_gains").await?;
        for g in &gains {
            ins.write(g).await?;
        }
        ins.end().await?;
        rows += gains.len() as u64;
    }
    Ok(Loaded {
        rows,
        verdicts: episodes.len(),
        versions,
        stragglers: episodes.iter().map(|e| (e.0, e.1, e.2)).collect(),
    })
}

/// Inserts job `job`'s collectives (module doc), one INSERT per step as the
/// writer stores a step; returns the rows written.
async fn load_collectives(
    store: &Store,
    job: &str,
    ranks: u32,
    stragglers: &[(u32, u64, u64)],
    seed: u64,
) -> Result<u64, BenchError> {
    use rankscope_collector::store::CollectiveRow;
    let mut rng = SmallRng::seed_from_u64(seed);
    let t0 = now_ns().saturating_sub(STEPS * 2_000_000_000);
    let job: rankscope_collector::store::Text = job.into();
    let pg: rankscope_collector::store::Text = "0".into();
    let agent: rankscope_collector::store::Text = "bench-query".into();
    let nodes: Vec<rankscope_collector::store::Text> = (0..ranks.div_ceil(8))
        .map(|n| format!("node-{n}").into())
        .collect();
    let layer_bytes = 12 * 4096 * 4096 * 2u64;
    use rankscope_proto::v1::{CollectiveOp, DataType};
    let (bf16, fp32) = (DataType::Bfloat16 as i8, DataType::Float32 as i8);
    // (op, dtype, bytes, offset into the step, transfer ns)
    let calls: [(i8, i8, u64, u64, u64); COLLECTIVES_PER_STEP as usize] = [
        (
            CollectiveOp::AllGather as i8,
            bf16,
            layer_bytes,
            10_000_000,
            40_000_000,
        ),
        (
            CollectiveOp::ReduceScatter as i8,
            bf16,
            layer_bytes,
            900_000_000,
            40_000_000,
        ),
        (
            CollectiveOp::AllReduce as i8,
            fp32,
            4,
            1_400_000_000,
            30_000,
        ),
    ];
    let mut rows = 0;
    for step in 0..STEPS {
        let step_start_ns = t0 + step * 2_000_000_000;
        let late: Vec<u32> = stragglers
            .iter()
            .filter(|&&(_, first, last)| (first..=last).contains(&step))
            .map(|s| s.0)
            .collect();
        let mut ins = store
            .client()
            .insert::<CollectiveRow>("collectives")
            .await?;
        for (c, &(op, dtype, bytes, offset, transfer)) in calls.iter().enumerate() {
            let seq = step * COLLECTIVES_PER_STEP + c as u64 + 1;
            let arrivals: Vec<u64> = (0..ranks)
                .map(|r| {
                    let lag = if late.contains(&r) { 150_000_000 } else { 0 };
                    step_start_ns + offset + rng.random_range(0..2_000_000u64) + lag
                })
                .collect();
            let end_ns = arrivals.iter().copied().max().unwrap_or(0) + transfer;
            for (rank, &start_ns) in (0..ranks).zip(&arrivals) {
                ins.write(&CollectiveRow {
                    job_id: job.clone(),
                    run_id: "".into(),
                    rank,
                    node: nodes[(rank / 8) as usize].clone(),
                    op,
                    process_group: pg.clone(),
                    group_ranks: Vec::new(),
                    group_size: ranks,
                    dtype,
                    count: bytes / if dtype == fp32 { 4 } else { 2 },
                    bytes,
                    seq,
                    peer: 0,
                    stream: 20,
                    device: (rank % 8) as i32,
                    start_ns,
                    end_ns: end_ns + rng.random_range(0..10_000u64),
                    agent_id: agent.clone(),
                    agent_session: 1,
                    batch_seq: step + 1,
                })
                .await?;
            }
            rows += u64::from(ranks);
        }
        ins.end().await?;
    }
    Ok(rows)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_fills_placeholders_in_order_and_drops_comments() {
        let sql = "-- a comment with ? in it\nSELECT x FROM t WHERE a = ? AND b >= ?";
        assert_eq!(
            bind(sql, &[&quote("j'1"), "5"]),
            "SELECT x FROM t WHERE a = 'j\\'1' AND b >= 5"
        );
        assert!(BREAKDOWN_SQL.contains("step_breakdown"));
        assert!(STRAGGLERS_SQL.contains("straggler_verdicts"));
    }
}
