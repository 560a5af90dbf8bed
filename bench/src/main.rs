//! `rankscope-bench`: runs the benchmark suite of issue 6 and writes
//! `bench/results.json` and `bench/RESULTS.md` (see the library docs).
//!
//! In: command-line sizes and repetitions (defaults are what `make bench`
//! runs, about 10 minutes on 2 cores). Out: the human table on stdout,
//! progress on stderr, the two files; exit code 1 when a section failed (the
//! files are still written, with `null` for what could not be measured).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser;
use rankscope_bench::e2e::{self, Ctx, E2eParams};
use rankscope_bench::http::HttpClient;
use rankscope_bench::report::{self, Details, TUNED_FLUSH_MS};
use rankscope_bench::stack::{AgentProc, Binaries, CollectorProc, Override};
use rankscope_bench::sys::Machine;
use rankscope_bench::{
    bulk, fleet, hta, idle, import, profile, query, stats, straggler, synth, views,
};
use rankscope_testkit::ClickHouse;

#[derive(Debug, Parser)]
#[command(
    name = "rankscope-bench",
    about = "rankscope benchmark suite (issue 6)"
)]
struct Args {
    /// Where results.json and RESULTS.md are written [default: <repo>/bench].
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Directory of the release binaries [default: this binary's directory].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Repository root (NVML stand-in source) [default: where this was built].
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Kineto trace sets [default: $RANKSCOPE_TRACES or the vendored
    /// <repo>/cli/tests/fixtures/kineto].
    #[arg(long, env = "RANKSCOPE_TRACES")]
    traces: Option<PathBuf>,
    /// Small sizes and few repetitions (a smoke test, not for the record).
    #[arg(long)]
    quick: bool,
    /// End-to-end runs.
    #[arg(long, default_value_t = 3)]
    e2e_runs: usize,
    /// Simulated ranks of the end-to-end job (one agent, one node).
    #[arg(long, default_value_t = 8)]
    ranks: u32,
    /// Steps of the end-to-end job.
    #[arg(long, default_value_t = 1_000)]
    steps: u64,
    /// Layers of the end-to-end job (336 events per rank-step at 12).
    #[arg(long, default_value_t = 12)]
    layers: u32,
    /// Straggler-latency trials per collector configuration.
    #[arg(long, default_value_t = 20)]
    straggler_trials: usize,
    /// Straggler-latency trials at 16,384 ranks (collector path, default
    /// configuration).
    #[arg(long, default_value_t = 10)]
    straggler_16k_trials: usize,
    /// Requests per query route.
    #[arg(long, default_value_t = 15)]
    query_reps: usize,
    /// Import runs (every trace set plus the synthetic trace each).
    #[arg(long, default_value_t = 3)]
    import_runs: usize,
    /// Side-by-side runs against HTA 0.5.0 (each: HTA, then ours).
    #[arg(long, default_value_t = 1)]
    hta_runs: usize,
    /// JSON MB of the 32-rank x 40-step side-by-side job (issue 15: 310).
    #[arg(long, default_value_t = 310)]
    hta_mb: u64,
    /// Size of the synthetic trace, MB (>= 500 for the record).
    #[arg(long, default_value_t = 500)]
    synthetic_mb: u64,
    /// Agent option for the end-to-end runs, KEY=TOML_VALUE (repeatable;
    /// for experiments: the record uses the defaults).
    #[arg(long, value_name = "KEY=VALUE")]
    agent_set: Vec<String>,
    /// Collector option for the end-to-end runs, KEY=TOML_VALUE
    /// (repeatable; dotted keys such as writer.batch_max_rows).
    #[arg(long, value_name = "KEY=VALUE")]
    collector_set: Vec<String>,
    /// Skip the perf profile of an extra end-to-end run.
    #[arg(long)]
    no_profile: bool,
    /// Nodes of the fleet history (section fleet).
    #[arg(long, default_value_t = fleet::NODES)]
    fleet_nodes: u64,
    /// Days of the fleet history (section fleet).
    #[arg(long, default_value_t = fleet::DAYS)]
    fleet_days: u64,
    /// Sections to run (comma-separated): e2e, straggler, query, fleet,
    /// views, import, hta, idle. With fewer than all, pass --out-dir to keep the
    /// record's files.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "e2e,straggler,query,fleet,views,import,hta,idle"
    )]
    sections: Vec<String>,
}

