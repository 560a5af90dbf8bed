//! Helpers of the routing tests: collectors as processes (killed with
//! SIGKILL) or in this process, node agents, the jobs' stored results.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rankscope_cli::simulate::{run_nodes, SimConfig, Straggler};

/// A collector process, killed when dropped (a failing test leaves no orphan).
pub struct CollectorProc {
    pub child: Child,
    pub grpc: u16,
    pub config: PathBuf,
}

impl Drop for CollectorProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CollectorProc {
    /// `ip:port` of its gRPC listener: its name in the agents' rendezvous order.
    pub fn key(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }

    /// Writes the config of a collector on free ports over `database`.
    pub fn configure(dir: &Path, name: &str, clickhouse_url: &str, database: &str) -> Self {
        let grpc = rankscope_testkit::free_port();
        let http = rankscope_testkit::free_port();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "grpc_listen_addr = \"127.0.0.1:{grpc}\"\nhttp_listen_addr = \"127.0.0.1:{http}\"\n\
                 [clickhouse]\nurl = \"{clickhouse_url}\"\ndatabase = \"{database}\"\n\
                 [writer]\nflush_interval_ms = 50\n[ownership]\nrefresh_interval_ms = 300\n"
            ),
        )
        .expect("collector config");
        let child = spawn_collector(&config, grpc, &dir.join(format!("{name}.log")));
        Self {
            child,
            grpc,
            config,
        }
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// Starts it again on the same ports and database.
    pub fn restart(&mut self, log: &Path) {
        self.child = spawn_collector(&self.config, self.grpc, log);
    }
}

