//! Cluster mode end to end: the same multi-job workload goes through a collector on a
//! single ClickHouse server and through one with `clickhouse_cluster` on a private
//! 2-shard cluster (real ClickHouse servers over a real ZooKeeper); every query route
//! answers the same, each job's rows live on one shard and both shards hold rows, a
//! second collector on the other server shares the schema history and the duplicate
//! detection, a database made for the other mode is refused, and retention drops
//! expired partitions on every shard.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

use common::{all_sim_names, collector_config, eventually};
use rankscope_cli::simulate::{self, SimConfig, Straggler};
use rankscope_collector::store::{Store, Table};
use rankscope_collector::{Collector, Config};
use rankscope_proto::v1 as proto;
use rankscope_testkit::{ClickHouse, ClickHouseCluster};

const CLUSTER: &str = "rankscope_e2e";
const DB: &str = "rankscope";
const RANKS: u32 = 4;
const RANKS_PER_NODE: u32 = 2;
const STEPS: u64 = 8;
const DAY_NS: u64 = 86_400 * 1_000_000_000;
/// Recent jobs (GPU samples, a straggler) and jobs 20 days old (for retention).
const RECENT: &[&str] = &["job-a", "job-b", "job-f"];
const OLD: &[&str] = &["job-c", "job-d"];
/// Keys whose values are wall-clock times of the collector, not of the workload.
const VOLATILE: &[&str] = &[
    "first_seen_ns",
    "last_seen_ns",
    "updated_ns",
    "started_at_ns",
    "resolved_at_ns",
];

fn now_ns() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    d.as_secs() * 1_000_000_000
}

fn node(job: &str, rank: u32) -> String {
    format!("{job}-node{}", rank / RANKS_PER_NODE)
}

