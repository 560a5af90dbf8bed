//! `rankscope`: the command-line tool.
//!
//! In: the command line (and `RANKSCOPE_AGENT` / `RANKSCOPE_COLLECTOR`
//! through the flags they back). Out: results on stdout, logs on stderr,
//! exit code 0 on success, 1 on any error (including a simulation in which
//! the agent rejected a message).
//!
//! Subcommands now: `simulate`, `jobs`, `steps`. Later ones (breakdown,
//! stragglers, collectives, import, gpus, alerts) become new variants of
//! [`Command`] with their own `*Args` and a module in the library.

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};
use rankscope_cli::query::analytics::{self, View};
use rankscope_cli::query::gpu::{self, GpuArgs, GpuView};
use rankscope_cli::query::{self, columns, format, http::HttpClient, OutputFormat, StepsQuery};
use rankscope_cli::simulate::{
    self, SimConfig, Straggler, SummaryFormat, DEFAULT_EVENTS_PER_MESSAGE,
};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Parser)]
#[command(
    name = "rankscope",
    version,
    about = "Cluster-wide profiler for distributed GPU training"
)]
struct Cli {
    /// Debug logs on stderr (RUST_LOG overrides).
    #[arg(long, short, global = true)]
    verbose: bool,
    /// Collector HTTP API for the query commands.
    #[arg(
        long,
        global = true,
        env = "RANKSCOPE_COLLECTOR",
        default_value = "http://127.0.0.1:7701"
    )]
    collector: String,
    /// Bearer token the collector requires (API and `import`).
    #[arg(
        long,
        global = true,
        env = "RANKSCOPE_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    token: String,
    /// PEM CA that signed the collector's certificate (https:// collector and
    /// `import --ingest https://...`).
    #[arg(long, global = true, env = "RANKSCOPE_TLS_CA_PATH", default_value = "")]
    tls_ca_path: String,
    /// PEM client certificate, when the collector requires mutual TLS.
    #[arg(
        long,
        global = true,
        env = "RANKSCOPE_TLS_CERT_PATH",
        default_value = ""
    )]
    tls_cert_path: String,
    /// PEM private key of --tls-cert-path.
    #[arg(
        long,
        global = true,
        env = "RANKSCOPE_TLS_KEY_PATH",
        default_value = ""
    )]
    tls_key_path: String,
    /// Timeout of one HTTP request to the collector, ms.
    #[arg(long, global = true, default_value_t = query::DEFAULT_TIMEOUT_MS)]
    timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a training job and stream it to an agent like real ranks do.
    Simulate(SimulateArgs),
    /// List the jobs the collector knows.
    Jobs(JobsArgs),
    /// Per-rank step times of one job.
    Steps(StepsArgs),
    /// Per (step, rank) GPU time breakdown (HTA definitions).
    Breakdown(BreakdownArgs),
    /// Per-rank temporal breakdown and overlap over the whole job (HTA's, as
    /// HTA loads the traces; --exact: every stored GPU activity).
    Ranks(RanksArgs),
    /// NCCL collective statistics (calls, bytes, latency, algbw/busbw, wait).
    Collectives(CollectivesArgs),
    /// Straggler verdicts (cause compute, input, communication or other:
    /// time outside forward/backward/optimizer/input).
    Stragglers(JobArgs),
    /// GPU time per kernel type, overlaps as their own types (HTA kernel breakdown).
    KernelTypes(GpuArgs),
    /// Top kernels per type with calls and duration statistics (HTA kernel breakdown).
    Kernels(GpuArgs),
    /// Idle time per GPU stream: host_wait, kernel_wait, other (HTA idle-time breakdown).
    Idle(GpuArgs),
    /// CUDA queue length per stream (HTA queue length summary).
    Queue(GpuArgs),
    /// Memcpy / memset calls, bytes, time and GB/s per direction.
    Memcpy(GpuArgs),
    /// Kernel launch statistics per rank: short kernels, runtime and launch-delay
    /// outliers (HTA get_cuda_kernel_launch_stats).
    Launches(GpuArgs),
    /// Per rank GPU utilization, Est. SM efficiency, Est. achieved occupancy,
    /// Tensor Core share and the step-time breakdown (PyTorch Profiler
    /// TensorBoard plugin's overview), with the job-wide spread.
    Overview(rankscope_cli::query::views::ViewArgs),
    /// Recommendations per rank and job-wide (the TensorBoard plugin's rules,
    /// stragglers with their what-if gain, input stalls, launch-bound ranks).
    Advice(rankscope_cli::query::views::ViewArgs),
    /// GPU time per user annotation (gpu_user_annotation), per rank (HTA
    /// get_gpu_user_annotation_breakdown).
    Annotations(rankscope_cli::query::views::ViewArgs),
    /// Import PyTorch profiler (Kineto) traces: files or folders, one file per rank.
    Import(ImportArgs),
    /// Alerts (straggler, hang, low GPU utilization, collective slowdown).
    Alerts(AlertsArgs),
    /// Latest sample of every GPU (NVML telemetry from the agents).
    Gpus(GpusArgs),
    /// Which nodes, GPUs or links keep slowing jobs down, across every job:
    /// verdicts against exposure, ranked by a recurrence score.
    Fleet(FleetArgs),
    /// One rank's kernels against another's (same job or --vs-job): calls and
    /// time per step per kernel, the largest differences first.
    Diff(DiffArgs),
    /// The job's events as a Chrome Trace Event file (Perfetto, chrome://tracing).
    Timeline(TimelineArgs),
    /// Where a job's wall time went (compute, exposed communication, straggler
    /// wait, input stalls, idle, hung) and, with --flops-per-step, its MFU.
    Goodput(GoodputArgs),
    /// Each node's clock offset against the node of the job's lowest rank,
    /// from the ends of its blocking collectives (median, outliers rejected).
    Clocks(ClocksArgs),
    /// Operator view of traced ranks (PyTorch Profiler TensorBoard plugin
    /// columns, Paddle's min/max/mean and ratios): per rank, or across ranks.
    Ops(OpsArgs),
    /// Memory view of traced ranks: peak allocated/reserved per rank and device,
    /// with --ops the per-operator memory table.
    Memory(MemoryArgs),
    /// Trace ranks of a job with Kineto through their agents (processes started
    /// with KINETO_USE_DAEMON=1; no code change) and import the traces.
    Trace(TraceArgs),
    /// Kineto traces of a job, per rank: requested, delivered, captured, imported or failed.
    Traces(TracesArgs),
    /// Compare a traced straggler with its traced peers: per kernel category and
    /// operator, time per iteration, the largest differences first.
    TraceDiff(TraceDiffArgs),
    /// Run a training command with every Python rank it starts instrumented
    /// (no change to the script): `rankscope run -- torchrun ... train.py`.
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The node's agent (`unix:/path`, `/path` or `http://host:port`);
    /// default: RANKSCOPE_AGENT, else the agent's default Unix socket.
    #[arg(long)]
    agent: Option<String>,
    /// Job id of the ranks (sets RANKSCOPE_JOB_ID, which always wins);
    /// default: decided by each rank from torchrun's --rdzv-id, Slurm or
    /// Kubernetes, else `<script>-<unix seconds>-<pid>` on a single node.
    #[arg(long)]
    job: Option<String>,
    /// The command, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
