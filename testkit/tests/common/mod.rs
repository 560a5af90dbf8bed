//! Shared fixture of the end-to-end tests: a private ClickHouse, a collector
//! and an agent on free ports, plus helpers to read back what was stored.
#![allow(dead_code)]

pub mod kineto_client;
pub mod proxy;

use std::time::{Duration, Instant};

use rankscope_proto::v1 as proto;
use rankscope_testkit::ClickHouse;

/// One test at a time, across modules: tests that start several training
/// processes on a 2-core machine, or serve libkineto's fixed `@dynolog` name.
/// `make test` runs each module in its own process anyway; this keeps them
/// apart when the whole e2e binary runs in one (a panicking holder releases
/// it: tokio's mutex does not poison).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts an agent with `cfg` that serves libkineto's fixed `@dynolog` name
/// (`cfg.kineto_daemon_name`), retrying for 10 s while another test process's
/// agent frees the name as its runtime winds down.
pub async fn start_dynolog_agent(cfg: rankscope_agent::Config) -> rankscope_agent::AgentHandle {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = rankscope_agent::start(cfg.clone()).await.expect("agent");
        if a.kineto_listening() {
            return a;
        }
        a.shutdown().await;
        assert!(
            Instant::now() < deadline,
            "the agent could not serve @{}: is a dynolog or another rankscope agent (make up) running?",
            cfg.kineto_daemon_name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A process group (torchrun and its workers), killed as a whole when
/// dropped: a failing test leaves no worker polling `@dynolog`.
pub struct Group(pub std::process::Child);

impl Group {
    pub fn spawn(cmd: &mut std::process::Command) -> Self {
        use std::os::unix::process::CommandExt;
        Self(cmd.process_group(0).spawn().expect("spawn"))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // torchrun starts its workers in sessions of their own: kill every
        // descendant by pid, then the group.
        for pid in descendants(self.0.id()) {
            // SAFETY: kill(2) on a descendant of our own child.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        // SAFETY: kill(2) on our own child's process group.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// Every process below `root` (from /proc/<pid>/stat's parent pid).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...; comm may hold spaces: split after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse().ok());
            if let Some(ppid) = ppid {
                parent.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, _) in parent.iter().filter(|(_, pp)| *pp == p) {
            out.push(*child);
            frontier.push(*child);
        }
    }
    out
}

/// Row counts of the event tables for one job.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub steps: u64,
    pub spans: u64,
    pub collectives: u64,
    pub kernels: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.steps + self.spans + self.collectives + self.kernels
    }
}

pub struct Stack {
    pub clickhouse: ClickHouse,
    pub database: String,
    pub collector: Option<rankscope_collector::Collector>,
    pub collector_cfg: rankscope_collector::Config,
    pub agent: Option<rankscope_agent::AgentHandle>,
    pub dir: tempfile::TempDir,
}

pub fn collector_config(clickhouse_url: &str, database: &str) -> rankscope_collector::Config {
    let mut cfg = rankscope_collector::Config {
        grpc_listen_addr: "127.0.0.1:0".into(),
        http_listen_addr: "127.0.0.1:0".into(),
        ..Default::default()
    };
    cfg.clickhouse.url = clickhouse_url.to_owned();
    cfg.clickhouse.database = database.to_owned();
    // Small flush interval keeps the tests quick; the batching logic is the same.
    cfg.writer.flush_interval_ms = 50;
    cfg
}

pub fn agent_config(collector_url: &str, dir: &std::path::Path) -> rankscope_agent::Config {
    rankscope_agent::Config {
        listen_addr: "127.0.0.1:0".into(),
        metrics_listen_addr: "127.0.0.1:0".into(),
        unix_socket_path: dir.join("agent.sock").to_string_lossy().into_owned(),
        collector_url: collector_url.to_owned(),
        agent_id: "e2e-agent".into(),
        node: "e2e-node".into(),
        batch_max_delay_ms: 20,
        retry_initial_ms: 10,
        retry_max_ms: 200,
        // libkineto's socket name is machine-wide (per network namespace):
        // only the tests about it (traces.rs, kineto_daemon.rs) serve it.
        kineto_daemon_name: String::new(),
        ..Default::default()
    }
}

pub fn sim_config(job: &str, ranks: u32, steps: u64) -> rankscope_cli::simulate::SimConfig {
    rankscope_cli::simulate::SimConfig {
        job: job.to_owned(),
        ranks,
        steps,
        seed: 7,
        ..Default::default()
    }
}

impl Stack {
    /// How the import tests send a trace import into this stack: the
    /// collector's gRPC ingest, no token, no TLS, 8 files at a time on two
    /// parse threads (this machine's cores), 5 attempts per batch.
    pub fn send_options(&self) -> rankscope_cli::import::send::SendOptions {
        rankscope_cli::import::send::SendOptions {
            ingest_url: format!("http://{}", self.grpc_addr()),
            max_attempts: 5,
            parallel_files: 8,
            parse_threads: 2,
            progress: false,
            token: String::new(),
            tls: None,
        }
    }
}

impl Stack {
    pub async fn start() -> Self {
        let mut s = Self::start_without_agent().await;
        s.start_agent(&format!("http://{}", s.grpc_addr())).await;
        s
    }

    /// A full stack whose collector config `tweak` adjusts.
    pub async fn start_with(tweak: impl FnOnce(&mut rankscope_collector::Config)) -> Self {
        let mut s = Self::start_without_agent_with(tweak).await;
        s.start_agent(&format!("http://{}", s.grpc_addr())).await;
        s
    }

    pub async fn start_without_agent() -> Self {
        Self::start_without_agent_with(|_| {}).await
    }

    pub async fn start_without_agent_with(
        tweak: impl FnOnce(&mut rankscope_collector::Config),
    ) -> Self {
        let clickhouse = ClickHouse::start().expect("ClickHouse");
        Self::start_without_agent_on(clickhouse, tweak).await
    }

    /// A full stack over the given server (e.g. [`ClickHouse::start_chdb`]).
    pub async fn start_on(clickhouse: ClickHouse) -> Self {
        let mut s = Self::start_without_agent_on(clickhouse, |_| {}).await;
        s.start_agent(&format!("http://{}", s.grpc_addr())).await;
        s
    }

    pub async fn start_without_agent_on(
        clickhouse: ClickHouse,
        tweak: impl FnOnce(&mut rankscope_collector::Config),
    ) -> Self {
        let database = clickhouse.fresh_database("e2e").expect("database");
        let mut collector_cfg = collector_config(&clickhouse.http_url, &database);
        tweak(&mut collector_cfg);
        let collector = rankscope_collector::start(collector_cfg.clone())
            .await
            .expect("collector starts");
        Self {
            clickhouse,
            database,
            collector: Some(collector),
            collector_cfg,
            agent: None,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub async fn start_agent(&mut self, collector_url: &str) {
        let cfg = agent_config(collector_url, self.dir.path());
        self.agent = Some(rankscope_agent::start(cfg).await.expect("agent starts"));
    }

    pub fn grpc_addr(&self) -> std::net::SocketAddr {
        self.collector.as_ref().expect("collector").grpc_addr
    }

    pub fn http_addr(&self) -> std::net::SocketAddr {
        self.collector.as_ref().expect("collector").http_addr
    }

    pub fn agent_url(&self) -> String {
        format!("http://{}", self.agent.as_ref().expect("agent").tcp_addr)
    }

    /// Stops the agent, which flushes and delivers everything it holds.
    pub async fn stop_agent(&mut self) -> rankscope_agent::ShutdownReport {
        self.agent.take().expect("agent").shutdown().await
    }

    pub async fn restart_collector(&mut self) {
        if let Some(c) = self.collector.take() {
            c.shutdown().await;
        }
        self.collector = Some(
            rankscope_collector::start(self.collector_cfg.clone())
                .await
                .expect("collector restarts"),
        );
    }

    pub async fn stop(mut self) {
        if let Some(a) = self.agent.take() {
            a.shutdown().await;
        }
        if let Some(c) = self.collector.take() {
            c.shutdown().await;
        }
    }

    /// Sends one batch straight to the collector's gRPC service.
    pub async fn ingest(
        &self,
        batch: proto::AgentBatch,
    ) -> Result<proto::IngestAck, tonic::Status> {
        let mut client = proto::collector_ingest_client::CollectorIngestClient::connect(format!(
            "http://{}",
            self.grpc_addr()
        ))
        .await
        .expect("connect to collector")
        .max_encoding_message_size(usize::MAX);
        client.ingest(batch).await.map(|r| r.into_inner())
    }

    fn scalar(&self, sql: &str) -> u64 {
        let out = self.clickhouse.query(sql).expect("query");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a number from {sql:?}: {out:?}"))
    }

    pub async fn counts(&self, job: &str) -> Counts {
        let db = &self.database;
        let n = |t: &str| {
            self.scalar(&format!(
                "SELECT count() FROM {db}.{t} WHERE job_id = '{job}'"
            ))
        };
        Counts {
            steps: n("steps"),
            spans: n("spans"),
            collectives: n("collectives"),
            kernels: n("kernels"),
        }
    }

    /// Rows of `job` in `table` now, 0 when ClickHouse cannot answer (for
    /// polling while a fault is injected).
    #[allow(dead_code)] // not every test module polls
    pub fn rows_now(&self, table: &str, job: &str) -> u64 {
        self.clickhouse
            .query(&format!(
                "SELECT count() FROM {}.{table} WHERE job_id = '{job}'",
                self.database
            ))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Event rows of `job` over the four event tables now (see [`Self::rows_now`]).
    #[allow(dead_code)]
    pub fn events_now(&self, job: &str) -> u64 {
        ["steps", "spans", "collectives", "kernels"]
            .iter()
            .map(|t| self.rows_now(t, job))
            .sum()
    }

    /// Waits until every event of the simulated job `sim` is stored: live
    /// analytics (and so the analytics routes) may answer before the raw
    /// events' flush commits.
    pub async fn all_stored(&self, sim: &rankscope_cli::simulate::SimConfig) {
        let want = rankscope_cli::simulate::plan(sim).event_counts().total();
        eventually(
            60,
            &format!("all {want} events of {} stored", sim.job),
            || self.events_now(&sim.job) == want,
        )
        .await;
    }

    /// Distinct (rank, kind, time) keys over all event tables: equals the row
    /// count only if nothing was stored twice.
    pub async fn distinct_event_keys(&self, job: &str) -> u64 {
        let db = &self.database;
        let q = |t: &str, key: &str| {
            self.scalar(&format!(
                "SELECT count() FROM (SELECT DISTINCT {key} FROM {db}.{t} WHERE job_id = '{job}')"
            ))
        };
        q("steps", "rank, step, kind")
            + q("spans", "rank, category, name, start_ns, end_ns")
            + q("collectives", "rank, process_group, seq")
            + q("kernels", "rank, kind, name, stream, start_ns, end_ns")
    }

    pub async fn api_get(&self, path: &str) -> serde_json::Value {
        let url = format!("http://{}{}", self.http_addr(), path);
        let body = rankscope_cli::query::get_json(&url).await.expect("API GET");
        body
    }

    /// Polls `path` until `cond` holds on its `field` array (analytics are
    /// written asynchronously after the events are stored).
    pub async fn api_poll(
        &self,
        path: &str,
        field: &str,
        cond: impl Fn(&Vec<serde_json::Value>) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let url = format!("http://{}{}", self.http_addr(), path);
            let body: Result<serde_json::Value, _> = rankscope_cli::query::get_json(&url).await;
            if let Ok(v) = body {
                if let Some(rows) = v[field].as_array() {
                    if cond(rows) {
                        return rows.clone();
                    }
                }
            }
            assert!(Instant::now() < deadline, "timed out polling {path}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls the job's `/progress` until `rank_steps` (step, rank)
    /// breakdowns are final.
    pub async fn analytics_final(&self, job: &str, rank_steps: u64) {
        let url = format!("http://{}/api/v1/jobs/{job}/progress", self.http_addr());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v: Result<serde_json::Value, _> = rankscope_cli::query::get_json(&url).await;
            let n = v.ok().and_then(|v| v["rank_steps_final"].as_u64());
            if n >= Some(rank_steps) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{job}: {n:?} of {rank_steps} (step, rank) breakdowns final after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// (step, rank, start_ns, end_ns) rows of the steps route.
    pub async fn api_steps(&self, job: &str, query: &str) -> Vec<(u64, u32, u64, u64)> {
        let v = self
            .api_get(&format!("/api/v1/jobs/{job}/steps{query}"))
            .await;
        v["steps"]
            .as_array()
            .expect("steps array")
            .iter()
            .map(|s| {
                assert_eq!(
                    s["step_time_ns"].as_u64().unwrap(),
                    s["end_ns"].as_u64().unwrap() - s["start_ns"].as_u64().unwrap()
                );
                (
                    s["step"].as_u64().unwrap(),
                    s["rank"].as_u64().unwrap() as u32,
                    s["start_ns"].as_u64().unwrap(),
                    s["end_ns"].as_u64().unwrap(),
                )
            })
            .collect()
    }
}

/// Every name of the simulator's catalog (ids are dense from 1).
pub fn all_sim_names() -> Vec<rankscope_proto::v1::InternedName> {
    (1..)
        .map_while(|id| {
            rankscope_cli::simulate::model::name_text(id).map(|n| {
                rankscope_proto::v1::InternedName {
                    id,
                    name: n.to_string(),
                }
            })
        })
        .collect()
}

/// Polls `cond` until it holds or `secs` pass (then panics with `what`).
pub async fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `ddp_train.py --progress PATH` (rank 0's finished steps)
/// says `steps`: the job is training, past its start-up (a trace asked for
/// earlier may cover only rendezvous and DDP's set-up on a loaded machine).
#[allow(dead_code)]
pub async fn wait_progress(path: &std::path::Path, steps: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        if done >= Some(steps) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {done:?} steps after 120 s (want {steps})",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One rank group with a step, a kernel and a collective: 4 event rows.
pub fn small_batch(job: &str, seq: u64) -> proto::AgentBatch {
    use proto::event::Kind;
    // Recent times: the collector drops partitions older than its retention.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let t = (now - now % 3600) * 1_000_000_000 + seq * 1_000_000;
    let ev = |k| proto::Event { kind: Some(k) };
    proto::AgentBatch {
        agent_id: "test-agent".into(),
        agent_session: 77,
        seq,
        node: "node-1".into(),
        sent_at_ns: t,
        ranks: vec![proto::RankEvents {
            identity: Some(proto::RankIdentity {
                job_id: job.into(),
                rank: 1,
                world_size: 2,
                local_rank: 1,
                node: "node-1".into(),
                pid: 4242,
                ..Default::default()
            }),
            names: vec![
                proto::InternedName {
                    id: 1,
                    name: "ampere_sgemm_128x64_tn".into(),
                },
                proto::InternedName {
                    id: 2,
                    name: "default_pg".into(),
                },
            ],
            events: vec![
                ev(Kind::StepBegin(proto::StepBegin {
                    step: seq,
                    ts_ns: t,
                })),
                ev(Kind::Kernel(proto::Kernel {
                    kind: proto::KernelKind::Kernel as i32,
                    name_id: 1,
                    stream: 7,
                    start_ns: t + 10,
                    end_ns: t + 500,
                    ..Default::default()
                })),
                ev(Kind::Collective(proto::Collective {
                    op: proto::CollectiveOp::AllReduce as i32,
                    process_group_id: 2,
                    group_size: 2,
                    dtype: proto::DataType::Float32 as i32,
                    count: 256,
                    bytes: 1024,
                    seq,
                    stream: 9,
                    start_ns: t + 500,
                    end_ns: t + 900,
                    ..Default::default()
                })),
                ev(Kind::StepEnd(proto::StepEnd {
                    step: seq,
                    ts_ns: t + 1000,
                })),
            ],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Runs the documented certificate script into `dir`.
pub fn gen_certs(dir: &std::path::Path, agents: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tls/gen-certs.sh");
    let mut cmd = std::process::Command::new(script);
    cmd.arg(dir);
    for a in agents {
        cmd.args(["--agent", a]);
    }
    let out = cmd.output().expect("run gen-certs.sh (needs openssl)");
    assert!(
        out.status.success(),
        "gen-certs.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
