//! End-to-end: `rankscope simulate` -> agent -> collector -> ClickHouse, all
//! real servers on real sockets (ClickHouse is a private server started by
//! the testkit).

use crate::common;

use common::*;

/// 8 ranks x 50 steps through the whole pipeline: every event stored exactly
/// once per table, and the step times the API returns are the simulated ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_job_is_stored_exactly_once() {
    let mut stack = Stack::start().await;
    let sim = sim_config("e2e-exact", 8, 50);
    let plan = rankscope_cli::simulate::plan(&sim);
    let summary = rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let expected = plan.event_counts();
    assert_eq!(summary.events_sent, expected.total());
    assert_eq!(summary.dropped, 0);
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);

    let counts = stack.counts("e2e-exact").await;
    assert_eq!(counts.steps, expected.steps, "steps table");
    assert_eq!(counts.spans, expected.spans, "spans table");
    assert_eq!(
        counts.collectives, expected.collectives,
        "collectives table"
    );
    assert_eq!(counts.kernels, expected.kernels, "kernels table");
    assert_eq!(
        stack.distinct_event_keys("e2e-exact").await,
        expected.total(),
        "no row stored twice"
    );

    let mut api = stack.api_steps("e2e-exact", "").await;
    api.sort();
    let mut want = plan.step_times();
    want.sort();
    assert_eq!(api.len(), 8 * 50);
    assert_eq!(
        api, want,
        "step times from the API equal the simulated ones"
    );

    let last = stack.api_steps("e2e-exact", "?last=5").await;
    assert_eq!(last.len(), 8 * 5);
    assert!(last.iter().all(|s| s.0 >= 45));

    let jobs = stack.api_get("/api/v1/jobs").await;
    let job = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "e2e-exact")
        .expect("job listed");
    assert_eq!(job["world_size"], 8);
    assert_eq!(job["ranks_seen"], 8);
    assert_eq!(job["last_step"], 49);
    stack.stop().await;
}

/// A batch retried after it was stored is acknowledged as a duplicate and not
/// stored again, also after a collector restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_batch_is_not_stored_twice() {
    let mut stack = Stack::start_without_agent().await;
    let batch = small_batch("dup-job", 1);
    let first = stack.ingest(batch.clone()).await.expect("first");
    assert!(!first.duplicate);
    assert_eq!(first.rows, 4);
    let again = stack.ingest(batch.clone()).await.expect("retry");
    assert!(again.duplicate, "retry must be a duplicate");
    assert_eq!(stack.counts("dup-job").await.total(), 4);

    // A new collector on the same database remembers stored batches.
    stack.restart_collector().await;
    let after_restart = stack
        .ingest(batch.clone())
        .await
        .expect("retry after restart");
    assert!(after_restart.duplicate);
    let next = stack.ingest(small_batch("dup-job", 2)).await.expect("next");
    assert!(!next.duplicate);
    assert_eq!(stack.counts("dup-job").await.total(), 8);
    stack.stop().await;
}