struct FleetArgs {
    /// Window back from now (7d, 12h, 30m, 2w) or a start in ns since the epoch.
    #[arg(long, default_value = "7d")]
    since: String,
    /// Group by node, gpu (UUID) or link.
    #[arg(long, default_value = "node")]
    by: String,
    /// Units seen in fewer jobs are marked low_exposure, not ranked [default: 3].
    #[arg(long)]
    min_jobs: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct GpusArgs {
    /// Only the GPUs of this node.
    #[arg(long)]
    node: Option<String>,
    /// Only the GPUs this job's ranks ran on (their last sample while it ran).
    #[arg(long)]
    job: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("span").required(true).args(["duration_ms", "iterations"])))]
struct TraceArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// A rank to trace (repeat for more); default: every rank.
    #[arg(long = "rank")]
    ranks: Vec<u32>,
    /// Trace this long (each rank from its next poll, about a second apart).
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Trace this many iterations, starting on the same iteration on every rank.
    #[arg(long)]
    iterations: Option<u64>,
    /// Wait up to SECS for every rank to be imported or failed; exit 1 unless all imported.
    #[arg(long, value_name = "SECS")]
    wait: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("other").required(true).multiple(true).args(["vs_rank", "vs_job"])))]
struct DiffArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// The rank to look at (e.g. a straggler).
    #[arg(long)]
    rank: u32,
    /// The rank to compare it with (default with --vs-job: the same rank).
    #[arg(long)]
    vs_rank: Option<u32>,
    /// Compare with this job instead of the same one.
    #[arg(long)]
    vs_job: Option<String>,
    /// Steps A..B (inclusive); default: all.
    #[arg(long)]
    steps: Option<String>,
    /// Rows to show (the largest differences).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct TimelineArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// Steps A..B (inclusive); default: every event of the job.
    #[arg(long)]
    steps: Option<String>,
    /// A rank to include (repeat for more); default: all.
    #[arg(long = "rank")]
    ranks: Vec<u32>,
    /// Output file (`.json`, or `.json.gz` for gzip).
    #[arg(short = 'o', long = "output")]
    output: std::path::PathBuf,
}