impl Args {
    fn shrink(&mut self) {
        if self.quick {
            self.e2e_runs = 1;
            self.steps = 60;
            self.straggler_trials = 3;
            self.straggler_16k_trials = 1;
            self.query_reps = 3;
            self.fleet_nodes = 400;
            self.fleet_days = 9;
            self.import_runs = 1;
            self.synthetic_mb = 20;
            self.hta_mb = 20;
            self.no_profile = true;
        }
    }

    fn wants(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    args.shrink();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn note(msg: &str) {
    eprintln!("[bench] {msg}");
}

async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let repo = args
        .repo
        .clone()
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")));
    let repo = std::fs::canonicalize(&repo).with_context(|| format!("repo {}", repo.display()))?;
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .to_path_buf(),
    };
    let out_dir = args.out_dir.clone().unwrap_or_else(|| repo.join("bench"));
    let traces = args
        .traces
        .clone()
        .unwrap_or_else(|| repo.join("cli/tests/fixtures/kineto"));
    let bins = Binaries::in_dir(&bin_dir)?;
    if !bulk::client_available() {
        bail!("clickhouse-client is not installed: run `deploy/dev/clickhouse.sh apt clickhouse-client` (or `make bench`)");
    }
    // With RANKSCOPE_BENCH_LOG (looking into a run) the logs are kept.
    let keep = std::env::var_os("RANKSCOPE_BENCH_LOG").is_some();
    let scratch = tempfile::Builder::new()
        .prefix("rankscope-bench-")
        .disable_cleanup(keep)
        .tempdir()
        .context("creating a scratch directory")?;
    note(&format!("scratch dir {}", scratch.path().display()));
    let ch = ClickHouse::start().context("starting ClickHouse")?;
    let mut machine = Machine::probe();
    machine.clickhouse_version = ch.query("SELECT version()")?.trim().to_owned();
    let ctx = Ctx {
        bins,
        ch,
        dir: scratch.path().to_path_buf(),
        repo,
        http: HttpClient::new(Duration::from_secs(60)),
    };
    let params = E2eParams {
        ranks: args.ranks,
        steps: args.steps,
        layers: args.layers,
        agent: parse_overrides(&args.agent_set)?,
        collector: parse_overrides(&args.collector_set)?,
    };
    let mut d = Details {
        machine,
        started_unix_s,
        runtime_s: 0.0,
        e2e_params: params.clone(),
        e2e: Vec::new(),
        full_relay: None,
        profile: Vec::new(),
        straggler_default: Vec::new(),
        straggler_tuned: Vec::new(),
        straggler_agent: Vec::new(),
        straggler_agent_loaded: Vec::new(),
        straggler_16k: Vec::new(),
        query: query::QueryRun::default(),
        fleet: fleet::FleetRun::default(),
        views: views::ViewsRun::default(),
        imports: Vec::new(),
        synthetic_bytes: 0,
        hta: None,
        idle: idle::IdleRun::default(),
        failures: Vec::new(),
    };

    if args.wants("e2e") {
        if let Err(e) = run_e2e(&ctx, &args, params, &mut d).await {
            fail(&mut d, "end-to-end", &e);
        }
    }
    if args.wants("straggler") {
        if let Err(e) = run_straggler(&ctx, &args, &mut d).await {
            fail(&mut d, "straggler latency", &e);
        }
    }
    if args.wants("query") {
        note("query latency: loading 2 M analytics rows");
        match query::run(&ctx, args.query_reps).await {
            Ok(q) => d.query = q,
            Err(e) => fail(&mut d, "query latency", &e),
        }
    }
    if args.wants("fleet") {
        note(&format!(
            "fleet view: {} nodes x {} days of history",
            args.fleet_nodes, args.fleet_days
        ));
        match fleet::run(&ctx, args.fleet_nodes, args.fleet_days, args.query_reps).await {
            Ok(f) => d.fleet = f,
            Err(e) => fail(&mut d, "fleet view", &e),
        }
    }
    if args.wants("views") {
        note("views: one job of 1,024 ranks x 100 steps (overview, ops, memory, clocks)");
        match views::run(&ctx, args.query_reps).await {
            Ok(v) => d.views = v,
            Err(e) => fail(&mut d, "views", &e),
        }
    }
    if args.wants("import") || args.wants("idle") || args.wants("hta") {
        if let Err(e) = run_import_idle(&ctx, &args, &traces, &mut d).await {
            fail(&mut d, "import / idle", &e);
        }
    }

