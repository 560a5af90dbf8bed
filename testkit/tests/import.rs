//! Kineto import through the collector: the per-rank temporal breakdown of a
//! real 8-rank job equals Holistic Trace Analysis' numbers, and a re-import
//! stores nothing twice.

use crate::common;

use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};

fn dlrm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto/param_dlrm_8rank_v100")
}

fn send_opts(stack: &Stack) -> send::SendOptions {
    stack.send_options()
}

/// |ours - hta| within `abs` (percentage points) or `rel` (relative).
fn close(ours: f64, hta: f64, abs: f64, rel: f64) -> bool {
    (ours - hta).abs() <= abs.max(rel * hta.abs())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_dlrm_matches_hta_and_reimport_replaces() {
    let stack = Stack::start_without_agent().await;
    let files = import::discover(&[dlrm_dir()]).expect("trace files");
    assert_eq!(files.len(), 8);
    let opts = import::ImportOptions::new("dlrm");
    let reports = send::import_and_send(files.clone(), &opts, &send_opts(&stack))
        .await
        .expect("import");
    assert!(reports.iter().all(|r| r.duplicates == 0 && r.rows > 0));
    // What `rankscope import` does before it returns: wait until every
    // imported (step, rank) is analysed. After it, no query needs to poll.
    let want: u64 = reports
        .iter()
        .map(|r| import::wait::rank_steps(&r.summary.stats))
        .sum();
    assert_eq!(want, 8, "one step on each of 8 ranks");
    let collector = format!("http://{}", stack.http_addr());
    let http = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(5));
    let done = import::wait::until_final(
        &http,
        &collector,
        "dlrm",
        want,
        std::time::Duration::from_secs(60),
        false,
    )
    .await
    .expect("analytics final");
    assert_eq!(done, 8);
    // Waiting for more than will ever be final ends with a named timeout.
    let late = import::wait::until_final(
        &http,
        &collector,
        "dlrm",
        want + 1,
        std::time::Duration::from_millis(300),
        false,
    )
    .await;
    match late {
        Err(import::wait::WaitError::Timeout {
            done: 8, want: 9, ..
        }) => {}
        other => panic!("expected a timeout at 8 of 9, got {other:?}"),
    }
    let stored = stack.counts("dlrm").await;
    let sent: u64 = reports.iter().map(|r| r.rows).sum();
    assert_eq!(stored.total(), sent);

    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dlrm_dir().join("expected-hta.json")).unwrap(),
    )
    .unwrap();
    let ranks = stack.api_get("/api/v1/jobs/dlrm/ranks").await;
    let ranks = ranks["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    for (ours, hta) in ranks
        .iter()
        .zip(expected["temporal_breakdown"].as_array().unwrap())
    {
        assert_eq!(ours["rank"], hta["rank"]);
        let us = |k: &str| ours[k].as_f64().unwrap();
        let them = |k: &str| hta[k].as_f64().unwrap();
        for (ns, hta_us) in [
            ("gpu_span_ns", "kernel_time(us)"),
            ("idle_ns", "idle_time(us)"),
            ("compute_ns", "compute_time(us)"),
            ("non_compute_ns", "non_compute_time(us)"),
        ] {
            // `ranks` is HTA's temporal breakdown as HTA loads the trace:
            // equal to the microsecond.
            assert!(
                close(us(ns) / 1e3, them(hta_us), 1e-6, 0.0),
                "rank {}: {ns} = {} us, HTA {hta_us} = {}",
                ours["rank"],
                us(ns) / 1e3,
                them(hta_us)
            );
        }
        for (pct, hta_pct) in [
            ("idle_pct", "idle_time_pctg"),
            ("compute_pct", "compute_time_pctg"),
            ("non_compute_pct", "non_compute_time_pctg"),
        ] {
            // HTA rounds percentages to 2 decimals.
            assert!(
                close(us(pct), them(hta_pct), 0.005 + 1e-9, 0.0),
                "rank {}: {pct}",
                ours["rank"]
            );
        }
    }
    for (ours, hta) in ranks
        .iter()
        .zip(expected["comm_comp_overlap"].as_array().unwrap())
    {
        let o = ours["overlap_pct"].as_f64().unwrap();
        let h = hta["comp_comm_overlap_pctg"].as_f64().unwrap();
        assert!(
            close(o, h, 0.005 + 1e-9, 0.0),
            "rank {}: overlap {o} vs HTA {h}",
            ours["rank"]
        );
    }

    // The one ProfilerStep (#10) is assembled across the 8 ranks, and is
    // there at once (the wait above).
    let rows = stack.api_get("/api/v1/jobs/dlrm/breakdown?step=10").await;
    let rows = rows["breakdown"].as_array().expect("breakdown");
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r["step"] == 10));
    let colls = stack.api_get("/api/v1/jobs/dlrm/collectives").await;
    let ops: Vec<&str> = colls["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["op"].as_str().unwrap())
        .collect();
    assert!(
        ops.contains(&"all_reduce") && ops.contains(&"all_to_all"),
        "{ops:?}"
    );

    // Re-import: every batch is a duplicate, nothing is stored twice.
    let again = send::import_and_send(files, &opts, &send_opts(&stack))
        .await
        .expect("re-import");
    assert!(again
        .iter()
        .all(|r| r.rows == 0 && r.duplicates == r.batches));
    assert_eq!(stack.counts("dlrm").await, stored);
    stack.stop().await;
}