/// The workload: one round per step, one batch per (job, node) in each round.
fn workload(now_ns: u64) -> Vec<Vec<proto::AgentBatch>> {
    let names = all_sim_names();
    let mut rounds: Vec<Vec<proto::AgentBatch>> = vec![Vec::new(); STEPS as usize];
    let jobs = RECENT
        .iter()
        .map(|j| (j, true))
        .chain(OLD.iter().map(|j| (j, false)));
    for (session, (job, recent)) in jobs.enumerate() {
        let cfg = SimConfig {
            job: job.to_string(),
            ranks: RANKS,
            ranks_per_node: RANKS_PER_NODE,
            steps: STEPS,
            layers: 1,
            seed: 11 + session as u64,
            start_ns: if recent {
                now_ns - 120_000_000_000
            } else {
                now_ns - 20 * DAY_NS
            },
            stragglers: if *job == "job-b" {
                vec![Straggler {
                    rank: 2,
                    factor: 1.4,
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        for step in simulate::plan_iter(&cfg) {
            for n in 0..RANKS / RANKS_PER_NODE {
                let on_node: Vec<_> = step
                    .ranks
                    .iter()
                    .filter(|r| r.rank / RANKS_PER_NODE == n)
                    .collect();
                let node = node(job, n * RANKS_PER_NODE);
                let ranks = on_node
                    .iter()
                    .map(|r| proto::RankEvents {
                        identity: Some(proto::RankIdentity {
                            node: node.clone(),
                            ..simulate::model::identity(&cfg, r.rank)
                        }),
                        names: names.clone(),
                        events: r.events.clone(),
                        ..Default::default()
                    })
                    .collect();
                // GPU telemetry of recent jobs: one sample per rank's GPU per step, the
                // straggler's GPU at a lower SM clock.
                let gpu_samples = if recent {
                    on_node
                        .iter()
                        .map(|r| gpu_sample(job, &node, r.rank, r.start_ns, r.end_ns))
                        .collect()
                } else {
                    Vec::new()
                };
                let host_samples = vec![proto::HostSample {
                    ts_ns: on_node[0].end_ns,
                    period_ns: on_node[0].end_ns - on_node[0].start_ns,
                    cpu_util_pct: Some(40.0),
                    processes: on_node
                        .iter()
                        .map(|r| proto::ProcessSample {
                            pid: 10_000 + r.rank,
                            job_id: job.to_string(),
                            rank: r.rank,
                            cpu_pct: Some(99.0),
                            rss_bytes: Some(8 << 30),
                        })
                        .collect(),
                    ..Default::default()
                }];
                rounds[step.step as usize].push(proto::AgentBatch {
                    agent_id: node.clone(),
                    agent_session: 1 + session as u64,
                    seq: step.step + 1,
                    node,
                    sent_at_ns: on_node[0].start_ns,
                    ranks,
                    gpu_samples,
                    host_samples,
                });
            }
        }
    }
    rounds
}

fn gpu_sample(job: &str, node: &str, rank: u32, start_ns: u64, end_ns: u64) -> proto::GpuSample {
    let slow = job == "job-b" && rank == 2;
    proto::GpuSample {
        ts_ns: end_ns,
        period_ns: end_ns - start_ns,
        gpu_index: rank % RANKS_PER_NODE,
        uuid: format!("GPU-{node}-{}", rank % RANKS_PER_NODE),
        name: "NVIDIA H100 80GB HBM3".into(),
        state: proto::GpuState::Ok as i32,
        gpu_util_pct: Some(if slow { 97.0 } else { 88.0 }),
        sm_clock_mhz: Some(if slow { 1410 } else { 1980 }),
        temp_c: Some(if slow { 86.0 } else { 64.0 }),
        power_w: Some(650.0),
        // Error counts: the slow GPU's samples are rows of
        // gpu_error_samples (migration 0016).
        ecc_corrected_total: Some(0),
        ecc_corrected_new: Some(0),
        pcie_replays_total: Some(if slow { 5 } else { 0 }),
        pcie_replays_new: Some(u64::from(slow)),
        xid_errors: Some(0),
        ranks: vec![proto::RankRef {
            job_id: job.to_string(),
            rank,
        }],
        ..Default::default()
    }
}

fn config(url: &str, cluster: &str) -> Config {
    let mut cfg = collector_config(url, DB);
    cfg.clickhouse_cluster = cluster.to_string();
    cfg.writer.flush_interval_ms = 20;
    // Retention is exercised explicitly below.
    cfg.retention_days = 0;
    // Only the straggler rule: its one alert per verdict is something to wait for.
    let rules = &mut cfg.alerts.rules;
    rules.hang.enabled = false;
    rules.low_gpu_utilization.enabled = false;
    rules.collective_slowdown.enabled = false;
    cfg
}

/// Sends the workload round by round (a round's batches in parallel) and waits until
/// the live analytics results of every step, verdict and alert are stored.
async fn ingest(collector: &Collector, rounds: &[Vec<proto::AgentBatch>]) {
    let url = format!("http://{}", collector.grpc_addr);
    let client = proto::collector_ingest_client::CollectorIngestClient::connect(url)
        .await
        .expect("connect to collector");
    for round in rounds {
        let sends = round.iter().map(|b| {
            let mut c = client.clone();
            let b = b.clone();
            async move { c.ingest(b).await.map(|r| r.into_inner()) }
        });
        for ack in futures_join_all(sends).await {
            let ack = ack.expect("batch stored");
            assert!(!ack.duplicate && ack.rows > 0, "{ack:?}");
        }
    }
    let steps = ((RECENT.len() + OLD.len()) as u64) * u64::from(RANKS) * STEPS;
    let (w, s, a) = (
        collector.writer().metrics(),
        collector.stream().metrics(),
        collector.alerts().metrics(),
    );
    eventually(60, "analytics results stored", || {
        w.table(Table::StepBreakdown).rows.load(Relaxed) == steps
            && w.table(Table::StragglerVerdicts).rows.load(Relaxed)
                == s.verdict_changes.load(Relaxed)
            && w.table(Table::StragglerEvidence).rows.load(Relaxed)
                == s.verdict_evidence.load(Relaxed)
            && a.fired.load(Relaxed) >= 1
            && w.table(Table::Alerts).rows.load(Relaxed)
                == a.fired.load(Relaxed) + a.resolved.load(Relaxed)
    })
    .await;
}

/// `join_all` without a futures dependency: spawn each and await in order.
async fn futures_join_all<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// Every query route the API offers, for every job.
fn routes() -> Vec<String> {
    let mut r = vec![
        "/api/v1/jobs".to_string(),
        "/api/v1/alerts".into(),
        "/api/v1/alerts?job=job-b".into(),
        "/api/v1/gpus?since_ns=0".into(),
        "/api/v1/gpus?node=job-a-node1&since_ns=0".into(),
    ];
    for job in RECENT.iter().chain(OLD) {
        for q in [
            "steps",
            "steps?last=3",
            "steps?from_step=2&to_step=4",
            "breakdown",
            "breakdown?last=2",
            "ranks",
            "collectives",
            "collectives?rank=1",
            "stragglers",
            "hangs",
        ] {
            r.push(format!("/api/v1/jobs/{job}/{q}"));
        }
        r.push(format!("/api/v1/gpus?job={job}"));
    }
    r
}

/// The normalized answers of every route (wall-clock fields removed).
async fn answers(collector: &Collector) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for route in routes() {
        let url = format!("http://{}{route}", collector.http_addr);
        let mut v: serde_json::Value = rankscope_cli::query::get_json(&url)
            .await
            .unwrap_or_else(|e| panic!("GET {route}: {e}"));
        strip(&mut v);
        // Jobs are listed most recently seen first: by arrival, a wall-clock time.
        if let Some(jobs) = v["jobs"].as_array_mut() {
            jobs.sort_by(|a, b| a["job"].as_str().cmp(&b["job"].as_str()));
        }
        out.push((route, v));
    }
    out
}

fn strip(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|k, _| !VOLATILE.contains(&k.as_str()));
            m.values_mut().for_each(strip);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The distinct values of `key` in a table's local part on one server.
fn jobs_on(server: &ClickHouse, table: &str, key: &str) -> BTreeSet<String> {
    server
        .query(&format!(
            "SELECT DISTINCT {key} FROM {DB}.{table}_local ORDER BY {key}"
        ))
        .expect("query a shard")
        .lines()
        .map(str::to_string)
        .collect()
}

fn count(server: &ClickHouse, sql: &str) -> u64 {
    let out = server.query(sql).expect("query");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{sql}: {out:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_answers_like_a_single_server() {
    let cluster = ClickHouseCluster::start(CLUSTER, 2)
        .unwrap_or_else(|e| panic!("cannot start the test ClickHouse cluster: {e}"));
    let single = ClickHouse::start().expect("ClickHouse");
    let now = now_ns();
    let rounds = workload(now);

    let one = rankscope_collector::start(config(&single.http_url, ""))
        .await
        .expect("single-server collector");
    ingest(&one, &rounds).await;
    let want = answers(&one).await;

    let sharded = rankscope_collector::start(config(&cluster.shards[0].http_url, CLUSTER))
        .await
        .expect("cluster collector");
    ingest(&sharded, &rounds).await;
    let got = answers(&sharded).await;

    // The workload produced something to compare in every view.
    let find = |route: &str| &want.iter().find(|(r, _)| r == route).expect(route).1;
    assert_eq!(
        find("/api/v1/jobs/job-b/stragglers")["stragglers"][0]["rank"],
        2
    );
    assert!(find("/api/v1/jobs/job-b/stragglers")["stragglers"][0]["evidence"].is_string());
    assert_eq!(
        find("/api/v1/alerts?job=job-b")["alerts"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        find("/api/v1/gpus?job=job-f")["gpus"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    assert_eq!(
        find("/api/v1/jobs/job-c/breakdown")["breakdown"]
            .as_array()
            .map(Vec::len),
        Some(32)
    );
    for ((route, a), (_, b)) in want.iter().zip(&got) {
        assert_eq!(a, b, "{route}: single server vs cluster");
    }

    // Every table holds as many rows through the Distributed tables as on one server.
    // ReplacingMergeTree tables are counted after replacement: merges run when they run.
    let replacing = [
        Table::Ranks,
        Table::StepBreakdown,
        Table::StragglerVerdicts,
        Table::HangSuspects,
        Table::StragglerEvidence,
        Table::StragglerGains,
    ];
    for t in Table::ALL {
        let last = if replacing.contains(&t) { " FINAL" } else { "" };
        let sql = format!("SELECT count() FROM {DB}.{}{last}", t.name());
        let (a, b) = (count(&single, &sql), count(&cluster.shards[1], &sql));
        assert_eq!(a, b, "{} rows: single server vs cluster", t.name());
        // Simulated ranks send no kernel launch calls (only imported traces
        // do), and no Kineto trace was requested here. Operator and memory
        // views and kernel launch configurations come from traces only.
        let may_be_empty = [
            Table::HangSuspects,
            Table::KernelLaunches,
            Table::KernelConfigs,
            Table::TraceRanks,
            Table::TraceOps,
            Table::OperatorStats,
            Table::MemoryStats,
            Table::OperatorShapes,
        ];
        assert!(a > 0 || may_be_empty.contains(&t), "{} is empty", t.name());
    }

    // Rows are on their shards: each job (and node) on exactly one, both shards used.
    let [s1, s2] = &cluster.shards[..] else {
        panic!("two shards")
    };
    for (table, key) in [
        ("steps", "job_id"),
        ("step_breakdown", "job_id"),
        ("ranks", "job_id"),
        ("gpu_samples", "node"),
    ] {
        let (a, b) = (jobs_on(s1, table, key), jobs_on(s2, table, key));
        assert!(
            !a.is_empty() && !b.is_empty(),
            "{table}: both shards hold rows: {a:?} {b:?}"
        );
        assert!(
            a.is_disjoint(&b),
            "{table}: one {key} on one shard: {a:?} {b:?}"
        );
    }
    let total = count(s1, &format!("SELECT count() FROM {DB}.steps"));
    assert_eq!(
        total,
        count(&single, &format!("SELECT count() FROM {DB}.steps"))
    );
    assert_eq!(
        total,
        count(s1, &format!("SELECT count() FROM {DB}.steps_local"))
            + count(s2, &format!("SELECT count() FROM {DB}.steps_local"))
    );

    // A collector on the other server: same schema history, same duplicate detection.
    let cfg2 = config(&cluster.shards[1].http_url, CLUSTER);
    let store2 = Store::connect(&cfg2.clickhouse)
        .and_then(|s| s.with_cluster(CLUSTER))
        .expect("store");
    assert_eq!(
        store2.migrate().await.expect("migrate"),
        Vec::<u32>::new(),
        "history is shared"
    );
    let other = rankscope_collector::start(cfg2)
        .await
        .expect("second cluster collector");
    let mut client = proto::collector_ingest_client::CollectorIngestClient::connect(format!(
        "http://{}",
        other.grpc_addr
    ))
    .await
    .expect("connect");
    let again = client
        .ingest(rounds[3][1].clone())
        .await
        .expect("retry")
        .into_inner();
    assert!(
        again.duplicate,
        "seeded from ingest_batches on the other shard: {again:?}"
    );
    other.shutdown().await;

    // A database made for one mode is refused by the other.
    let store = |url: &str, db: &str, cluster: &str| {
        let mut cfg = config(url, cluster);
        cfg.clickhouse.database = db.to_string();
        Store::connect(&cfg.clickhouse)
            .and_then(|s| s.with_cluster(cluster))
            .expect("store")
    };
    let err = store(&s1.http_url, DB, "").migrate().await.unwrap_err();
    assert!(err.to_string().contains("set clickhouse_cluster"), "{err}");
    store(&s1.http_url, "plain", "")
        .migrate()
        .await
        .expect("a single-server database");
    let err = store(&s1.http_url, "plain", CLUSTER)
        .migrate()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("made for a single server"),
        "{err}"
    );

    // Retention: the same partitions expire in both modes, on every shard.
    let store1 = Store::connect(&config(&single.http_url, "").clickhouse).expect("store");
    // A day after every write (modification_time has whole seconds): the 20-day-old
    // partitions expire, today's stay.
    let later = now_ns() + DAY_NS + 2_000_000_000;
    let mut dropped_one = store1
        .drop_expired_partitions(1, later)
        .await
        .expect("retention");
    let mut dropped_cluster = store2
        .drop_expired_partitions(1, later)
        .await
        .expect("cluster retention");
    dropped_one.sort();
    dropped_cluster.sort();
    assert!(
        dropped_one.iter().any(|p| p.starts_with("steps/")),
        "{dropped_one:?}"
    );
    assert_eq!(dropped_one, dropped_cluster);
    let old = OLD
        .iter()
        .map(|j| format!("'{j}'"))
        .collect::<Vec<_>>()
        .join(", ");
    for s in [s1, s2] {
        assert_eq!(
            count(
                s,
                &format!("SELECT count() FROM {DB}.steps_local WHERE job_id IN ({old})")
            ),
            0
        );
    }
    assert_eq!(
        count(s1, &format!("SELECT count() FROM {DB}.steps")),
        count(&single, &format!("SELECT count() FROM {DB}.steps"))
    );
    assert!(
        count(s1, &format!("SELECT count() FROM {DB}.steps")) > 0,
        "recent jobs are kept"
    );

    sharded.shutdown().await;
    one.shutdown().await;
}
