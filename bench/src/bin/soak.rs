//! `rankscope-soak` (`make soak`): simulated agents against one release
//! collector and a private ClickHouse for a long run; prints a sample line
//! per interval and writes `bench/soak.json` and `bench/SOAK.md` (see
//! `rankscope_bench::soak`). Exit code 1 when events were lost.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use rankscope_bench::soak::{self, SoakParams, SoakReport};
use rankscope_bench::stack::{Binaries, CollectorProc};
use rankscope_bench::sys;
use rankscope_testkit::ClickHouse;

#[derive(Debug, Parser)]
#[command(name = "rankscope-soak", about = "rankscope soak test (issue 14)")]
struct Args {
    #[arg(long, default_value_t = 512)]
    agents: u32,
    #[arg(long, default_value_t = 8)]
    ranks_per_agent: u32,
    #[arg(long, default_value_t = 16)]
    jobs: u32,
    /// Step period of every rank, ms.
    #[arg(long, default_value_t = 2_000)]
    step_ms: u64,
    /// Layers of the simulated model (events per rank-step grow with it).
    #[arg(long, default_value_t = 2)]
    layers: u32,
    #[arg(long, default_value_t = 600)]
    duration_s: u64,
    #[arg(long, default_value_t = 30)]
    sample_s: u64,
    #[arg(long, default_value_t = 120)]
    warmup_s: u64,
    /// Directory of the release binaries [default: this binary's directory].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where soak.json and SOAK.md go.
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let a = Args::parse();
    let bin_dir = match a.bin_dir {
        Some(d) => d,
        None => std::env::current_exe()?
            .parent()
            .context("binary directory")?
            .to_path_buf(),
    };
    let bins = Binaries::in_dir(&bin_dir)?;
    let ch = ClickHouse::start().context("starting ClickHouse")?;
    let db = ch.fresh_database("soak")?;
    let dir = tempfile::tempdir()?;
    let collector = CollectorProc::start(&bins, &ch.http_url, &db, dir.path(), &[]).await?;
    let p = SoakParams {
        agents: a.agents,
        ranks_per_agent: a.ranks_per_agent,
        jobs: a.jobs,
        step_ms: a.step_ms,
        layers: a.layers,
        duration_s: a.duration_s,
        sample_s: a.sample_s,
        warmup_s: a.warmup_s,
    };
    let pid = collector.pid;
    let q = |sql: String| -> u64 {
        ch.query(&sql)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let report = soak::run(
        &p,
        &collector.grpc_url,
        || {
            (
                sys::status_mib(pid, "VmRSS").unwrap_or(0.0),
                q(format!(
                    "SELECT count() FROM system.parts WHERE database = '{db}' AND active"
                )),
            )
        },
        || sys::cpu_s_precise(pid).unwrap_or(0.0),
        || {
            Ok(["steps", "spans", "collectives", "kernels"]
                .iter()
                .map(|t| q(format!("SELECT count() FROM {db}.{t}")))
                .sum())
        },
    )
    .await?;
    std::fs::create_dir_all(&a.out_dir)?;
    std::fs::write(
        a.out_dir.join("soak.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    let mut machine = sys::Machine::probe();
    machine.clickhouse_version = ch
        .query("SELECT version()")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let md = markdown(&report, &machine);
    std::fs::write(a.out_dir.join("SOAK.md"), &md)?;
    print!("{md}");
    Ok(if report.events_stored == report.events_sent {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

fn markdown(r: &SoakReport, m: &sys::Machine) -> String {
    let p = &r.params;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Soak: {} agents x {} ranks ({} ranks in {} jobs), {} s\n",
        p.agents, p.ranks_per_agent, r.ranks, p.jobs, p.duration_s
    );
    let _ = writeln!(
        s,
        "Machine: {} cores ({}), {:.1} GiB, Linux {}, ClickHouse {}. One release collector, one \
         ClickHouse, the simulated agents, all on loopback. Each rank ends a step every {} ms \
         with the simulator's model at {} layers. Rerun: `make soak`.\n",
        m.cores, m.cpu_model, m.memory_gib, m.kernel, m.clickhouse_version, p.step_ms, p.layers
    );
    let _ = writeln!(s, "| figure | value |\n|---|---|");
    let lost = r.events_sent.saturating_sub(r.events_stored);
    for (k, v) in [
        ("events acknowledged", r.events_sent.to_string()),
        ("events stored", r.events_stored.to_string()),
        ("lost", lost.to_string()),
        (
            "batches (retried on UNAVAILABLE)",
            format!("{} ({})", r.batches, r.retries),
        ),
        ("events/s", format!("{:.0}", r.events_per_s)),
        (
            "ack latency p50 / p99 / max",
            format!(
                "{:.2} / {:.2} / {:.2} ms",
                r.ack_p50_ms, r.ack_p99_ms, r.ack_max_ms
            ),
        ),
        (
            "collector CPU",
            format!("{:.2} cores", r.collector_cpu_cores),
        ),
        (
            "collector RSS after warm-up (min / max)",
            format!(
                "{:.1} / {:.1} MiB",
                r.collector_rss_after_warmup_min_mib, r.collector_rss_after_warmup_max_mib
            ),
        ),
    ] {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    let _ = writeln!(
        s,
        "\n| t (s) | events acked | ack p50 (ms) | ack p99 (ms) | collector RSS (MiB) | ClickHouse active parts |\n|---|---|---|---|---|---|"
    );
    for x in &r.samples {
        let _ = writeln!(
            s,
            "| {:.0} | {} | {:.2} | {:.2} | {:.1} | {} |",
            x.t_s,
            x.events_acked,
            x.ack_p50_ms,
            x.ack_p99_ms,
            x.collector_rss_mib,
            x.clickhouse_active_parts
        );
    }
    s
}
