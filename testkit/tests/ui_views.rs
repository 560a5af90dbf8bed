//! The Ops and Memory tabs in a real browser (headless Chromium, see
//! `ui/cdp.rs`) for imported sets: a real torch CPU job with memory events
//! and stacks (`cpu_memory_stack_2rank`) and the A100 set with device
//! times (`hta_nccl_parser_rank0_a100`). The tables show the API's numbers,
//! the memory curve is drawn, stack frames link to `vscode://file/...`, and
//! the console stays free of errors. Skipped with a loud note without
//! Chromium (fails under `CI=true`).

// The browser driver is shared with ui.rs, which uses all of it.
#[allow(dead_code)]
use crate::cdp;
use crate::common;

use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};

async fn import_set(stack: &Stack, set: &str, job: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto")
        .join(set);
    let files = import::discover(&[dir]).expect("trace files");
    let send = stack.send_options();
    send::import_and_send(files, &import::ImportOptions::new(job), &send)
        .await
        .expect("import");
}

fn bytes(b: f64) -> String {
    // ui/js/fmt.js bytes()
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut b, mut i) = (b, 0);
    while b >= 1024.0 && i < units.len() - 1 {
        b /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b:.0} {}", units[i])
    } else {
        format!("{b:.1} {}", units[i])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_and_memory_tabs_show_the_apis_numbers() {
    let Some(chromium) = cdp::chromium_or_skip("the browser test") else {
        return;
    };
    let stack = Stack::start_without_agent().await;
    import_set(&stack, "cpu_memory_stack_2rank", "uimem").await;
    import_set(&stack, "hta_nccl_parser_rank0_a100", "uiops").await;
    import_set(&stack, "cpu_gloo_2rank", "uishape").await;
    let base = format!("http://{}/", stack.http_addr());
    let mut browser = cdp::Browser::launch(&chromium);
    let mut page = browser.new_page(1600, 1000);

    // Memory: peaks per rank equal the API's, the curve is drawn.
    let api = stack
        .api_get("/api/v1/jobs/uimem/memory?ops=true&curve=true")
        .await;
    page.navigate(&format!("{base}#/job/uimem?tab=memory"));
    page.wait_for(30, "document.querySelectorAll('table.mem-peaks tbody tr').length === 2 && document.querySelector('#memory-curve canvas')");
    for p in api["peaks"].as_array().unwrap() {
        let key = format!("{}/{}", p["rank"], p["device"].as_str().unwrap());
        let shown = page.eval(&format!(
            "document.querySelector('tr[data-peak=\"{key}\"]').children[2].textContent"
        ));
        assert_eq!(
            shown,
            bytes(p["peak_allocated_bytes"].as_f64().unwrap()),
            "{key}"
        );
    }
    // The job-wide curve is the API's; choosing a rank draws that rank's
    // whole curve (`rank=R`), as the API answers it.
    let shown = page.eval("Number(document.querySelector('#memory-curve').dataset.points)");
    let job_curve = api["curve"].as_array().unwrap();
    assert!(!job_curve.is_empty());
    assert_eq!(shown.as_u64(), Some(job_curve.len() as u64));
    let one = stack
        .api_get("/api/v1/jobs/uimem/memory?rank=1&curve=true")
        .await;
    let one = one["curve"].as_array().unwrap();
    assert!(
        !one.is_empty() && one.iter().all(|p| p["rank"] == 1),
        "{one:?}"
    );
    page.eval("(() => { const s = document.querySelector('#memory-rank'); s.value = '1'; s.dispatchEvent(new Event('change')); return true; })()");
    page.wait_for(
        30,
        &format!(
            "document.querySelector('#memory-curve').dataset.rank === '1' && document.querySelector('#memory-curve').dataset.points === '{}' && document.querySelector('#memory-curve canvas')",
            one.len()
        ),
    );
    let n = page.eval("document.querySelectorAll('table.mem-ops tbody tr').length");
    assert_eq!(
        n.as_u64(),
        Some(api["ops"].as_array().unwrap().len().min(200) as u64)
    );
    // The allocation / release events: the API's first page, byte for byte.
    let ev = stack
        .api_get("/api/v1/jobs/uimem/memory?events=true&limit=200")
        .await;
    let shown = page.eval("[...document.querySelectorAll('table.mem-events tbody tr')].map(r => Number(r.dataset.bytes))");
    let want: Vec<i64> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["bytes"].as_i64().unwrap())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(
        shown
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect::<Vec<_>>(),
        want
    );

    // Ops: the job-wide and the per-rank (stack) tables equal the API's.
    let api = stack.api_get("/api/v1/jobs/uiops/ops?top=50").await;
    page.navigate(&format!("{base}#/job/uiops?tab=ops"));
    page.wait_for(30, "document.querySelectorAll('table.ops tbody tr').length > 0 && document.querySelector('table.ops-rank')");
    let first = &api["rows"][0];
    let shown = page.eval(&format!(
        "document.querySelector('table.ops tr[data-op=\"{}\"] td[data-field=\"host_self_us_median\"]').textContent",
        first["name"].as_str().unwrap()
    ));
    assert_eq!(
        shown,
        format!("{:.1}", first["host_self_us_median"].as_f64().unwrap())
    );
    // A set with `Input Dims`: the rank's (operator, input shape) table
    // holds the API's rows in order.
    let all = stack.api_get("/api/v1/jobs/uishape/ops?top=50").await;
    let rank = all["rows"][0]["host_self_max_rank"].as_u64().unwrap();
    page.navigate(&format!("{base}#/job/uishape?tab=ops"));
    let sh = stack
        .api_get(&format!(
            "/api/v1/jobs/uishape/ops?rank={rank}&group_by=shape&top=50"
        ))
        .await;
    let want: Vec<String> = sh["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["name"].as_str().unwrap(),
                r["input_shape"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!want.is_empty());
    let shown = page.wait_for(30, "document.querySelectorAll('table.ops-shape tbody tr').length > 0 && [...document.querySelectorAll('table.ops-shape tbody tr')].map(r => r.dataset.op + ' ' + r.dataset.shape)");
    assert_eq!(
        shown
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect::<Vec<_>>(),
        want
    );

    // Stacks link to the source of the real torch job.
    page.navigate(&format!("{base}#/job/uimem?tab=ops"));
    let href = page.wait_for(
        30,
        "[...document.querySelectorAll('table.ops-rank a[data-frame]')].map(a => a.href).find(h => h.includes('make_cpu_memory_stack_traces.py'))",
    );
    assert!(
        href.as_str().unwrap().starts_with("vscode://file/"),
        "{href}"
    );

    let errors = page.take_errors();
    assert!(
        errors.is_empty(),
        "console errors: {:?}",
        errors.iter().map(|e| &e.text).collect::<Vec<_>>()
    );
    drop(page);
    drop(browser);
    stack.stop().await;
}