    d.runtime_s = started.elapsed().as_secs_f64();
    let results = d.results();
    std::fs::create_dir_all(&out_dir)?;
    let json = serde_json::to_string_pretty(&results)? + "\n";
    std::fs::write(out_dir.join("results.json"), json)?;
    std::fs::write(
        out_dir.join("RESULTS.md"),
        report::markdown::render(&d, &results),
    )?;
    println!("{}", report::table(&results));
    println!(
        "wrote {} and {} ({:.0} s)",
        out_dir.join("results.json").display(),
        out_dir.join("RESULTS.md").display(),
        d.runtime_s
    );
    if !d.failures.is_empty() {
        bail!(
            "{} section(s) failed: {}",
            d.failures.len(),
            d.failures.join("; ")
        );
    }
    Ok(())
}

/// `KEY=VALUE` pairs; a value that is not TOML is taken as a string.
fn parse_overrides(items: &[String]) -> anyhow::Result<Vec<Override>> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item
                .split_once('=')
                .with_context(|| format!("{item:?} is not KEY=VALUE"))?;
            let value = toml::from_str::<toml::Table>(&format!("v = {v}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(v.to_owned()));
            Ok(Override::new(k.trim(), value))
        })
        .collect()
}

fn fail(d: &mut Details, section: &str, e: &dyn std::fmt::Display) {
    note(&format!("{section} FAILED: {e}"));
    d.failures.push(format!("{section}: {e}"));
}

/// Agent buffers of the throughput runs: room for the whole simulated job
/// (the simulator sends as fast as the agent acknowledges, far faster than
/// any rank, and the agent acknowledges on enqueue), so nothing is dropped
/// and the figure is the store path's rate. The agent's own defaults are
/// measured separately (`full_relay`).
const HOLD_THE_JOB: [(&str, i64); 2] = [
    ("queue_max_events", 4_000_000),
    ("backlog_max_bytes", 1 << 30),
];

async fn run_e2e(ctx: &Ctx, args: &Args, params: E2eParams, d: &mut Details) -> anyhow::Result<()> {
    let defaults = params.clone();
    let mut params = params;
    for (k, v) in HOLD_THE_JOB {
        if !params.agent.iter().any(|o| o.path == k) {
            params.agent.push(Override::new(k, v));
        }
    }
    let mut index = 0;
    if !args.no_profile && profile::available() {
        note("end-to-end: profiled warm-up run (not counted)");
        let r = e2e::run_once(ctx, &params, index, true).await?;
        d.profile = r.profile;
        index += 1;
    }
    for i in 0..args.e2e_runs {
        let r = e2e::run_once(ctx, &params, index, false).await?;
        note(&format!(
            "end-to-end run {}/{}: {} events in {:.2} s = {:.0} events/s; bulk {:.0} rows/s; \
             {} retries, {} batches left out of analytics, {} inserts ({}), machine {:.0} % busy, {:.0} % iowait; \
             ClickHouse {:.2} CPU s ({:.2} settled), bulk {:.2} ({:.2} settled)",
            i + 1,
            args.e2e_runs,
            r.events,
            r.elapsed_s,
            r.events_per_s,
            r.bulk.rows_per_s,
            r.collector_retries,
            r.analytics_dropped_batches,
            r.inserts,
            r.inserts_by_table
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            r.machine_busy_pct,
            r.machine_iowait_pct,
            r.clickhouse_cpu_s,
            r.clickhouse_cpu_settled_s,
            r.bulk.clickhouse_cpu_s,
            r.bulk.clickhouse_cpu_settled_s
        ));
        d.e2e.push(r);
        index += 1;
    }
    let r = e2e::run_once(ctx, &defaults, index, false).await?;
    note(&format!(
        "full relay, agent defaults: {} events accepted, {} dropped, agent peak RSS {:.1} MiB",
        r.events, r.dropped, r.agent_peak_rss_mib
    ));
    d.full_relay = Some(r);
    e2e::drop_databases(ctx, index + 1)?;
    Ok(())
}

