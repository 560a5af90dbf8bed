//! The job page's Profile tab (issue 29, `ui/js/profiler.js`) in headless
//! Chromium (`ui/cdp.rs`) for an imported trace set (the 8-rank DLRM set):
//! the overview table shows the API's per-rank figures, the Inductor
//! category table has the API's rows, the advice list the API's items, and
//! the console stays free of errors. Skipped with a loud note without
//! Chromium (fails under `CI=true`), as `ui.rs`.

// Shared with ui.rs, which uses the rest of it.
#[allow(dead_code)]
use crate::cdp;
use crate::common;

use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};
use serde_json::Value;

const JOB: &str = "ui-profile";

/// `pct()` of `ui/js/fmt.js`.
fn pct(v: &Value) -> String {
    v.as_f64().map_or("–".into(), |p| format!("{p:.1} %"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profile_tab_shows_the_apis_numbers() {
    let Some(chromium) = cdp::chromium_or_skip("the Profile tab browser test") else {
        return;
    };
    let stack = Stack::start_without_agent().await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto/param_dlrm_8rank_v100");
    let files = import::discover(&[dir]).expect("trace files");
    let send_opts = stack.send_options();
    send::import_and_send(files, &import::ImportOptions::new(JOB), &send_opts)
        .await
        .expect("import");
    let overview = stack.api_get(&format!("/api/v1/jobs/{JOB}/overview")).await;
    let cats = stack
        .api_get(&format!("/api/v1/jobs/{JOB}/kernels?by=category"))
        .await;
    let advice = stack.api_get(&format!("/api/v1/jobs/{JOB}/advice")).await;
    let url = format!("http://{}/#/job/{JOB}?tab=profile", stack.http_addr());
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots");
    tokio::task::spawn_blocking(move || {
        let mut browser = cdp::Browser::launch(&chromium);
        let mut page = browser.new_page(1600, 1000);
        page.navigate(&url);
        page.wait_for(
            30,
            "document.querySelectorAll('table.profile-overview tbody tr').length === 8",
        );
        for r in overview["overview"].as_array().expect("rows") {
            for f in ["gpu_util_pct", "sm_efficiency_pct", "achieved_occupancy_pct"] {
                let shown = page.eval(&format!(
                    "document.querySelector('table.profile-overview tr[data-rank=\"{}\"] td[data-field=\"{f}\"]').textContent",
                    r["rank"]
                ));
                assert_eq!(shown.as_str(), Some(pct(&r[f]).as_str()), "rank {} {f}", r["rank"]);
            }
        }
        let n = page.eval("document.querySelectorAll('table.profile-categories tbody tr').length");
        assert_eq!(n.as_u64(), Some(cats["kernels"].as_array().unwrap().len() as u64));
        let rules = page.eval(
            "[...document.querySelectorAll('ul.profile-advice li')].map(l => l.dataset.rule)",
        );
        let api_rules: Vec<&Value> = advice["advice"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| &a["rule"])
            .collect();
        assert_eq!(rules, serde_json::json!(api_rules));
        assert!(!api_rules.is_empty(), "DLRM ranks have low GPU utilization");
        let _ = std::fs::create_dir_all(&shots);
        page.screenshot(&shots.join("job-profile.png"));
        let errors = page.take_errors();
        assert!(errors.is_empty(), "console errors: {errors:?}");
    })
    .await
    .expect("browser session");
    stack.stop().await;
}