fn spawn_collector(config: &Path, port: u16, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    let mut child = Command::new(rankscope_testkit::bin_path("rankscope-collector"))
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "rankscope_collector=info")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("collector starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the collector exited: {status}");
        }
        assert!(Instant::now() < deadline, "the collector never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The agent of simulated node `n`, sending to `collector_url` (a list).
pub async fn node_agent(n: u32, collector_url: &str, dir: &Path) -> rankscope_agent::AgentHandle {
    let mut cfg = super::common::agent_config(collector_url, dir);
    cfg.agent_id = format!("route-agent-{n}");
    cfg.node = format!("sim-node-{n}");
    cfg.unix_socket_path = dir
        .join(format!("agent-{n}.sock"))
        .to_string_lossy()
        .into_owned();
    cfg.collector_resolve_interval_ms = 200;
    cfg.collector_failover_after_ms = 1_000;
    // The product default: a killed collector's calls fail at once
    // (connection refused or reset), so this does not slow the failover;
    // a shorter one makes a live collector that is slow under load (a
    // take-over rebuilding a job's state on a busy machine) look down, and
    // the job moves a second time.
    cfg.request_timeout_ms = 30_000;
    rankscope_agent::start(cfg).await.expect("agent starts")
}

/// The agents' rank URLs.
pub fn agent_urls(agents: &[rankscope_agent::AgentHandle]) -> Vec<String> {
    agents
        .iter()
        .map(|a| format!("http://{}", a.tcp_addr))
        .collect()
}

/// A 4-node job of 8 ranks per node with a planted straggler (rank 13).
pub fn job(id: &str, steps: u64, start_ns: u64) -> SimConfig {
    SimConfig {
        job: id.into(),
        ranks: 32,
        ranks_per_node: 8,
        steps,
        layers: 3,
        seed: 42,
        start_ns,
        stragglers: vec![Straggler {
            rank: 13,
            factor: 1.3,
        }],
        ..Default::default()
    }
}

/// The first `prefix-N` job id whose owner over `collectors` passes `want`.
pub fn job_id_owned(prefix: &str, collectors: &[String], want: impl Fn(&str) -> bool) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|j| {
            let order =
                rankscope_agent::route::rendezvous_order(j, collectors.iter().map(String::as_str));
            want(order[0])
        })
        .expect("a job id with that owner")
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One query's TSV answer.
pub fn query(ch: &rankscope_testkit::ClickHouse, sql: &str) -> String {
    ch.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub fn count(ch: &rankscope_testkit::ClickHouse, sql: &str) -> u64 {
    ch.query(sql)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The job's per-(step, rank) breakdowns, every computed column.
pub fn breakdowns(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> String {
    query(
        ch,
        &format!(
            "SELECT step, rank, node, step_start_ns, step_time_ns, gpu_span_ns, gpu_busy_ns, \
             idle_ns, compute_ns, comm_ns, memory_ns, overlap_ns, exposed_comm_ns, \
             non_compute_ns, dataloader_ns, comm_wait_ns, comm_transfer_ns, gpu_events \
             FROM {db}.step_breakdown FINAL WHERE job_id = '{job}' ORDER BY step, rank"
        ),
    )
}

pub fn verdicts(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> String {
    query(
        ch,
        &format!(
            "SELECT rank, node, first_step, last_step, steps_flagged, slowdown, score, cause, \
             active FROM {db}.straggler_verdicts FINAL WHERE job_id = '{job}' \
             ORDER BY rank, first_step"
        ),
    )
}

/// The collectors that took `job` (`job_owners`), in the order they did.
pub fn owners(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> Vec<String> {
    query(
        ch,
        &format!(
            "SELECT collector FROM {db}.job_owners WHERE job_id = '{job}' \
             GROUP BY collector ORDER BY max(since_ns)"
        ),
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Stored events of `job` over the four event tables, and their distinct
/// keys (equal only if nothing was stored twice).
pub fn events(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> (u64, u64) {
    let n = |t: &str| {
        count(
            ch,
            &format!("SELECT count() FROM {db}.{t} WHERE job_id = '{job}'"),
        )
    };
    let d = |t: &str, key: &str| {
        count(
            ch,
            &format!(
                "SELECT count() FROM (SELECT DISTINCT {key} FROM {db}.{t} WHERE job_id = '{job}')"
            ),
        )
    };
    (
        n("steps") + n("spans") + n("collectives") + n("kernels"),
        d("steps", "rank, step, kind")
            + d("spans", "rank, category, name, start_ns, end_ns")
            + d("collectives", "rank, process_group, seq")
            + d("kernels", "rank, kind, name, stream, start_ns, end_ns"),
    )
}

/// An agent's `/metrics` or `/status` text.
pub async fn agent_http(agent: &rankscope_agent::AgentHandle, path: &str) -> String {
    let addr = agent.metrics_addr.expect("metrics endpoint");
    let (status, body) = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(10))
        .get(&format!("http://{addr}{path}"))
        .await
        .expect("GET");
    assert!(status.is_success(), "{path}: {status}");
    String::from_utf8(body.to_vec()).expect("UTF-8")
}

/// The owner line every agent must show for `job`.
pub fn owner_line(job: &str, collector: &str) -> String {
    format!("rankscope_agent_job_owner{{job=\"{job}\",collector=\"{collector}\"}} 1")
}

pub async fn in_process_collector(
    ch: &rankscope_testkit::ClickHouse,
    db: &str,
) -> rankscope_collector::Collector {
    let mut cfg = super::common::collector_config(&ch.http_url, db);
    cfg.ownership.refresh_interval_ms = 300;
    rankscope_collector::start(cfg)
        .await
        .expect("collector starts")
}

pub async fn agents_for(
    collector_url: &str,
    dir: &std::path::Path,
) -> Vec<rankscope_agent::AgentHandle> {
    let mut v = Vec::new();
    for n in 0..4 {
        v.push(node_agent(n, collector_url, dir).await);
    }
    v
}

pub async fn run_job(
    sim: &rankscope_cli::simulate::SimConfig,
    agents: &[rankscope_agent::AgentHandle],
) {
    let urls = agent_urls(agents);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let sent = run_nodes(sim, &urls).await.expect("simulate");
    assert_eq!(sent.dropped, 0, "the agents accepted every event");
}

pub fn breakdown_rows(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> u64 {
    count(
        ch,
        &format!("SELECT count() FROM {db}.step_breakdown FINAL WHERE job_id = '{job}'"),
    )
}

/// An agent binary with a spool, sending to `collector_url`; its log.
pub fn agent_proc(
    dir: &std::path::Path,
    name: &str,
    collector_url: &str,
) -> (std::process::Child, u16, u16, std::path::PathBuf) {
    let (rank_port, metrics_port) = (
        rankscope_testkit::free_port(),
        rankscope_testkit::free_port(),
    );
    let config = dir.join(format!("{name}.toml"));
    let spool = dir.join(format!("{name}-spool"));
    std::fs::write(
        &config,
        format!(
            "listen_addr = \"127.0.0.1:{rank_port}\"\nmetrics_listen_addr = \"127.0.0.1:{metrics_port}\"\n\
             unix_socket_path = \"{}\"\ncollector_url = \"{collector_url}\"\nagent_id = \"{name}\"\n\
             spool_dir = \"{}\"\nkineto_daemon_name = \"\"\ncollector_resolve_interval_ms = 200\n\
             batch_max_delay_ms = 20\ngpu_sample_interval_ms = 0\n",
            dir.join(format!("{name}.sock")).display(),
            spool.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = std::process::Command::new(rankscope_testkit::bin_path("rankscope-agent"))
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "rankscope_agent=info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("agent starts");
    (child, rank_port, metrics_port, spool)
}

pub async fn get_text(url: &str) -> String {
    let (status, body) = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(10))
        .get(url)
        .await
        .expect("GET");
    assert!(status.is_success(), "{url}: {status}");
    String::from_utf8(body.to_vec()).unwrap()
}