async fn run_straggler(ctx: &Ctx, args: &Args, d: &mut Details) -> anyhow::Result<()> {
    for (tuned, name) in [(false, "default"), (true, "tuned")] {
        let db = format!("bench_straggler_{name}");
        ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
        let overrides = if tuned {
            vec![Override::new(
                "writer.flush_interval_ms",
                TUNED_FLUSH_MS as i64,
            )]
        } else {
            Vec::new()
        };
        let mut c =
            CollectorProc::start(&ctx.bins, &ctx.ch.http_url, &db, &ctx.dir, &overrides).await?;
        note(&format!(
            "straggler latency ({name} collector): {} trials of 1,024 ranks",
            args.straggler_trials
        ));
        let trials = straggler::run(
            &c.grpc_url,
            &c.http_url,
            &ctx.http,
            straggler::RANKS,
            args.straggler_trials,
            name,
        )
        .await?;
        if !tuned && args.straggler_16k_trials > 0 {
            note(&format!(
                "straggler latency (default collector): {} trials of 16,384 ranks",
                args.straggler_16k_trials
            ));
            d.straggler_16k = straggler::run(
                &c.grpc_url,
                &c.http_url,
                &ctx.http,
                straggler::RANKS_16K,
                args.straggler_16k_trials,
                "16k",
            )
            .await?;
        }
        c.stop();
        e2e::drop_after(&ctx.ch, &db);
        if tuned {
            d.straggler_tuned = trials;
        } else {
            d.straggler_default = trials;
        }
    }
    run_straggler_e2e(ctx, args, d).await
}

/// Straggler latency end to end (ranks -> agent -> collector -> API), on an
/// idle stack and while another agent streams the end-to-end job into the
/// same collector; default configurations.
async fn run_straggler_e2e(ctx: &Ctx, args: &Args, d: &mut Details) -> anyhow::Result<()> {
    let db = "bench_straggler_e2e";
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let mut c = CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    let mut agent =
        AgentProc::start(&ctx.bins, &c.grpc_url, &ctx.dir, "straggler", &[], &[]).await?;
    note(&format!(
        "straggler latency (rank streams -> agent -> collector, idle): {} trials",
        args.straggler_trials
    ));
    d.straggler_agent = straggler::run_via_agent(
        &agent.url,
        &c.http_url,
        &ctx.http,
        args.straggler_trials,
        "agent",
    )
    .await?;
    // The load: the end-to-end job at full speed through a second agent
    // (another node), long enough to outlast the trials; stopped after them.
    let mut load_agent =
        AgentProc::start(&ctx.bins, &c.grpc_url, &ctx.dir, "straggler-load", &[], &[]).await?;
    let mut cmd = std::process::Command::new(ctx.bins.rankscope());
    cmd.args([
        "simulate",
        "--agent",
        &load_agent.url,
        "--job",
        "bench-straggler-load",
    ])
    .args(["--ranks", &args.ranks.to_string()])
    .args(["--steps", "1000000"])
    .args(["--layers", &args.layers.to_string()])
    .env("RUST_BACKTRACE", "0")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut load = rankscope_bench::sys::spawn(&mut cmd)?;
    // Let the load reach its steady state before the first trial.
    tokio::time::sleep(Duration::from_secs(2)).await;
    note(&format!(
        "straggler latency (end to end, under the end-to-end ingest load): {} trials",
        args.straggler_trials
    ));
    let loaded = straggler::run_via_agent(
        &agent.url,
        &c.http_url,
        &ctx.http,
        args.straggler_trials,
        "agent-loaded",
    )
    .await;
    let _ = rankscope_bench::sys::terminate(&mut load, Duration::from_secs(20));
    load_agent.stop();
    agent.stop();
    c.stop();
    e2e::drop_after(&ctx.ch, db);
    d.straggler_agent_loaded = loaded?;
    Ok(())
}

