//! `rankscope-agent` binary: parses the configuration (defaults < file <
//! flags, flags also read `RANKSCOPE_AGENT_*` variables), starts the agent
//! and shuts it down gracefully on SIGINT / SIGTERM. `--check` prints what
//! this node can sample (NVML, GPUs, host metrics) and exits. `replay DIR`
//! sends a `--dump-dir` folder to the collector and exits.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use rankscope_agent::Config;

#[derive(Debug, Parser)]
#[command(name = "rankscope-agent", version, about = "rankscope per-node agent")]
struct Cli {
    /// TOML config file.
    #[arg(long, env = "RANKSCOPE_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// TCP address of the rank-facing gRPC service.
    #[arg(long, env = "RANKSCOPE_AGENT_LISTEN_ADDR")]
    listen_addr: Option<String>,
    /// TCP address of the /metrics endpoint ("" disables it).
    #[arg(long, env = "RANKSCOPE_AGENT_METRICS_LISTEN_ADDR")]
    metrics_listen_addr: Option<String>,
    /// Unix socket of the rank-facing gRPC service ("" disables it).
    #[arg(long, env = "RANKSCOPE_AGENT_UNIX_SOCKET")]
    unix_socket: Option<String>,
    /// gRPC URL of the collector.
    #[arg(long, env = "RANKSCOPE_AGENT_COLLECTOR_URL")]
    collector_url: Option<String>,
    /// Bearer token the collector requires.
    #[arg(long, env = "RANKSCOPE_TOKEN", hide_env_values = true)]
    collector_token: Option<String>,
    /// PEM CA that signed the collector's certificate (https:// collector).
    #[arg(long, env = "RANKSCOPE_TLS_CA_PATH")]
    tls_ca_path: Option<String>,
    /// PEM client certificate for mutual TLS.
    #[arg(long, env = "RANKSCOPE_TLS_CERT_PATH")]
    tls_cert_path: Option<String>,
    /// PEM private key of --tls-cert-path.
    #[arg(long, env = "RANKSCOPE_TLS_KEY_PATH")]
    tls_key_path: Option<String>,
    /// Stable id of this agent (default: host name).
    #[arg(long, env = "RANKSCOPE_AGENT_ID")]
    agent_id: Option<String>,
    /// NVML library to load (default: libnvidia-ml.so.1 from the loader's
    /// search path).
    #[arg(
        long = "nvml-library",
        value_name = "PATH",
        env = "RANKSCOPE_NVML_LIBRARY"
    )]
    nvml_library: Option<String>,
    /// Write every batch into this folder instead of sending it to the
    /// collector (the write is the acknowledgement); `replay DIR` sends it
    /// to a collector later.
    #[arg(long, value_name = "DIR", env = "RANKSCOPE_AGENT_DUMP_DIR")]
    dump_dir: Option<String>,
    /// Trace every job that appears on this node once, for ITERATIONS
    /// iterations, through the Kineto daemon endpoint (no collector needed).
    #[arg(long, value_name = "ITERATIONS")]
    trace_on_start: Option<u64>,
    /// Print what this node can sample (NVML and why not, GPUs, GPM, host
    /// metrics) and exit.
    #[arg(long)]
    check: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the default configuration as TOML.
    GenConfig,
    /// Send the batches of a dump_dir (or spool_dir) to the collector of
    /// the configuration, oldest first, and exit.
    Replay {
        /// The dump folder.
        dir: PathBuf,
    },
}

impl Cli {
    fn config(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(v) = &self.metrics_listen_addr {
            config.metrics_listen_addr.clone_from(v);
        }
        if let Some(v) = &self.listen_addr {
            config.listen_addr.clone_from(v);
        }
        if let Some(v) = &self.unix_socket {
            config.unix_socket_path.clone_from(v);
        }
        if let Some(v) = &self.collector_url {
            config.collector_url.clone_from(v);
        }
        if let Some(v) = &self.collector_token {
            config.collector_token.clone_from(v);
        }
        for (arg, slot) in [
            (&self.tls_ca_path, &mut config.tls_ca_path),
            (&self.tls_cert_path, &mut config.tls_cert_path),
            (&self.tls_key_path, &mut config.tls_key_path),
        ] {
            if let Some(v) = arg {
                slot.clone_from(v);
            }
        }
        if let Some(v) = &self.agent_id {
            config.agent_id.clone_from(v);
        }
        if let Some(v) = &self.nvml_library {
            config.nvml_library_path.clone_from(v);
        }
        if let Some(v) = &self.dump_dir {
            config.dump_dir.clone_from(v);
        }
        if let Some(v) = self.trace_on_start {
            config.trace_on_start_iterations = v;
        }
        config.validate()?;
        Ok(config)
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::GenConfig) = cli.command {
        print!("{}", Config::default().to_toml()?);
        return Ok(());
    }
    // The runtime's size is configuration: read it before building one.
    let config = cli.config()?;
    let threads = config.worker_threads;
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(run(cli, config))
}

async fn run(cli: Cli, config: Config) -> anyhow::Result<()> {
    // `--check` prints a report: only problems go to the log.
    let level = if cli.check { "warn" } else { "info" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .init();
    if let Some(Command::Replay { dir }) = &cli.command {
        let r = rankscope_agent::dump::replay(&config, dir)
            .await
            .with_context(|| format!("replaying {}", dir.display()))?;
        println!(
            "replayed {} batches ({} bytes, {} already stored) from {} to {}",
            r.batches,
            r.bytes,
            r.duplicates,
            dir.display(),
            config.collector_url
        );
        return Ok(());
    }
    if cli.check {
        print!("{}", rankscope_agent::sample::check::check(&config));
        match rankscope_agent::probe_tls(&config).await {
            Ok(true) => println!("collector TLS: ok ({})", config.collector_url),
            Ok(false) => println!("collector TLS: not used ({})", config.collector_url),
            Err(e) => println!("collector TLS: FAILED: {e}"),
        }
        return Ok(());
    }
    let agent = rankscope_agent::start(config)
        .await
        .context("starting the agent")?;
    wait_for_signal().await?;
    tracing::info!("signal received, shutting down");
    let report = agent.shutdown().await;
    if report.undelivered_events > 0 {
        anyhow::bail!(
            "{} events in {} batches were not delivered to the collector",
            report.undelivered_events,
            report.undelivered_batches
        );
    }
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