#[derive(Debug, Args)]
struct OpsArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// One rank (default: one row per operator across the ranks).
    #[arg(long)]
    rank: Option<u32>,
    /// Row key: name, shape or stack (file:line frames of with_stack=True traces).
    #[arg(long, default_value = "name")]
    group_by: String,
    /// Most rows (1..=10000).
    #[arg(long)]
    top: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct MemoryArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// One rank.
    #[arg(long)]
    rank: Option<u32>,
    /// The per-operator memory table.
    #[arg(long)]
    ops: bool,
    /// Allocation/release events (ts, device, bytes, totals, operator).
    #[arg(long)]
    events: bool,
    /// With --events: at most this many (1..=100000).
    #[arg(long, visible_alias = "top", default_value_t = 1000)]
    limit: u64,
    /// With --events: skip this many first.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// A live job: per (step, rank) peaks instead of per rank.
    #[arg(long)]
    steps: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct ClocksArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct GoodputArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// Model FLOPs of one training step of the whole job (all ranks), e.g.
    /// 6 x parameters x tokens per global batch; gives MFU with the GPU's peak.
    #[arg(long)]
    flops_per_step: Option<f64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct TraceDiffArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// The trace (`rankscope traces --job J`, or the straggler's `trace` column).
    #[arg(long)]
    trace: String,
    /// The rank to compare with the others; default: the straggler the
    /// trace was made for, else the rank with the most time per iteration.
    #[arg(long)]
    rank: Option<u32>,
    /// Rows to show (the largest differences).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct TracesArgs {
    /// The job.
    #[arg(long)]
    job: String,
    /// Only this trace.
    #[arg(long)]
    trace: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct AlertsArgs {
    /// Only this job.
    #[arg(long)]
    job: Option<String>,
    /// Only alerts still firing.
    #[arg(long)]
    active: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// Job id the traces are filed under.
    #[arg(long)]
    job: String,
    /// Run id (empty = unknown).
    #[arg(long, default_value = "")]
    run_id: String,
    /// Rank of a single trace without distributedInfo.
    #[arg(long)]
    rank: Option<u32>,
    /// World size of a trace without distributedInfo.
    #[arg(long)]
    world_size: Option<u32>,
    /// Node name to record (traces do not carry it).
    #[arg(long, default_value = "")]
    node: String,
    /// The collector's gRPC ingest URL.
    #[arg(
        long,
        env = "RANKSCOPE_INGEST",
        default_value = "http://127.0.0.1:7700"
    )]
    ingest: String,
    /// Files imported at the same time (a sliding window; at most one per
    /// core is being parsed, the others wait for the collector's
    /// acknowledgements, which come after its next ClickHouse flush).
    #[arg(long, default_value_t = 32)]
    parallel: usize,
    /// Wait up to this long for the job's analytics to be final (every
    /// imported step of every rank analysed) before returning; 0: do not wait.
    #[arg(long, default_value_t = 300)]
    wait_secs: u64,
    /// Trace files (.json, .json.gz) or folders of them; or object storage
    /// URLs: s3://bucket/prefix/, gs://bucket/prefix/, az://container/prefix/,
    /// https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX/, or the
    /// https:// URL of one file. Credentials and endpoints come from the
    /// providers' environment variables (AWS_*, AWS_ENDPOINT_URL,
    /// GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*).
    #[arg(required = true)]
    paths: Vec<std::path::PathBuf>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Agent's rank ingest endpoint: http://HOST:PORT or unix:/PATH.
    #[arg(long, env = "RANKSCOPE_AGENT", default_value = "http://127.0.0.1:7710")]
    agent: String,
    /// Job id [default: the scheduler's job id (SLURM_JOB_ID, TORCHELASTIC_RUN_ID,
    /// POD_NAME), else sim-<unix seconds>].
    #[arg(long)]
    job: Option<String>,
    /// Run id the ranks report (empty = unknown).
    #[arg(long, default_value = "")]
    run_id: String,
    /// Number of ranks (world size).
    #[arg(long, default_value_t = 8)]
    ranks: u32,
    /// Training steps per rank.
    #[arg(long, default_value_t = 50)]
    steps: u64,
    /// Ranks per node (sets node names and local ranks).
    #[arg(long, default_value_t = 8)]
    ranks_per_node: u32,
    /// Seed of the timing jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Slow rank as RANK:FACTOR, e.g. 5:1.3 (repeatable).
    #[arg(long, value_name = "RANK:FACTOR")]
    straggler: Vec<Straggler>,
    /// Rank with MS ms per step outside its phases (host work after backward,
    /// before the optimizer), e.g. 3:20 (repeatable).
    #[arg(long, value_name = "RANK:MS")]
    outside: Vec<simulate::Outside>,
    /// Throttle all ranks together to this many events per second.
    #[arg(long, value_name = "EVENTS_PER_S")]
    rate: Option<f64>,
    /// Send each step when the wall clock reaches its end (real timestamps).
    #[arg(long)]
    realtime: bool,
    /// Begin of step 0, ns since the Unix epoch [default: now].
    #[arg(long)]
    start_ns: Option<u64>,
    /// Number of the first step (to continue an earlier run of the job).
    #[arg(long, default_value_t = 0)]
    first_step: u64,
    /// After sending, wait until the collector has analysed the last step
    /// of every rank (uses --collector), at most this many seconds.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "60")]
    wait: Option<u64>,
    /// Transformer layers (model size).
    #[arg(long, default_value_t = 12)]
    layers: u32,
    /// Timing jitter (sigma of a log-normal factor).
    #[arg(long, default_value_t = 0.03)]
    jitter: f64,
    /// Most events per gRPC message.
    #[arg(long, default_value_t = DEFAULT_EVENTS_PER_MESSAGE)]
    events_per_message: usize,
    /// Summary format.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Table)]
    format: SummaryFormat,
    /// JSON list of {"rank", "node", "gpu_uuid"}: each rank's node and GPU.
    #[arg(long, value_name = "FILE")]
    placement: Option<std::path::PathBuf>,
    /// A node whose clock is off, as NODE:OFFSET with a sign and a unit
    /// (ns, us, ms), e.g. 2:+3ms: node 2's ranks (or the --placement node of
    /// that name) stamp every event that much late (repeatable).
    #[arg(long, value_name = "NODE:OFFSET")]
    node_clock_offset: Vec<simulate::NodeClockOffset>,
}

