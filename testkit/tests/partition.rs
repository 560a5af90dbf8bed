//! A network partition between the agent and the collector in the middle of
//! a job, of both kinds: connections refused and cut (a peer gone), and
//! traffic silently dropped with connections left open (packets lost; the
//! agent's `request_timeout_ms` ends each stuck request). After it heals,
//! every event the agent accepted is stored exactly once and the job's
//! analytics are complete.

use crate::common;

use common::proxy::Proxy;
use common::*;
use rankscope_cli::simulate::{plan, run};

async fn partitioned_job(job: &str, blackhole: bool) {
    let mut stack = Stack::start_without_agent().await;
    let proxy = Proxy::start(stack.grpc_addr()).await;
    let mut cfg = agent_config(&format!("http://{}", proxy.addr), stack.dir.path());
    cfg.request_timeout_ms = 1_000;
    stack.agent = Some(rankscope_agent::start(cfg).await.expect("agent"));
    let mut sim = sim_config(job, 8, 60);
    sim.layers = 4;
    let total = plan(&sim).event_counts().total();
    sim.rate_events_per_s = Some(total as f64 / 5.0);
    let url = stack.agent_url();
    let ranks = tokio::spawn(async move { run(&sim, &url).await });
    eventually(60, "a quarter of the job stored", || {
        stack.rows_now("steps", job) >= 8 * 2 * 60 / 4
    })
    .await;
    if blackhole {
        proxy.set_blackhole(true);
    } else {
        proxy.set_up(false);
    }
    let at_cut = stack.rows_now("steps", job);
    // The partition lasts until the ranks have sent everything: the agent
    // holds what they send meanwhile.
    let sent = ranks.await.unwrap().expect("simulate");
    assert_eq!(sent.dropped, 0, "{sent:?}");
    assert!(
        at_cut < 8 * 2 * 60,
        "the job was stored before the partition ({at_cut} markers)"
    );
    proxy.set_blackhole(false);
    proxy.set_up(true);
    eventually(120, "every step marker stored after the partition", || {
        stack.rows_now("steps", job) == 8 * 2 * 60
    })
    .await;
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);
    let counts = stack.counts(job).await;
    assert_eq!(counts.total(), total, "{counts:?}");
    assert_eq!(stack.distinct_event_keys(job).await, total, "stored once");
    let rows = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/breakdown?last=60"),
            "breakdown",
            |r| r.len() == 8 * 60,
        )
        .await;
    assert_eq!(rows.len(), 8 * 60);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_and_cut_partition_loses_nothing() {
    partitioned_job("partition-cut", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_partition_loses_nothing() {
    partitioned_job("partition-blackhole", true).await;
}
