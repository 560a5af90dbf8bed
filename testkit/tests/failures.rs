//! Bad input and failures across real processes and sockets: malformed
//! batches, oversized messages, an unreachable collector and ClickHouse going
//! down. Nothing acknowledged may be lost, nothing malformed is stored.

use crate::common;

use common::proxy::Proxy;
use common::*;
use rankscope_proto::v1 as proto;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

fn expect_invalid(res: Result<proto::IngestAck, tonic::Status>, needles: &[&str]) {
    let status = res.expect_err("must be rejected");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    for n in needles {
        assert!(
            status.message().contains(n),
            "{:?} lacks {n:?}",
            status.message()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_batches_are_rejected_with_the_field_named() {
    use proto::event::Kind;
    let stack = Stack::start_without_agent().await;

    let mut b = small_batch("bad", 1);
    b.ranks[0].identity = None;
    expect_invalid(stack.ingest(b).await, &["identity"]);

    let mut b = small_batch("bad", 2);
    b.ranks[0].identity.as_mut().unwrap().rank = 2;
    expect_invalid(stack.ingest(b).await, &["rank = 2", "world_size = 2"]);

    let mut b = small_batch("bad", 3);
    if let Some(Kind::Kernel(k)) = &mut b.ranks[0].events[1].kind {
        k.end_ns = k.start_ns - 1;
    }
    expect_invalid(stack.ingest(b).await, &["end_ns", "start_ns"]);

    let mut b = small_batch("bad", 4);
    if let Some(Kind::Kernel(k)) = &mut b.ranks[0].events[1].kind {
        k.name_id = 99;
    }
    expect_invalid(stack.ingest(b).await, &["name_id = 99"]);

    let mut b = small_batch("bad", 5);
    b.ranks[0].events.push(proto::Event {
        kind: Some(Kind::StepBegin(proto::StepBegin {
            step: 1,
            ts_ns: u64::MAX,
        })),
    });
    expect_invalid(stack.ingest(b).await, &["step = 1", "backwards"]);

    // The service stays usable and nothing of the rejected batches is stored.
    let ok = stack
        .ingest(small_batch("bad", 6))
        .await
        .expect("valid batch");
    assert_eq!(ok.rows, 4);
    assert_eq!(stack.counts("bad").await.total(), 4);

    let rejected = stack.collector.as_ref().unwrap().metrics().rejected();
    for reason in [
        "missing_identity",
        "rank_out_of_range",
        "end_before_start",
        "unknown_name_id",
        "step_backwards",
    ] {
        assert_eq!(rejected.get(reason), Some(&1), "{reason}: {rejected:?}");
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_batch_is_resource_exhausted() {
    let mut stack = Stack::start_without_agent().await;
    stack.collector_cfg.max_message_bytes = 64 * 1024;
    stack.restart_collector().await;
    let mut b = small_batch("big", 1);
    b.ranks[0].names[0].name = "k".repeat(100 * 1024);
    let status = stack.ingest(b).await.expect_err("too large");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // Under the limit still works.
    assert!(stack.ingest(small_batch("big", 2)).await.is_ok());
    stack.stop().await;
}

/// A collector stops while an agent holds its control stream open: the
/// agent never ends that stream, and the gRPC server's graceful shutdown
/// once waited for it forever (found when a test restarted a collector with
/// its agent connected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_stops_while_an_agent_holds_its_control_stream() {
    let mut stack = Stack::start().await;
    let url = format!("http://{}/metrics", stack.http_addr());
    let client = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = client.get(&url).await.expect("GET /metrics");
        let text = String::from_utf8_lossy(&body).into_owned();
        if text
            .lines()
            .any(|l| l == "rankscope_collector_control_streams_opened_total 1")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no control stream: {text}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let collector = stack.collector.take().expect("collector");
    tokio::time::timeout(Duration::from_secs(60), collector.shutdown())
        .await
        .expect("the collector stops with the stream open");
    stack.stop().await;
}

/// The agent starts while the collector is down, keeps the batches, retries
/// and delivers all of them once the collector is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_unavailable_then_delivered() {
    let mut stack = Stack::start_without_agent().await;
    // Take the collector away, remembering a port for it.
    let port = rankscope_testkit::free_port();
    stack.collector.take().unwrap().shutdown().await;
    stack.collector_cfg.grpc_listen_addr = format!("127.0.0.1:{port}");
    stack.start_agent(&format!("http://127.0.0.1:{port}")).await;

    let sim = sim_config("e2e-retry", 4, 5);
    let plan = rankscope_cli::simulate::plan(&sim);
    let summary = rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    assert_eq!(summary.dropped, 0);
    let agent = stack.agent.as_ref().unwrap();
    eventually(30, "agent retried the unreachable collector", || {
        agent.metrics().batches_retried > 0
    })
    .await;
    assert_eq!(agent.metrics().batches_acked, 0);

    stack.collector = Some(
        rankscope_collector::start(stack.collector_cfg.clone())
            .await
            .expect("collector starts"),
    );
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    let counts = stack.counts("e2e-retry").await;
    assert_eq!(counts.total(), plan.event_counts().total());
    assert_eq!(stack.distinct_event_keys("e2e-retry").await, counts.total());
    stack.stop().await;
}

/// ClickHouse goes down under a running collector: batches are not
/// acknowledged (UNAVAILABLE), the agent keeps and retries them, and after
/// ClickHouse is back every event is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_down_nothing_acknowledged_is_lost() {
    let clickhouse = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let database = clickhouse.fresh_database("e2e").expect("database");
    let target: std::net::SocketAddr = clickhouse
        .http_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("ClickHouse address");
    let proxy = Proxy::start(target).await;
    let cfg = collector_config(&format!("http://{}", proxy.addr), &database);
    let collector = rankscope_collector::start(cfg.clone())
        .await
        .expect("collector");

    // Direct: UNAVAILABLE while down.
    let mut stack = Stack {
        clickhouse,
        database,
        collector: Some(collector),
        collector_cfg: cfg,
        agent: None,
        dir: tempfile::tempdir().unwrap(),
    };
    proxy.set_up(false);
    let status = stack
        .ingest(small_batch("ch-down", 1))
        .await
        .expect_err("down");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    // Through the agent: retried until ClickHouse is back.
    stack
        .start_agent(&format!("http://{}", stack.grpc_addr()))
        .await;
    let sim = sim_config("ch-down", 2, 3);
    let plan = rankscope_cli::simulate::plan(&sim);
    rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let retries = &stack.collector.as_ref().unwrap().metrics().batches_retry;
    eventually(30, "collector answered UNAVAILABLE to the agent", || {
        retries.load(Relaxed) >= 2
    })
    .await;
    assert_eq!(stack.counts("ch-down").await.total(), 0);
    proxy.set_up(true);
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    assert_eq!(
        stack.counts("ch-down").await.total(),
        plan.event_counts().total()
    );
    assert_eq!(
        stack.distinct_event_keys("ch-down").await,
        plan.event_counts().total()
    );
    stack.stop().await;
}

/// One table refuses its INSERT (here: it is renamed away) while the other
/// tables of the same flush take theirs. The agent retries the batches;
/// once the table is back, every event is stored exactly once: the retry
/// leaves out the tables that already held the batches' rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_flush_leaves_no_row_twice_after_the_retry() {
    let stack = Stack::start().await;
    let db = stack.database.clone();
    stack
        .clickhouse
        .query(&format!("RENAME TABLE {db}.kernels TO {db}.kernels_away"))
        .expect("rename");
    let sim = sim_config("partial-flush", 4, 6);
    let plan = rankscope_cli::simulate::plan(&sim);
    assert!(plan.event_counts().kernels > 0 && plan.event_counts().steps > 0);
    rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let writer = stack.collector.as_ref().unwrap().writer().metrics();
    let (kernels, steps) = (
        writer.table(rankscope_collector::store::Table::Kernels),
        writer.table(rankscope_collector::store::Table::Steps),
    );
    let ingest = stack.collector.as_ref().unwrap().metrics();
    // The flush failed on kernels after steps were written, and the agent's
    // retries were answered UNAVAILABLE while the table was away (the retry
    // first asks ClickHouse which tables hold the batch; it cannot tell
    // while kernels is missing).
    eventually(
        30,
        "kernels failed while steps were written, then a retry",
        || {
            kernels.failures.load(Relaxed) >= 1
                && steps.rows.load(Relaxed) > 0
                && ingest.batches_retry.load(Relaxed) >= 2
        },
    )
    .await;
    // Steps rows are in ClickHouse already, and the batches are not acknowledged.
    let stored: u64 = stack
        .clickhouse
        .query(&format!(
            "SELECT count() FROM {db}.steps WHERE job_id = 'partial-flush'"
        ))
        .expect("count")
        .trim()
        .parse()
        .expect("number");
    assert!(stored > 0);
    stack
        .clickhouse
        .query(&format!("RENAME TABLE {db}.kernels_away TO {db}.kernels"))
        .expect("rename back");
    let mut stack = stack;
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    let counts = stack.counts("partial-flush").await;
    assert_eq!(counts.total(), plan.event_counts().total(), "{counts:?}");
    assert_eq!(
        stack.distinct_event_keys("partial-flush").await,
        plan.event_counts().total(),
        "no row twice"
    );
    // Analytics had every batch when the writer first took it; the agent's
    // retries of the failed flushes were dropped there, so each (step, rank)
    // breakdown equals that of the same job run without the fault.
    let c = stack.collector.as_ref().unwrap();
    let duplicates = c.stream().metrics().duplicate_batches.load(Relaxed);
    assert!(duplicates >= 1, "no retried batch reached analytics again");
    stack
        .start_agent(&format!("http://{}", stack.grpc_addr()))
        .await;
    let mut reference = sim.clone();
    reference.job = "partial-flush-ref".into();
    rankscope_cli::simulate::run(&reference, &stack.agent_url())
        .await
        .expect("simulate");
    let mut breakdowns = Vec::new();
    for job in ["partial-flush", "partial-flush-ref"] {
        stack.analytics_final(job, 4 * 6).await;
        let mut rows: Vec<serde_json::Value> = stack
            .api_get(&format!("/api/v1/jobs/{job}/breakdown?last=100"))
            .await["breakdown"]
            .as_array()
            .expect("breakdown rows")
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.as_object_mut().unwrap().remove("job");
                b
            })
            .collect();
        rows.sort_by_key(|b| (b["step"].as_u64(), b["rank"].as_u64()));
        breakdowns.push(rows);
    }
    assert_eq!(breakdowns[0].len(), 4 * 6);
    assert_eq!(breakdowns[0], breakdowns[1], "{duplicates} duplicate(s)");
    stack.stop().await;
}