async fn run_import_idle(
    ctx: &Ctx,
    args: &Args,
    traces: &std::path::Path,
    d: &mut Details,
) -> anyhow::Result<()> {
    let db = "bench_import";
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let mut c = CollectorProc::start(&ctx.bins, &ctx.ch.http_url, db, &ctx.dir, &[]).await?;
    if args.wants("import") {
        let sets = import::trace_sets(traces)
            .with_context(|| format!("trace sets in {}", traces.display()))?;
        let synth_path = ctx.dir.join("synthetic.json");
        note(&format!(
            "import: writing a {} MB synthetic trace",
            args.synthetic_mb
        ));
        let synth = synth::write(&synth_path, args.synthetic_mb * 1_000_000)?;
        d.synthetic_bytes = synth.bytes;
        for run in 0..args.import_runs {
            let mut runs = Vec::new();
            for set in &sets {
                let job = format!("bench-import-{run}-{}", set.name);
                let log = ctx.dir.join(format!("import-{run}-{}.log", set.name));
                let started = Instant::now();
                let mut r = import::import(
                    &ctx.bins,
                    &c.grpc_url,
                    &c.http_url,
                    &job,
                    &set.name,
                    &set.files,
                    set.json_bytes,
                    &log,
                )?;
                r.final_s = import::wait_final(&ctx.http, &c.http_url, &job, started).await?;
                runs.push(r);
            }
            let log = ctx.dir.join(format!("import-{run}-synthetic.log"));
            let started = Instant::now();
            let job = format!("bench-import-{run}-synthetic");
            let mut r = import::import(
                &ctx.bins,
                &c.grpc_url,
                &c.http_url,
                &job,
                "synthetic",
                std::slice::from_ref(&synth_path),
                synth.bytes,
                &log,
            )?;
            r.final_s = import::wait_final(&ctx.http, &c.http_url, &job, started).await?;
            note(&format!(
                "import run {}/{}: synthetic {:.0} MB in {:.1} s, analytics final at {:.1} s ({:.1} MB per CPU s)",
                run + 1,
                args.import_runs,
                synth.bytes as f64 / 1e6,
                r.elapsed_s,
                r.final_s,
                r.mb_per_cpu_s()
            ));
            runs.push(r);
            d.imports.push(runs);
        }
        let _ = std::fs::remove_file(&synth_path);
    }
    if args.wants("hta") {
        note(&format!(
            "side by side with HTA 0.5.0: a {}-rank x {}-step job of {} MB",
            hta::RANKS,
            hta::STEPS,
            args.hta_mb
        ));
        let venv = ctx.repo.join("target/hta-venv");
        let sbs = hta::run(
            &ctx.bins,
            &ctx.http,
            &ctx.repo,
            &ctx.dir,
            &venv,
            &c.grpc_url,
            &c.http_url,
            (c.pid, ctx.ch.pid()),
            args.hta_mb,
            args.hta_runs,
        )
        .await?;
        note(&format!(
            "HTA {:.1} s, rankscope {:.1} s: {:.1}x",
            stats::median(&sbs.hta.iter().map(|r| r.total_s).collect::<Vec<_>>()),
            stats::median(&sbs.ours.iter().map(|r| r.total_s).collect::<Vec<_>>()),
            sbs.speedup()
        ));
        d.hta = Some(sbs);
    }
    if args.wants("idle") {
        // The imports' and the earlier sections' rows may still be merged in
        // the background: that CPU would compete with the agent measured
        // here (RESULTS-alternations.md: these figures swing 2x anyway).
        note("agent idle cost (8 stand-in GPUs at 10 Hz): waiting for ClickHouse's merges");
        if !bulk::settle_all(&ctx.ch, bulk::SETTLE_CAP)? {
            note("merges still running after the cap: measuring anyway");
        }
        d.idle = idle::run(&ctx.bins, &ctx.repo, &ctx.dir, &c.grpc_url).await?;
    }
    c.stop();
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    Ok(())
}