#[derive(Debug, Args)]
struct JobsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct StepsArgs {
    /// Job id.
    #[arg(long)]
    job: String,
    /// Only the last K steps.
    #[arg(long, value_name = "K")]
    last: Option<u64>,
    /// First step (inclusive).
    #[arg(long)]
    from_step: Option<u64>,
    /// Last step (inclusive).
    #[arg(long)]
    to_step: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct JobArgs {
    /// Job id.
    #[arg(long)]
    job: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct RanksArgs {
    /// Job id.
    #[arg(long)]
    job: String,
    /// Every stored GPU activity at its stored times (the union of the
    /// intervals), not HTA 0.5.0's loading rules (ProfilerStep window,
    /// whole microseconds, host events with a CUDA stream argument).
    #[arg(long)]
    exact: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct BreakdownArgs {
    /// Job id.
    #[arg(long)]
    job: String,
    /// Only this step.
    #[arg(long, conflicts_with = "last")]
    step: Option<u64>,
    /// Only the last K finalized steps.
    #[arg(long, value_name = "K")]
    last: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug, Args)]
struct CollectivesArgs {
    /// Job id.
    #[arg(long)]
    job: String,
    /// Per-rank statistics of this rank (default: job-wide).
    #[arg(long)]
    rank: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        quiet_on_closed_pipe();
    }
    init_logging(cli.verbose);
    if let Command::Run(args) = &cli.command {
        // exec: returns only when the command could not be started.
        let e = rankscope_cli::launch::exec(&rankscope_cli::launch::RunOptions {
            agent: args.agent.clone(),
            job: args.job.clone(),
            command: args.command.clone(),
        });
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let tls = rankscope_proto::tls::TlsPaths::from_config(
        &cli.tls_cert_path,
        &cli.tls_key_path,
        &cli.tls_ca_path,
    );
    let timeout = Duration::from_millis(cli.timeout_ms);
    let client = if cli.collector.starts_with("https://") || tls.any() {
        if tls.ca.is_none() {
            anyhow::bail!(
                "--tls-ca-path (RANKSCOPE_TLS_CA_PATH) is required for https:// and TLS client certificates"
            );
        }
        HttpClient::with_tls(timeout, &tls)?
    } else {
        HttpClient::new(timeout)
    }
    .with_token(&cli.token);
    let http = || client.clone();
    match cli.command {
        Command::Run(_) => bail!("rankscope run is handled before the runtime starts"),
        Command::Simulate(args) => {
            let wait = args.wait;
            let (job, ranks, steps) = simulate_cmd(args).await?;
            match wait {
                Some(secs) if steps > 0 => {
                    wait_analysed(&http(), &cli.collector, &job, ranks, steps - 1, secs).await
                }
                _ => Ok(()),
            }
        }
        Command::Jobs(args) => {
            let jobs = query::fetch_jobs(&http(), &cli.collector).await?;
            print!("{}", format::render_jobs(&jobs, args.format));
            Ok(())
        }
        Command::Steps(args) => {
            let q = StepsQuery {
                last: args.last,
                from_step: args.from_step,
                to_step: args.to_step,
            };
            let client = http();
            let steps = query::fetch_steps(&client, &cli.collector, &args.job, &q).await?;
            let lo = steps.steps.iter().map(|s| s.step).min();
            let hi = steps.steps.iter().map(|s| s.step).max();
            let waits = match (args.format, lo, hi) {
                // Who the others waited for: best effort (none over 1,000 steps).
                (query::OutputFormat::Table, Some(lo), Some(hi)) => {
                    query::fetch_step_waits(&client, &cli.collector, &args.job, lo, hi)
                        .await
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            print!(
                "{}",
                format::render_steps_with(&steps.steps, &waits, args.format)
            );
            Ok(())
        }
        Command::Breakdown(a) => {
            let params = [("step", a.step), ("last", a.last)];
            view(
                &http(),
                &cli.collector,
                &a.job,
                View::Breakdown,
                &params,
                a.format,
            )
            .await
        }
        Command::Ranks(a) => {
            let rows = analytics::fetch_ranks(&http(), &cli.collector, &a.job, a.exact).await?;
            print!(
                "{}",
                columns::render(&rows, View::Ranks.columns(), a.format)
            );
            Ok(())
        }
        Command::Collectives(a) => {
            let params = [("rank", a.rank.map(u64::from))];
            view(
                &http(),
                &cli.collector,
                &a.job,
                View::Collectives,
                &params,
                a.format,
            )
            .await
        }
        Command::Import(a) => import_cmd(a, &cli.token, tls, &http(), &cli.collector).await,
        Command::Gpus(a) => {
            let (node, job) = (a.node.as_deref(), a.job.as_deref());
            let rows =
                rankscope_cli::query::gpus::fetch_gpus(&http(), &cli.collector, node, job).await?;
            print!("{}", rankscope_cli::query::gpus::render(&rows, a.format));
            Ok(())
        }
        Command::Fleet(a) => {
            use rankscope_cli::query::fleet;
            let body = fleet::fetch(&http(), &cli.collector, &a.since, &a.by, a.min_jobs).await?;
            print!("{}", fleet::render(&body, a.format));
            Ok(())
        }
        Command::Trace(a) => {
            use rankscope_cli::query::traces::{self, TraceSpan};
            let span = match (a.duration_ms, a.iterations) {
                (Some(ms), _) => TraceSpan::DurationMs(ms),
                (None, Some(n)) => TraceSpan::Iterations(n),
                (None, None) => bail!("give --duration-ms or --iterations"),
            };
            let client = http();
            let (id, mut rows) =
                traces::request(&client, &cli.collector, &a.job, &a.ranks, span).await?;
            let mut complete = true;
            if let Some(secs) = a.wait {
                eprintln!(
                    "trace {id}: waiting up to {secs}s for {} rank(s)",
                    rows.len()
                );
                let (r, finished) = traces::wait(
                    &client,
                    &cli.collector,
                    &a.job,
                    &id,
                    Duration::from_secs(secs),
                    Duration::from_millis(500),
                )
                .await?;
                rows = r;
                complete = finished && rows.iter().all(|r| r["state"] == "imported");
            }
            print!("{}", columns::render(&rows, traces::TRACES, a.format));
            if !complete {
                let open: Vec<String> = rows
                    .iter()
                    .filter(|r| r["state"] != "imported")
                    .map(|r| format!("rank {} {}", r["rank"], r["state"].as_str().unwrap_or("?")))
                    .collect();
                bail!("trace {id} not imported on every rank: {}", open.join(", "));
            }
            Ok(())
        }
        Command::Diff(a) => {
            use rankscope_cli::query::diff;
            let steps = match &a.steps {
                Some(s) => Some(diff::parse_steps(s).map_err(anyhow::Error::msg)?),
                None => None,
            };
            let q = diff::DiffQuery {
                rank: a.rank,
                vs_rank: a.vs_rank,
                vs_job: a.vs_job.clone(),
                steps,
            };
            let v = diff::fetch(&http(), &cli.collector, &a.job, &q).await?;
            let mut rows = v["rows"].as_array().cloned().unwrap_or_default();
            rows.truncate(a.top);
            if a.format == OutputFormat::Table {
                println!(
                    "a = {} rank {} ({} steps), b = {} rank {} ({} steps), per step",
                    a.job,
                    v["rank"],
                    v["steps_a"],
                    v["vs_job"].as_str().unwrap_or(""),
                    v["vs_rank"],
                    v["steps_b"]
                );
            }
            print!("{}", columns::render(&rows, diff::DIFF, a.format));
            Ok(())
        }
        Command::Timeline(a) => {
            let steps = match &a.steps {
                Some(s) => {
                    Some(rankscope_cli::query::diff::parse_steps(s).map_err(anyhow::Error::msg)?)
                }
                None => None,
            };
            let n = rankscope_cli::query::timeline::export(
                &http(),
                &cli.collector,
                &a.job,
                steps,
                &a.ranks,
                &a.output,
            )
            .await?;
            eprintln!("wrote {n} trace events to {}", a.output.display());
            Ok(())
        }
        Command::Clocks(a) => {
            use rankscope_cli::query::clocks;
            let v = clocks::fetch(&http(), &cli.collector, &a.job).await?;
            if a.format == OutputFormat::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows = v["nodes"].as_array().cloned().unwrap_or_default();
                if a.format == OutputFormat::Table {
                    println!("{}", clocks::summary(&v));
                }
                print!("{}", columns::render(&rows, clocks::NODES, a.format));
            }
            Ok(())
        }
        Command::Goodput(a) => {
            use rankscope_cli::query::goodput;
            let v = goodput::fetch(&http(), &cli.collector, &a.job, a.flops_per_step).await?;
            if a.format == OutputFormat::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows = v["parts"].as_array().cloned().unwrap_or_default();
                if a.format == OutputFormat::Table {
                    println!("{}", goodput::summary(&v));
                }
                print!("{}", columns::render(&rows, goodput::PARTS, a.format));
            }
            Ok(())
        }
        Command::Ops(a) => {
            use rankscope_cli::query::opsmem as views;
            let v = views::ops(&http(), &cli.collector, &a.job, a.rank, &a.group_by, a.top).await?;
            if a.format == OutputFormat::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut rows = v["rows"].as_array().cloned().unwrap_or_default();
                views::with_frames(&mut rows);
                let cols = if a.rank.is_some() {
                    views::RANK_OPS
                } else {
                    views::JOB_OPS
                };
                let cols = views::with_shape(&rows, cols);
                print!("{}", columns::render(&rows, &cols, a.format));
                for n in v["notes"].as_array().into_iter().flatten() {
                    eprintln!("note: {}", n.as_str().unwrap_or(""));
                }
            }
            Ok(())
        }
        Command::Memory(a) => {
            use rankscope_cli::query::opsmem as views;
            let events = a.events.then_some((a.limit, a.offset));
            let v = views::memory(&http(), &cli.collector, &a.job, a.rank, a.ops, events).await?;
            if a.format == OutputFormat::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let traced = v["peaks"].as_array().is_some_and(|p| !p.is_empty());
                let (key, cols) = if a.events {
                    if a.format == OutputFormat::Table {
                        println!(
                            "{} events in all; from {}",
                            v["events_total"].as_u64().unwrap_or(0),
                            a.offset
                        );
                    }
                    ("events", views::EVENTS)
                } else if a.ops {
                    ("ops", views::MEMORY_OPS)
                } else if a.steps {
                    ("steps", views::LIVE_STEPS)
                } else if !traced && v["live"]["ranks"].as_array().is_some_and(|r| !r.is_empty()) {
                    if let (Some(s), OutputFormat::Table) = (views::live_summary(&v), a.format) {
                        println!("{s}");
                    }
                    ("live", views::LIVE_RANKS)
                } else {
                    ("peaks", views::PEAKS)
                };
                let rows = if key == "steps" {
                    v["live"]["steps"].as_array().cloned().unwrap_or_default()
                } else if key == "live" {
                    v["live"]["ranks"].as_array().cloned().unwrap_or_default()
                } else {
                    v[key].as_array().cloned().unwrap_or_default()
                };
                print!("{}", columns::render(&rows, cols, a.format));
                for n in v["notes"].as_array().into_iter().flatten() {
                    eprintln!("note: {}", n.as_str().unwrap_or(""));
                }
            }
            Ok(())
        }
        Command::TraceDiff(a) => {
            use rankscope_cli::query::traces;
            let d = traces::diff(&http(), &cli.collector, &a.job, &a.trace, a.rank).await?;
            let mut rows = d["rows"].as_array().cloned().unwrap_or_default();
            rows.truncate(a.top);
            if a.format == OutputFormat::Table {
                println!(
                    "trace {}: rank {} vs ranks {} over {} iteration(s), per iteration",
                    a.trace, d["subject_rank"], d["peer_ranks"], d["subject_iterations"]
                );
            }
            print!("{}", columns::render(&rows, traces::DIFF, a.format));
            Ok(())
        }
        Command::Traces(a) => {
            let rows = rankscope_cli::query::traces::fetch(
                &http(),
                &cli.collector,
                &a.job,
                a.trace.as_deref(),
            )
            .await?;
            print!(
                "{}",
                columns::render(&rows, rankscope_cli::query::traces::TRACES, a.format)
            );
            Ok(())
        }
        Command::Alerts(a) => {
            let rows = analytics::fetch_alerts(&http(), &cli.collector, a.job.as_deref(), a.active)
                .await?;
            print!("{}", columns::render(&rows, analytics::ALERTS, a.format));
            Ok(())
        }
        Command::KernelTypes(a) => {
            gpu_view(&http(), &cli.collector, GpuView::KernelTypes, &a).await
        }
        Command::Kernels(a) => gpu_view(&http(), &cli.collector, GpuView::Kernels, &a).await,
        Command::Idle(a) => gpu_view(&http(), &cli.collector, GpuView::Idle, &a).await,
        Command::Queue(a) => gpu_view(&http(), &cli.collector, GpuView::Queue, &a).await,
        Command::Memcpy(a) => gpu_view(&http(), &cli.collector, GpuView::Memcpy, &a).await,
        Command::Launches(a) => gpu_view(&http(), &cli.collector, GpuView::Launches, &a).await,
        Command::Overview(a) => {
            print!(
                "{}",
                rankscope_cli::query::views::overview(&http(), &cli.collector, &a).await?
            );
            Ok(())
        }
        Command::Annotations(a) => {
            let out = rankscope_cli::query::views::annotations(&http(), &cli.collector, &a).await?;
            print!("{out}");
            Ok(())
        }
        Command::Advice(a) => {
            print!(
                "{}",
                rankscope_cli::query::views::advice(&http(), &cli.collector, &a).await?
            );
            Ok(())
        }
        Command::Stragglers(a) => {
            view(
                &http(),
                &cli.collector,
                &a.job,
                View::Stragglers,
                &[],
                a.format,
            )
            .await
        }
    }
}

