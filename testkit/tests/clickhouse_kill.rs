//! ClickHouse killed with SIGKILL in the middle of a job and started again
//! 60 s later: nothing the ranks handed over is lost, the pipeline's memory
//! stays bounded while it is away, and the time from its restart until every
//! event is stored is reported (issue 14, RELIABILITY.md).
//!
//! While ClickHouse is away the collector acknowledges nothing (UNAVAILABLE),
//! the agent keeps its bounded backlog and retries, and once the backlog is
//! full it stops taking messages from the ranks: `rankscope simulate` waits
//! for acknowledgements (an SDK rank would drop newest and count instead).

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use rankscope_cli::simulate::{plan, run};

/// The test process's resident set, in KiB (agent and collector run in it).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_killed_for_60_s_loses_nothing() {
    const OUTAGE: Duration = Duration::from_secs(60);
    let stack = Stack::start().await;
    if !stack.clickhouse.is_private() {
        eprintln!("skipped: RANKSCOPE_CLICKHOUSE_URL points at a server this test cannot kill");
        stack.stop().await;
        return;
    }
    let job = "ch-kill";
    let mut before = sim_config(job, 8, 20);
    before.layers = 4;
    run(&before, &stack.agent_url()).await.expect("simulate");
    let expected_before = plan(&before).event_counts().total();
    eventually(60, "the first 20 steps stored", || {
        stack.rows_now("steps", job) == 8 * 2 * 20
    })
    .await;

    stack.clickhouse.kill().expect("SIGKILL ClickHouse");
    let killed = Instant::now();
    let rss_at_kill = rss_kib();
    // The job goes on: 100 more steps at about 40 steps/s of the 8 ranks'
    // events, more than the agent's backlog holds.
    let mut after = sim_config(job, 8, 100);
    after.layers = 4;
    after.first_step = 20;
    after.start_ns = before.start_ns + 20 * 1_000_000_000;
    let events_after = plan(&after).event_counts().total();
    after.rate_events_per_s = Some(events_after as f64 / 2.5);
    let url = stack.agent_url();
    let ranks = tokio::spawn(async move { run(&after, &url).await });
    let mut rss_peak = rss_at_kill;
    while killed.elapsed() < OUTAGE {
        // The outage itself (not synchronisation): sample memory meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_peak = rss_peak.max(rss_kib());
    }
    stack.clickhouse.restart().expect("ClickHouse restarts");
    let back = Instant::now();
    let sent = ranks.await.unwrap().expect("simulate");
    assert_eq!(sent.dropped, 0, "{sent:?}");
    let want = expected_before + events_after;
    let deadline = Instant::now() + Duration::from_secs(120);
    while stack.events_now(job) != want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} events stored 120 s after the restart; ranks: {sent:?}",
            stack.events_now(job)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovery = back.elapsed();
    eprintln!(
        "clickhouse_kill: outage {} s; recovery (restart to all {want} events stored) {} ms; \
         RSS at kill {} MiB, peak during outage {} MiB",
        OUTAGE.as_secs(),
        recovery.as_millis(),
        rss_at_kill / 1024,
        rss_peak / 1024
    );
    assert_eq!(stack.distinct_event_keys(job).await, want, "stored once");
    assert!(
        rss_peak.saturating_sub(rss_at_kill) < 256 * 1024,
        "memory grew by {} MiB while ClickHouse was away",
        (rss_peak - rss_at_kill) / 1024
    );
    stack.stop().await;
}
