//! `rankscope-bench-fleet`: the fleet query (`GET /api/v1/fleet`,
//! `rankscope fleet`) on a synthetic history of 10,000 nodes x 90 days.
//!
//! In: nothing (a private ClickHouse from the testkit; `--days`, `--nodes`
//! to shrink). Out: one line per measurement on stdout (the figure
//! bench/RESULTS.md quotes), progress on stderr.
//!
//! History, generated inside ClickHouse (`INSERT ... SELECT FROM numbers`):
//! 8 GPUs per node; jobs of 64 ranks (8 nodes x 8 GPUs) lasting 3 days, so
//! every GPU runs one job per 3-day period: `nodes x 8 x days / 3` rank
//! placements in `ranks`, each stored twice (first and last `seen_ns`,
//! as the writer's 5 s refreshes leave them before merges). Verdicts: 1 %
//! of placements at random plus 11 sick GPUs (`node % 997 = 0`, GPU 3)
//! flagged in every job, each verdict in three versions (raised, updated,
//! cleared: `FINAL` has to collapse them), with `straggler_evidence` for
//! the sick ones; hang suspects on 0.1 % of placements. `rank_gpu_samples`
//! is empty (the GPU comes from the ranks' `gpu_uuid` label): the NVML
//! sample scan of `--by gpu` on real agents is not part of this figure.
//!
//! Timed: `Store::fleet_facts` (the ClickHouse reads, rows decoded) and
//! `collector::fleet::assemble` (grouping and scoring in Rust) separately,
//! by node and by GPU, the median of `--reps` after one uncounted run.

use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use rankscope_collector::fleet::{assemble, By, FleetPolicy};
use rankscope_collector::store::{Store, StoreConfig};

#[derive(Debug, Parser)]
#[command(name = "rankscope-bench-fleet")]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    nodes: u64,
    #[arg(long, default_value_t = 90)]
    days: u64,
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

const DAY_NS: u64 = 86_400_000_000_000;

fn rss_peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let ch = rankscope_testkit::ClickHouse::start().context("ClickHouse")?;
    let db = ch.fresh_database("fleet_bench").context("database")?;
    let store = Store::connect(&StoreConfig {
        url: ch.http_url.clone(),
        database: db,
        ..StoreConfig::default()
    })?;
    store.migrate().await?;
    let now = rankscope_collector::service::now_ns();
    let t0 = now - a.days * DAY_NS + 3_600_000_000_000;
    let per_period = a.nodes / 8 * 64; // placements per 3-day period
    let placements = per_period * (a.days / 3);
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
    let exec = |sql: String| {
        let store = store.clone();
        async move {
            let started = Instant::now();
            store.client().query(&sql).execute().await?;
            eprintln!(
                "  {:.1} s: {}",
                started.elapsed().as_secs_f64(),
                &sql[..60.min(sql.len())]
            );
            anyhow::Ok(())
        }
    };
    eprintln!(
        "fleet bench: {} nodes x {} days = {placements} placements",
        a.nodes, a.days
    );
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
    let since = now - a.days * DAY_NS;
    for (by, label) in [(By::Node, "node"), (By::Gpu, "gpu")] {
        let (mut fetch, mut group) = (Vec::new(), Vec::new());
        let mut answer = (0, 0, 0.0);
        for rep in 0..=a.reps {
            let started = Instant::now();
            let facts = store.fleet_facts_by(since, by).await?;
            let fetched = started.elapsed().as_secs_f64() * 1e3;
            let started = Instant::now();
            let rows = assemble(&facts, by, FleetPolicy::default());
            let grouped = started.elapsed().as_secs_f64() * 1e3;
            answer = (facts.placements.len(), facts.verdicts.len(), rows[0].score);
            if rep > 0 {
                fetch.push(fetched);
                group.push(grouped);
            }
        }
        println!(
            "fleet --by {label}: {} nodes x {} days, {} placements, {} verdicts: ClickHouse reads {:.0} ms + assemble {:.0} ms (median of {}), top score {:.1}, peak RSS {:.0} MiB",
            a.nodes,
            a.days,
            answer.0,
            answer.1,
            median(fetch),
            median(group),
            a.reps,
            answer.2,
            rss_peak_mib()
        );
    }
    Ok(())
}
