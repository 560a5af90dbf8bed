//! End-to-end ingest: `rankscope simulate` at full speed -> agent ->
//! collector -> ClickHouse, then the same rows loaded directly ([`bulk`]).
//!
//! In: a [`Ctx`] (binaries, ClickHouse, scratch dir) and [`E2eParams`]. Out:
//! an [`E2eRun`] per run: events/s from spawning the simulator until the
//! collector's `rankscope_collector_events_stored_total` reaches the number
//! of events the agent accepted (every row is then stored: the collector
//! acknowledges only after ClickHouse accepted), CPU seconds of collector,
//! agent, simulator and ClickHouse over that window, peak RSS of collector
//! and agent, and the bulk baseline on the same server in the same run.
//!
//! Each run uses a fresh database and fresh collector and agent processes
//! with their default configuration, so peak RSS is per run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rankscope_testkit::ClickHouse;

use crate::bulk::{self, BulkRun, EVENT_TABLES};
use crate::http::HttpClient;
use crate::profile::{ProcessProfile, Profiler};
use crate::stack::{AgentProc, Binaries, CollectorProc, Override};
use crate::{sys, BenchError};

/// What every section needs.
pub struct Ctx {
    pub bins: Binaries,
    pub ch: ClickHouse,
    /// Scratch directory (configs, logs, exported files).
    pub dir: PathBuf,
    /// The repository root (for the NVML stand-in and shared traces).
    pub repo: PathBuf,
    pub http: HttpClient,
}

/// Size of the simulated job and configuration overrides (none for the
/// record).
#[derive(Debug, Clone, serde::Serialize)]
pub struct E2eParams {
    pub ranks: u32,
    pub steps: u64,
    pub layers: u32,
    #[serde(skip)]
    pub agent: Vec<Override>,
    #[serde(skip)]
    pub collector: Vec<Override>,
}

/// One end-to-end run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct E2eRun {
    pub events: u64,
    pub dropped: u64,
    pub elapsed_s: f64,
    pub events_per_s: f64,
    /// Simulator alone: events / its own wall time to the last ack.
    pub simulate_elapsed_s: f64,
    pub collector_cpu_s: f64,
    pub collector_peak_rss_mib: f64,
    pub agent_cpu_s: f64,
    pub agent_peak_rss_mib: f64,
    pub simulate_cpu_s: f64,
    pub clickhouse_cpu_s: f64,
    /// ClickHouse CPU from the start until the merges of the stored parts
    /// settled after the run (`bulk::settle`; NaN if they did not).
    #[serde(default)]
    pub clickhouse_cpu_settled_s: f64,
    /// Batches the collector answered UNAVAILABLE (writer queue full; the
    /// agent backs off and retries).
    pub collector_retries: u64,
    /// Batches live analytics left out because their queue was full
    /// (`rankscope_collector_stream_dropped_batches_total`): at full speed
    /// the one analytics task may not keep up, and then does less work.
    #[serde(default)]
    pub analytics_dropped_batches: u64,
    /// INSERT statements the collector made...
    pub inserts: u64,
    /// ...by table (tables with none left out).
    #[serde(default)]
    pub inserts_by_table: Vec<(String, u64)>,
    /// Share of all CPU time of the machine (every process, also other
    /// users') that was busy during the run, and waiting for I/O, %.
    pub machine_busy_pct: f64,
    pub machine_iowait_pct: f64,
    /// Compressed bytes of the stored event rows (active parts).
    pub stored_bytes: u64,
    pub bulk: BulkRun,
    /// `perf` profiles when this run was profiled.
    pub profile: Vec<ProcessProfile>,
}

const STORED: &str = "rankscope_collector_events_stored_total";

