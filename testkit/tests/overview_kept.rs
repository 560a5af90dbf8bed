//! The overview's kept per-rank figures (issue 38 goal 7, migration 0018,
//! `api::overview::kept`) through a real collector and ClickHouse: a cold
//! request served from the kept rows gives exactly the answer computed from
//! every stored row (`?exact=true`), for imported trace sets and a live
//! simulated job; a later write makes the route compute from the rows again.

use crate::common;

use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};
use rankscope_cli::simulate;
use serde_json::Value;

fn kineto(set: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto")
        .join(set)
}

async fn import_files(stack: &Stack, paths: &[PathBuf], job: &str) {
    let files = import::discover(paths).expect("trace files");
    let opts = import::ImportOptions::new(job);
    send::import_and_send(files, &opts, &stack.send_options())
        .await
        .expect("import");
}

/// The job's overview computed from the rows, then the plain request (no
/// answer in the collector's cache for it yet): both answers, and advice's.
async fn exact_then_plain(stack: &Stack, job: &str) -> (Value, Value) {
    let exact = stack
        .api_get(&format!("/api/v1/jobs/{job}/overview?exact=true"))
        .await;
    assert_eq!(exact["figures_from"], "stored_rows", "{exact}");
    let plain = stack.api_get(&format!("/api/v1/jobs/{job}/overview")).await;
    (exact, plain)
}

/// Every figure equal, only `figures_from` differs.
fn same_figures(what: &str, a: &Value, b: &Value) {
    assert_eq!(a["overview"], b["overview"], "{what}");
    assert_eq!(a["job_wide"], b["job_wide"], "{what}");
    assert!(
        a["overview"].as_array().is_some_and(|v| !v.is_empty()),
        "{what}: {a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_figures_equal_the_stored_rows_answer_for_imported_sets() {
    let stack = Stack::start_without_agent().await;
    for (i, set) in ["param_dlrm_8rank_v100", "hta_trace_filter_2rank_sm80"]
        .iter()
        .enumerate()
    {
        let job = format!("kept{i}");
        import_files(&stack, &[kineto(set)], &job).await;
        let (exact, plain) = exact_then_plain(&stack, &job).await;
        assert_eq!(plain["figures_from"], "kept", "{set}: {plain}");
        same_figures(set, &exact, &plain);
        // advice reads the same figures.
        let a = stack.api_get(&format!("/api/v1/jobs/{job}/advice")).await;
        let b = stack
            .api_get(&format!("/api/v1/jobs/{job}/advice?exact=true"))
            .await;
        assert_eq!(a, b, "{set}");
        // One rank: its kept row alone.
        let rank = plain["overview"][0]["rank"].as_u64().unwrap();
        let one = stack
            .api_get(&format!("/api/v1/jobs/{job}/overview?rank={rank}"))
            .await;
        assert_eq!(one["figures_from"], "kept", "{one}");
        assert_eq!(one["overview"][0], plain["overview"][0], "{set}");
    }

    // A later import into a job (a rank without a kept row): computed from
    // the rows again, then kept.
    let set = kineto("hta_trace_filter_2rank_sm80");
    import_files(&stack, &[set.join("sampled_rank-0.json.gz")], "later").await;
    let (exact, plain) = exact_then_plain(&stack, "later").await;
    assert_eq!(plain["figures_from"], "kept", "{plain}");
    same_figures("later, rank 0", &exact, &plain);
    import_files(&stack, &[set.join("sampled_rank-1.json.gz")], "later").await;
    let after = stack.api_get("/api/v1/jobs/later/overview").await;
    assert_eq!(after["figures_from"], "stored_rows", "{after}");
    assert_eq!(
        after["overview"].as_array().map(Vec::len),
        Some(2),
        "{after}"
    );
    let (exact, plain) = exact_then_plain(&stack, "later").await;
    // The answer after the import was cached; the exact one equals it.
    same_figures("later, both ranks", &exact, &after);
    same_figures("later, both ranks (cached)", &exact, &plain);

    // A re-import of the same file: the answer is still the rows' answer.
    import_files(&stack, &[set.join("sampled_rank-1.json.gz")], "later").await;
    let (exact, plain) = exact_then_plain(&stack, "later").await;
    same_figures("later, re-imported", &exact, &plain);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_figures_equal_the_stored_rows_answer_for_a_live_job() {
    let stack = Stack::start().await;
    let job = "kept-live";
    let (ranks, steps) = (4u32, 6u64);
    let mut sim = sim_config(job, ranks, steps);
    sim.layers = 2;
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    // Every event stored and every step's breakdown written: the inputs
    // no longer change.
    let settled = |events: u64, rank_steps: u64| {
        let stack = &stack;
        async move {
            eventually(60, "every event stored", || stack.events_now(job) == events).await;
            stack.analytics_final(job, rank_steps).await;
            eventually(30, "every step's breakdown stored", || {
                stack.rows_now("step_breakdown", job) >= rank_steps
            })
            .await;
        }
    };
    let events = simulate::plan(&sim).event_counts().total();
    let rank_steps = u64::from(ranks) * steps;
    settled(events, rank_steps).await;
    let (exact, plain) = exact_then_plain(&stack, job).await;
    assert_eq!(plain["figures_from"], "kept", "{plain}");
    same_figures("live", &exact, &plain);
    assert_eq!(exact["overview"][0]["span_from"], "steps", "{exact}");

    // Later steps: every rank's inputs changed, computed from the rows.
    let end = simulate::plan(&sim)
        .step_times()
        .iter()
        .map(|s| s.3)
        .max()
        .unwrap();
    let mut more = sim.clone();
    more.first_step = steps;
    more.start_ns = end + 1_000_000;
    simulate::run(&more, &stack.agent_url())
        .await
        .expect("simulate");
    let events = events + simulate::plan(&more).event_counts().total();
    settled(events, 2 * rank_steps).await;
    let after = stack.api_get(&format!("/api/v1/jobs/{job}/overview")).await;
    assert_eq!(after["figures_from"], "stored_rows", "{after}");
    let exact = stack
        .api_get(&format!("/api/v1/jobs/{job}/overview?exact=true"))
        .await;
    same_figures("live, later steps", &exact, &after);
    assert_ne!(after["overview"][0]["steps"], plain["overview"][0]["steps"]);
    stack.stop().await;
}