async fn import_cmd(
    a: ImportArgs,
    token: &str,
    tls: rankscope_proto::tls::TlsPaths,
    http: &HttpClient,
    collector: &str,
) -> Result<()> {
    use rankscope_cli::import::{self, remote, send, wait};
    // A path that cannot be expanded (a store that is down, an empty
    // prefix) is reported; the others are imported all the same.
    let (files, mut failed, span_notes) = remote::discover_all_noted(&a.paths).await;
    for n in &span_notes {
        eprintln!("note: {n}");
    }
    for e in &failed {
        eprintln!("error: {e}");
    }
    if files.is_empty() {
        bail!(
            "nothing to import ({} path(s) failed, see above)",
            failed.len()
        );
    }
    for f in &files {
        if let remote::TraceInput::Remote(r) = f {
            eprintln!("{} ({} bytes)", r.url, r.size);
        }
    }
    let mut opts = import::ImportOptions::new(a.job.clone());
    opts.run_id = a.run_id;
    opts.node = a.node;
    opts.rank_override = a.rank;
    opts.world_size_override = a.world_size;
    let send_opts = send::SendOptions {
        ingest_url: a.ingest,
        max_attempts: 20,
        parallel_files: a.parallel,
        parse_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        progress: true,
        token: token.to_owned(),
        tls: tls.any().then_some(tls),
    };
    let started = std::time::Instant::now();
    let results = send::import_and_send_each(files, &opts, &send_opts).await?;
    // A file that failed does not stop the others: each failure is
    // reported, and the command fails after the rest were imported.
    let mut reports = Vec::new();
    for r in results {
        match r {
            Ok(report) => reports.push(report),
            Err(e) => {
                eprintln!("error: {e}");
                failed.push(e.to_string());
            }
        }
    }
    let mut bytes = 0;
    for r in &reports {
        let st = &r.summary.stats;
        bytes += st.file_bytes;
        println!(
            "{}: rank {} of {}, {} events ({} rows stored, {} of {} batches already stored), {} bad events skipped",
            r.path.display(),
            r.summary.identity.rank,
            r.summary.identity.world_size,
            st.events_by_kind.total(),
            r.rows,
            r.duplicates,
            r.batches,
            st.skipped_bad_events,
        );
        for w in &st.warnings {
            println!("  warning: {w}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "imported {} file(s) into job {:?}: {:.1} MB in {secs:.2} s",
        reports.len(),
        a.job,
        bytes as f64 / 1e6
    );
    if !failed.is_empty() {
        // Without the failed ranks the job's steps may never finalize: no wait.
        bail!(
            "{} path(s) or file(s) not imported (the others were): {}",
            failed.len(),
            failed.join("; ")
        );
    }
    if a.wait_secs > 0 {
        let want: u64 = reports
            .iter()
            .map(|r| wait::rank_steps(&r.summary.stats))
            .sum();
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let done = wait::until_final(
            http,
            collector,
            &a.job,
            want,
            Duration::from_secs(a.wait_secs),
            bar,
        )
        .await?;
        println!(
            "analytics final: {done} (step, rank) breakdowns, {:.2} s after the start",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn gpu_view(http: &HttpClient, collector: &str, view: GpuView, a: &GpuArgs) -> Result<()> {
    print!("{}", gpu::show(http, collector, view, a).await?);
    Ok(())
}

async fn view(
    http: &HttpClient,
    collector: &str,
    job: &str,
    view: View,
    params: &[(&str, Option<u64>)],
    format: OutputFormat,
) -> Result<()> {
    let rows = analytics::fetch_view(http, collector, job, view, params).await?;
    print!("{}", columns::render(&rows, view.columns(), format));
    Ok(())
}

/// Polls the breakdown of `last_step` until all `ranks` are there: the
/// collector has then stored every step and finalized the analytics.
async fn wait_analysed(
    http: &HttpClient,
    collector: &str,
    job: &str,
    ranks: u32,
    last_step: u64,
    secs: u64,
) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let rows = analytics::fetch_view(
            http,
            collector,
            job,
            View::Breakdown,
            &[("step", Some(last_step))],
        )
        .await;
        match rows {
            Ok(rows) if rows.len() >= ranks as usize => return Ok(()),
            // Not there yet (404 until the first rows are stored).
            Ok(_) | Err(query::http::HttpError::Status { status: 404, .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if std::time::Instant::now() >= deadline {
            bail!("the collector at {collector} had not analysed step {last_step} of job {job:?} on all {ranks} ranks after {secs} s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn simulate_cmd(args: SimulateArgs) -> Result<(String, u32, u64)> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the system clock is before 1970")?;
    let cfg = SimConfig {
        // --job, else the scheduler's job (Slurm, torchrun, Kubernetes), else sim-<secs>.
        job: args.job.unwrap_or_else(|| {
            rankscope_proto::attribution::from_env(|k| std::env::var(k).ok(), None)
                .job_id
                .unwrap_or_else(|| format!("sim-{}", now.as_secs()))
        }),
        run_id: args.run_id,
        ranks: args.ranks,
        ranks_per_node: args.ranks_per_node,
        steps: args.steps,
        first_step: args.first_step,
        seed: args.seed,
        stragglers: args.straggler,
        start_ns: args
            .start_ns
            .unwrap_or_else(|| u64::try_from(now.as_nanos()).unwrap_or(u64::MAX)),
        layers: args.layers,
        jitter: args.jitter,
        rate_events_per_s: args.rate,
        realtime: args.realtime,
        events_per_message: args.events_per_message,
        placement: match &args.placement {
            Some(path) => simulate::placement::read(path).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
        node_clock_offsets: args.node_clock_offset,
        outside: args.outside,
    };
    let summary = simulate::run(&cfg, &args.agent).await?;
    print!("{}", summary.render(args.format));
    if summary.messages_rejected > 0 {
        bail!(
            "the agent rejected {} message(s); first: {}",
            summary.messages_rejected,
            summary.first_rejection.as_deref().unwrap_or("-")
        );
    }
    Ok((cfg.job, cfg.ranks, cfg.first_step + cfg.steps))
}

/// A closed stdout (`rankscope kernels ... | head`) ends the process
/// quietly, as it ends `cat` or `grep`: Rust ignores SIGPIPE, so every
/// `print!` would otherwise panic with "failed printing to stdout: Broken
/// pipe". `rankscope run` keeps Rust's setting: it execs the training
/// command, whose runtime sets its own (Python ignores SIGPIPE too).
fn quiet_on_closed_pipe() {
    // SAFETY: called once at start-up, before any thread exists; restoring
    // the default disposition of one signal has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn init_logging(verbose: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if verbose {
        "info,rankscope=debug,rankscope_cli=debug"
    } else {
        "warn"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No colour codes in a log file (the dev stack's collector.log, systemd's journal).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
