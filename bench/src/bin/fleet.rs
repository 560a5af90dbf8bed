//! `rankscope-bench-fleet`: the fleet query (`GET /api/v1/fleet`,
//! `rankscope fleet`) on a synthetic history of 10,000 nodes x 90 days.
//!
//! In: nothing (a private ClickHouse from the testkit; `--days`, `--nodes`
//! to shrink). Out: one line per measurement on stdout (the figure
//! bench/RESULTS.md quotes), progress on stderr.
//!
//! History: `rankscope_bench::fleet::load` (also the `fleet` section of
//! `rankscope-bench`, which times the HTTP route): 8 GPUs per node; jobs of 64 ranks (8 nodes x 8 GPUs) lasting 3 days, so
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
//! Timed: `Store::fleet_facts_by` (the ClickHouse reads, rows decoded) and
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
    let started = Instant::now();
    let placements = rankscope_bench::fleet::load(&store, a.nodes, a.days, now).await?;
    eprintln!(
        "fleet bench: {} nodes x {} days = {placements} placements, loaded in {:.1} s",
        a.nodes,
        a.days,
        started.elapsed().as_secs_f64()
    );
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
