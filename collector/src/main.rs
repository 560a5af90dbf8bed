//! `rankscope-collector`: parses configuration (defaults < file < flags /
//! env), starts the collector and runs until SIGINT or SIGTERM.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use rankscope_collector::Config;

/// Stores every rank's events in ClickHouse and serves the query API.
#[derive(Debug, Parser)]
#[command(name = "rankscope-collector", version)]
struct Args {
    /// TOML configuration file.
    #[arg(long, env = "RANKSCOPE_COLLECTOR_CONFIG")]
    config: Option<String>,
    /// Address of the agent-facing gRPC service.
    #[arg(long, env = "RANKSCOPE_GRPC_LISTEN_ADDR")]
    grpc_listen_addr: Option<String>,
    /// Address of the HTTP API.
    #[arg(long, env = "RANKSCOPE_HTTP_LISTEN_ADDR")]
    http_listen_addr: Option<String>,
    /// ClickHouse HTTP URL.
    #[arg(long, env = "RANKSCOPE_CLICKHOUSE_URL")]
    clickhouse_url: Option<String>,
    /// ClickHouse database.
    #[arg(long, env = "RANKSCOPE_CLICKHOUSE_DATABASE")]
    clickhouse_database: Option<String>,
    /// ClickHouse cluster to create sharded, replicated tables on (empty: one server).
    #[arg(long, env = "RANKSCOPE_CLICKHOUSE_CLUSTER")]
    clickhouse_cluster: Option<String>,
    /// Days of data kept (0 = forever).
    #[arg(long, env = "RANKSCOPE_RETENTION_DAYS")]
    retention_days: Option<u32>,
    /// Default alert webhook (JSON POST of every alert transition).
    #[arg(long, env = "RANKSCOPE_ALERT_WEBHOOK_URL")]
    alert_webhook_url: Option<String>,
    /// Bearer token agents and API clients must present.
    #[arg(long, env = "RANKSCOPE_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// PEM certificate chain served on both listeners.
    #[arg(long, env = "RANKSCOPE_TLS_CERT_PATH")]
    tls_cert_path: Option<String>,
    /// PEM private key of --tls-cert-path.
    #[arg(long, env = "RANKSCOPE_TLS_KEY_PATH")]
    tls_key_path: Option<String>,
    /// PEM CA agents' client certificates must be signed by (mutual TLS).
    #[arg(long, env = "RANKSCOPE_TLS_CA_PATH")]
    tls_ca_path: Option<String>,
    /// Serve plaintext on a non-loopback address.
    #[arg(long, env = "RANKSCOPE_ALLOW_INSECURE")]
    allow_insecure: bool,
    /// OTLP/gRPC endpoint to export metrics to, e.g. http://otel-collector:4317.
    #[arg(long, env = "RANKSCOPE_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the default configuration as TOML and exit.
    GenConfig,
}

fn config(args: &Args) -> anyhow::Result<Config> {
    let mut cfg = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(v) = &args.grpc_listen_addr {
        cfg.grpc_listen_addr = v.clone();
    }
    if let Some(v) = &args.http_listen_addr {
        cfg.http_listen_addr = v.clone();
    }
    if let Some(v) = &args.clickhouse_url {
        cfg.clickhouse.url = v.clone();
    }
    if let Some(v) = &args.clickhouse_database {
        cfg.clickhouse.database = v.clone();
    }
    if let Some(v) = &args.clickhouse_cluster {
        cfg.clickhouse_cluster = v.clone();
    }
    if let Some(v) = args.retention_days {
        cfg.retention_days = v;
    }
    if let Some(v) = &args.alert_webhook_url {
        cfg.alerts.webhook_url = v.clone();
    }
    if let Some(v) = &args.auth_token {
        cfg.auth_token = v.clone();
    }
    for (arg, slot) in [
        (&args.tls_cert_path, &mut cfg.tls_cert_path),
        (&args.tls_key_path, &mut cfg.tls_key_path),
        (&args.tls_ca_path, &mut cfg.tls_ca_path),
    ] {
        if let Some(v) = arg {
            slot.clone_from(v);
        }
    }
    if args.allow_insecure {
        cfg.allow_insecure = true;
    }
    if let Some(v) = &args.otlp_endpoint {
        cfg.otlp_endpoint = v.clone();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn main() -> anyhow::Result<()> {
    tune_malloc();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

/// glibc's malloc set for the collector's large, short-lived buffers, before
/// any thread starts; a `MALLOC_*` variable in the environment wins.
///
/// Every INSERT's body is compressed into a fresh zeroed buffer sized for the
/// worst case (the clickhouse crate), and the writer's column buffers and the
/// API's row reads come and go by the megabyte: with glibc's defaults many of
/// them are mmapped or trimmed back to the kernel after use and their pages
/// faulted in and zeroed again the next time. Allocating below 32 MiB from
/// the heap (glibc's ceiling for this threshold), keeping up to 64 MiB of
/// freed memory, and two arenas: minor faults of the bench's end-to-end run
/// 92,000-122,000 -> 55,000-80,000, collector CPU per event 2-6 % lower, peak
/// RSS 5-10 MiB higher (bench/RESULTS-alternations.md, 2026-11-28).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (var, param, value) in [
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 32 << 20),
        ("MALLOC_TRIM_THRESHOLD_", libc::M_TRIM_THRESHOLD, 64 << 20),
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 2),
    ] {
        if std::env::var_os(var).is_none() {
            // SAFETY: mallopt only changes allocator parameters; it is
            // called before any other thread exists.
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::GenConfig) = args.command {
        print!("{}", Config::default().to_toml());
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(std::env::var("RUST_LOG").ok()))
        .with_writer(std::io::stderr)
        // No colour codes in a log file (the dev stack's collector.log, systemd's journal).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = config(&args)?;
    let collector = rankscope_collector::start(cfg)
        .await
        .context("starting the collector")?;
    shutdown_signal().await?;
    tracing::info!("shutting down");
    collector.shutdown().await;
    Ok(())
}

/// `RUST_LOG` (else `info`) with the clickhouse crate's spans at `warn`
/// unless it names them: the crate enters an info span for every row a
/// cursor yields, and enabled that was ~13 % of the collector's CPU reading
/// a job's 8 M rows for the overview (perf). An invalid filter is `info`.
fn log_filter(rust_log: Option<String>) -> tracing_subscriber::EnvFilter {
    let text = rust_log.unwrap_or_else(|| "info".into());
    let text = if text.contains("clickhouse") {
        text
    } else {
        format!("{text},clickhouse=warn")
    };
    tracing_subscriber::EnvFilter::try_new(text)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,clickhouse=warn"))
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn clickhouse_spans_are_off_unless_rust_log_names_them() {
        for given in [
            None,
            Some("info"),
            Some("debug,tower=warn"),
            Some("not a=filter="),
        ] {
            let f = log_filter(given.map(str::to_owned)).to_string();
            assert!(f.contains("clickhouse=warn"), "{given:?} -> {f}");
        }
        let f = log_filter(Some("info,clickhouse=debug".into())).to_string();
        assert!(!f.contains("clickhouse=warn"), "{f}");
        assert!(f.contains("clickhouse=debug"), "{f}");
    }
}