/// One run; `profile` records a `perf` profile of collector, agent and
/// ClickHouse (that run's figures are then not used for the medians).
pub async fn run_once(
    ctx: &Ctx,
    p: &E2eParams,
    index: usize,
    profile: bool,
) -> Result<E2eRun, BenchError> {
    let db = format!("bench_e2e_{index}");
    ctx.ch.query(&format!("DROP DATABASE IF EXISTS {db}"))?;
    let mut collector =
        CollectorProc::start(&ctx.bins, &ctx.ch.http_url, &db, &ctx.dir, &p.collector).await?;
    let mut agent = AgentProc::start(
        &ctx.bins,
        &collector.grpc_url,
        &ctx.dir,
        &format!("e2e-{index}"),
        &p.agent,
        &[],
    )
    .await?;
    let ch_pid = ctx.ch.pid();
    let mut profiler = if profile {
        let mut pids = vec![collector.pid, agent.pid];
        pids.extend(ch_pid);
        Profiler::start(&pids, &ctx.dir.join(format!("perf-e2e-{index}.data")))
    } else {
        None
    };

    let m0 = sys::machine_cpu()?;
    let c0 = sys::cpu_s(collector.pid)?;
    let a0 = sys::cpu_s(agent.pid)?;
    let ch0 = ch_pid.and_then(|p| sys::cpu_s(p).ok());
    let started = Instant::now();
    let out_path = ctx.dir.join(format!("simulate-{index}.json"));
    let out = std::fs::File::create(&out_path).map_err(BenchError::io("create summary file"))?;
    let mut cmd = Command::new(ctx.bins.rankscope());
    cmd.args(["simulate", "--format", "json", "--agent", &agent.url])
        .args(["--job", &format!("bench-e2e-{index}")])
        .args(["--ranks", &p.ranks.to_string()])
        .args(["--steps", &p.steps.to_string()])
        .args(["--layers", &p.layers.to_string()])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(out);
    let sim = sys::spawn(&mut cmd)?;

    let deadline = started + Duration::from_secs(900);
    let mut reaped = None;
    let mut target: Option<(u64, u64)> = None; // (accepted, dropped)
    let stored_at = loop {
        if reaped.is_none() {
            if let Some(r) = sys::try_reap(sim.id())? {
                if !r.status.success() {
                    return Err(BenchError::Process {
                        program: "rankscope simulate".into(),
                        status: r.status.to_string(),
                        detail: std::fs::read_to_string(&out_path).unwrap_or_default(),
                    });
                }
                target = Some(summary_counts(&out_path)?);
                reaped = Some(r);
            }
        }
        if let Some((accepted, _)) = target {
            if collector.counter(&ctx.http, STORED).await? >= accepted {
                break started.elapsed();
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: "all simulated events stored".into(),
                secs: 900,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let m1 = sys::machine_cpu()?;
    let c1 = sys::cpu_s(collector.pid)?;
    let collector_retries = collector
        .counter(&ctx.http, "rankscope_collector_batches_retry_total")
        .await?;
    let inserts = collector
        .counter(&ctx.http, "rankscope_collector_clickhouse_inserts_total")
        .await?;
    let analytics_dropped_batches = collector
        .counter(
            &ctx.http,
            "rankscope_collector_stream_dropped_batches_total",
        )
        .await?;
    let mut inserts_by_table = collector
        .counters_by_label(
            &ctx.http,
            "rankscope_collector_clickhouse_table_inserts_total",
        )
        .await?;
    inserts_by_table.retain(|(_, n)| *n > 0);
    let a1 = sys::cpu_s(agent.pid)?;
    let ch1 = ch_pid.and_then(|p| sys::cpu_s(p).ok());
    let collector_rss = sys::peak_rss_mib(collector.pid)?;
    let agent_rss = sys::peak_rss_mib(agent.pid)?;
    let profile = profiler.as_mut().map(|p| p.finish()).unwrap_or_default();
    agent.stop();
    collector.stop();
    let settled = bulk::settle(&ctx.ch, &db, bulk::SETTLE_CAP)?;
    let ch2 = ch_pid.and_then(|p| sys::cpu_s(p).ok());

    let (accepted, dropped) = target.unwrap_or_default();
    let reaped = reaped.ok_or_else(|| BenchError::Check("simulator not reaped".into()))?;
    let mut stored = 0;
    for t in EVENT_TABLES {
        stored += bulk::count(&ctx.ch, &db, t)?;
    }
    if stored != accepted {
        return Err(BenchError::Check(format!(
            "{stored} event rows in ClickHouse, {accepted} events accepted by the agent"
        )));
    }
    let simulate_elapsed_s = simulate_elapsed(&out_path).unwrap_or(f64::NAN);
    let stored_bytes = ctx
        .ch
        .query(&format!(
            "SELECT sum(data_compressed_bytes) FROM system.parts WHERE active AND database = '{db}' \
             AND table IN ('steps', 'spans', 'collectives', 'kernels')"
        ))?
        .trim()
        .parse()
        .map_err(|e| BenchError::parse("system.parts bytes", e))?;
    let bulk = bulk::load_same_rows(&ctx.ch, &db, &bulk_database(&db), &ctx.dir)?;
    // The databases stay until the section ends ([`drop_databases`]).
    let elapsed_s = stored_at.as_secs_f64();
    Ok(E2eRun {
        events: accepted,
        dropped,
        elapsed_s,
        events_per_s: accepted as f64 / elapsed_s,
        simulate_elapsed_s,
        collector_cpu_s: c1 - c0,
        collector_peak_rss_mib: collector_rss,
        agent_cpu_s: a1 - a0,
        agent_peak_rss_mib: agent_rss,
        simulate_cpu_s: reaped.cpu_s,
        clickhouse_cpu_s: match (ch0, ch1) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        },
        clickhouse_cpu_settled_s: match (ch0, ch2, settled) {
            (Some(a), Some(b), true) => b - a,
            _ => f64::NAN,
        },
        collector_retries,
        analytics_dropped_batches,
        inserts,
        inserts_by_table,
        machine_busy_pct: m1.busy_pct_since(&m0),
        machine_iowait_pct: m1.iowait_pct_since(&m0),
        stored_bytes,
        bulk,
        profile,
    })
}

/// The bulk load's copy of run database `db`.
fn bulk_database(db: &str) -> String {
    format!("{db}_bulk")
}

/// Drops the databases of runs `0..runs` (theirs and their bulk copies).
///
/// Why at the end of the section, not after each run: dropping a database
/// deletes thousands of part files, and for about a minute after that ext4
/// scans past the freed inodes whenever it allocates one (it does not reuse
/// an inode freed within `RECENTCY_MIN`, 60 s, and reads each one's inode
/// block to find out). ClickHouse creates a few thousand files per run, so
/// the previous run's clean-up made the next run's ClickHouse CPU 2-3x
/// higher (five runs back to back: 3.9, 3.5, 3.1, 1.7, 1.4 CPU s for the
/// same rows; 1.6 s after a 90 s quiet period). That is the bench's own
/// doing, not the ingest path's.
pub fn drop_databases(ctx: &Ctx, runs: usize) -> Result<(), BenchError> {
    for index in 0..runs {
        let db = format!("bench_e2e_{index}");
        drop_after(&ctx.ch, &db);
        drop_after(&ctx.ch, &bulk_database(&db));
    }
    Ok(())
}

/// Drops a section's database once its figures are taken. A failure (seen:
/// no answer within the HTTP timeout while ClickHouse merged on a loaded
/// machine) is said on stderr and does not throw the section's results
/// away; the next run's `DROP ... IF EXISTS` before its load removes it.
pub fn drop_after(ch: &ClickHouse, db: &str) {
    if let Err(e) = ch.query(&format!("DROP DATABASE IF EXISTS {db}")) {
        eprintln!("[bench] warning: could not drop {db} after its section: {e}");
    }
}

fn summary(path: &Path) -> Result<serde_json::Value, BenchError> {
    let text = std::fs::read_to_string(path).map_err(BenchError::io("read simulate summary"))?;
    serde_json::from_str(&text).map_err(|e| BenchError::parse("simulate summary", e))
}

/// `(accepted, dropped)` of a `simulate --format json` summary.
pub fn summary_counts(path: &Path) -> Result<(u64, u64), BenchError> {
    let v = summary(path)?;
    let get = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| BenchError::parse("simulate summary", format!("no {k}")))
    };
    let rejected = get("messages_rejected")?;
    if rejected > 0 {
        return Err(BenchError::Check(format!(
            "the agent rejected {rejected} simulated messages"
        )));
    }
    Ok((get("accepted")?, get("dropped")?))
}

fn simulate_elapsed(path: &Path) -> Option<f64> {
    summary(path).ok()?["elapsed_s"].as_f64()
}
