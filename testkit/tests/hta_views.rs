//! The HTA-style GPU views (`kernel-types`, `kernels`, `idle`, `queue`,
//! `memcpy`, `launches`, and `ranks`: HTA's temporal breakdown and overlap)
//! of imported traces through a real collector and ClickHouse:
//! every vendored trace set reproduces HTA 0.5.0's own output
//! (`expected-hta-analyses.json` beside it; `parity`), every set gives every
//! view without an error, and bad input gets a clear message.

use crate::common;
#[path = "hta_views/parity.rs"]
mod parity;

use std::collections::HashMap;
use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};
use serde_json::Value;

fn kineto(set: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto")
        .join(set)
}

fn send_opts(stack: &Stack) -> send::SendOptions {
    stack.send_options()
}

async fn import_set(stack: &Stack, set: &str, job: &str) {
    let files = import::discover(&[kineto(set)]).expect("trace files");
    let opts = import::ImportOptions::new(job);
    let reports = send::import_and_send(files, &opts, &send_opts(stack))
        .await
        .expect("import");
    assert!(reports.iter().all(|r| r.rows > 0), "{set}: {reports:?}");
}

async fn rows(stack: &Stack, job: &str, view: &str) -> Vec<Value> {
    let body = stack.api_get(&format!("/api/v1/jobs/{job}/{view}")).await;
    body[view]
        .as_array()
        .unwrap_or_else(|| panic!("{view}: {body}"))
        .clone()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Every vendored set, in the order they are checked.
const SETS: [&str; 9] = [
    "hta_df_index_resolver_rank1_v100",
    "hta_nccl_parser_rank0_a100",
    "hta_negative_queue_rank0_a100",
    "hta_trace_filter_2rank_sm80",
    "param_dlrm_8rank_v100",
    "tracelens_b200_eager_rank0",
    "tracelens_mi300_resnet_rank0",
    "gpukit_ddp_4rank_h200",
    "gpukit_nccl1_h200",
];

/// Kernel types, the kernel table, idle time, queue length, the temporal
/// breakdown and overlap (`ranks`) and the launch statistics of every set
/// equal HTA 0.5.0's (`include_last_profiler_step=True`) on the same files:
/// HTA's loading rules (ProfilerStep window, whole microseconds rounded
/// inward, host events with a `stream` argument as GPU work) are the views'
/// default. `?exact=true` keeps what HTA drops and leaves out host events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_set_matches_hta_analyses() {
    let stack = Stack::start_without_agent().await;
    let mut worst = parity::Worst::default();
    for (i, set) in SETS.iter().enumerate() {
        let job = format!("hta{i}");
        import_set(&stack, set, &job).await;
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(kineto(set).join("expected-hta-analyses.json")).unwrap(),
        )
        .unwrap();
        let a = &expected["analyses"];
        parity::kernel_types(&stack, &job, a, set, &mut worst).await;
        parity::kernels(&stack, &job, a, set, &mut worst).await;
        parity::idle(&stack, &job, a, set, &mut worst).await;
        parity::queue(&stack, &job, a, set, &mut worst).await;
        parity::temporal(&stack, &job, a, set, &mut worst).await;
        parity::launches(&stack, &job, a, set, &mut worst).await;
    }
    // HTA drops GPU work launched after the last ProfilerStep or with no
    // launch in the trace; `exact` counts it (and nanosecond times).
    let hta: f64 = rows(&stack, "hta6", "kernel-types")
        .await
        .iter()
        .map(|t| f(&t["sum_ns"]))
        .sum();
    let body = stack
        .api_get("/api/v1/jobs/hta6/kernel-types?exact=true")
        .await;
    let exact: f64 = body["kernel-types"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|t| f(&t["sum_ns"]))
        .sum();
    assert!(exact > 1.3 * hta, "exact {exact} vs HTA's {hta}");
    // HTA counts the B200 trace's Triton launcher cpu_op (`args.stream` 0,
    // 74.391 us) as a COMPUTATION kernel beside the kernel it launched
    // (1.984 us); `exact` counts GPU activities only.
    let triton = "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0";
    let named = |body: &Value| {
        body["kernels"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
            .iter()
            .find(|k| k["name"] == triton)
            .cloned()
            .unwrap_or_else(|| panic!("no {triton} in {body}"))
    };
    let all = "/api/v1/jobs/hta5/kernels?top=100000&ratio=1";
    let k = named(&stack.api_get(all).await);
    assert_eq!(k["kernel_type"], "COMPUTATION", "{k}");
    assert_eq!(
        (k["calls"].as_u64(), k["sum_ns"].as_i64()),
        (Some(2), Some(75_000))
    );
    let k = named(&stack.api_get(&format!("{all}&exact=true")).await);
    assert_eq!(
        (k["calls"].as_u64(), k["sum_ns"].as_i64()),
        (Some(1), Some(1_984))
    );
    // `ranks?exact=true`: the union of every stored GPU activity at its ns
    // times (no host event): not HTA's figure, and its parts add up.
    let ex = stack.api_get("/api/v1/jobs/hta5/ranks?exact=true").await;
    let hta_ranks = rows(&stack, "hta5", "ranks").await;
    let ex = &ex["ranks"].as_array().unwrap_or_else(|| panic!("{ex}"))[0];
    let part = |k: &str| ex[k].as_u64().unwrap_or_else(|| panic!("{k}: {ex}"));
    assert_eq!(
        part("idle_ns") + part("compute_ns") + part("non_compute_ns"),
        part("gpu_span_ns"),
        "{ex}"
    );
    eprintln!("B200 ranks: HTA {} exact {ex}", hta_ranks[0]);
    assert_ne!(ex["compute_ns"], hta_ranks[0]["compute_ns"]);
    // Memcpy: the DLRM traces have HtoD, DtoH and DtoD copies.
    let memcpy = rows(&stack, "hta4", "memcpy").await;
    assert!(memcpy
        .iter()
        .any(|m| m["kind"] == "HtoD" && m["calls"].as_u64() > Some(0)));

    let mut report: Vec<_> = worst.0.into_iter().collect();
    report.sort_by(|a, b| a.0.cmp(b.0));
    eprintln!("largest differences from HTA 0.5.0: {report:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trace_set_gives_every_view_and_bad_input_is_named() {
    let stack = Stack::start_without_agent().await;
    let sets = SETS;
    let mut with_mfu = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let job = format!("set{i}");
        import_set(&stack, set, &job).await;
        for view in [
            "kernel-types",
            "kernels",
            "idle",
            "queue",
            "memcpy",
            "launches",
        ] {
            let body = stack.api_get(&format!("/api/v1/jobs/{job}/{view}")).await;
            assert!(body[view].is_array(), "{set} {view}: {body}");
        }
        // Goodput: its parts add up to the wall time; a GPU model of the
        // peak table gives an MFU (the trace's deviceProperties name it).
        let g = stack
            .api_get(&format!("/api/v1/jobs/{job}/goodput?flops_per_step=1e12"))
            .await;
        let sum: f64 = g["parts"]
            .as_array()
            .unwrap_or_else(|| panic!("{set}: {g}"))
            .iter()
            .map(|p| f(&p["ns"]))
            .sum();
        assert!((sum - f(&g["wall_ns"])).abs() <= 1.0, "{set}: {g}");
        let known = g["gpu_name"]
            .as_str()
            .and_then(rankscope_analysis::peak_flops)
            .is_some();
        assert_eq!(g["mfu_pct"].is_number(), known, "{set}: {g}");
        assert_eq!(g["mfu_note"].is_string(), !known, "{set}: {g}");
        if known {
            with_mfu.push(g["gpu_name"].as_str().unwrap_or_default().to_owned());
        }
        // Every set has kernels: a kernel breakdown that adds up to 100 %.
        let types = rows(&stack, &job, "kernel-types").await;
        let mut pct: HashMap<u64, f64> = HashMap::new();
        for t in &types {
            *pct.entry(t["rank"].as_u64().unwrap()).or_default() += f(&t["pct"]);
        }
        assert!(!pct.is_empty(), "{set}");
        // diff of a rank against itself: every kernel, no difference.
        let r = pct.keys().min().copied().unwrap();
        let d = stack
            .api_get(&format!("/api/v1/jobs/{job}/diff?rank={r}&vs_rank={r}"))
            .await;
        let rows = d["rows"].as_array().unwrap_or_else(|| panic!("{set}: {d}"));
        assert!(!rows.is_empty(), "{set}: {d}");
        assert!(
            rows.iter()
                .all(|x| f(&x["diff_ns_per_step"]).abs() < 1e-6 && x["only_on"] == ""),
            "{set}: {d}"
        );
        assert!(
            pct.values().all(|p| (p - 100.0).abs() < 1e-6),
            "{set}: {pct:?}"
        );
    }

    assert!(
        with_mfu.len() >= 3,
        "V100, A100 and B200 sets have a peak: {with_mfu:?}"
    );
    // Launch statistics: every DLRM rank launches hundreds of kernels; HTA's
    // three filters count subsets of them.
    let l = rows(&stack, "set4", "launches").await;
    assert_eq!(l.len(), 8, "{l:?}");
    for r in &l {
        let n = r["launches"].as_u64().unwrap();
        assert!(n > 100, "{r}");
        for k in ["short_kernels", "runtime_outliers", "launch_delay_outliers"] {
            assert!(r[k].as_u64().unwrap() <= n, "{k}: {r}");
        }
        assert!(r["max_cpu_kernel"].is_string(), "{r}");
    }
    let http = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(10));
    let base = format!("http://{}", stack.http_addr());
    let err = |path: &str| {
        let http = &http;
        let url = format!("{base}{path}");
        async move {
            http.get_json::<Value>(&url)
                .await
                .expect_err("an error")
                .to_string()
        }
    };
    let e = err("/api/v1/jobs/nope/kernels").await;
    assert!(
        e.contains("404") && e.contains("job \"nope\" not found"),
        "{e}"
    );
    let e = err("/api/v1/jobs/set4/idle?rank=42").await;
    assert!(
        e.contains("rank 42") && e.contains("0, 1, 2, 3, 4, 5, 6, 7"),
        "{e}"
    );
    let e = err("/api/v1/jobs/set4/kernels?ratio=1.5").await;
    assert!(e.contains("400") && e.contains("ratio"), "{e}");
    stack.stop().await;
}

/// Round trip: a timeline exported per rank (`rankscope timeline --rank R`)
/// from an imported trace set, imported again as a new job, gives the same
/// per-rank temporal breakdown, kernel breakdown and steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_timeline_imports_back_to_the_same_breakdown() {
    let stack = Stack::start_without_agent().await;
    import_set(&stack, "hta_trace_filter_2rank_sm80", "rt-src").await;
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("rankscope");
    let collector = format!("http://{}", stack.http_addr());
    for rank in [0, 1] {
        let out = std::process::Command::new(&bin)
            .args([
                "--collector",
                &collector,
                "timeline",
                "--job",
                "rt-src",
                "--rank",
            ])
            .arg(rank.to_string())
            .arg("-o")
            .arg(dir.path().join(format!("rank{rank}.json.gz")))
            .output()
            .expect("rankscope timeline");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The file is a Chrome trace: a named process per rank, flows balanced.
    let mut json = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(
            std::fs::File::open(dir.path().join("rank0.json.gz")).unwrap(),
        ),
        &mut json,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&json).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    assert!(ev.iter().any(|e| e["ph"] == "M"
        && e["name"] == "process_name"
        && e["args"]["name"]
            .as_str()
            .unwrap_or("")
            .starts_with("rank 0")));
    assert_eq!(v["distributedInfo"]["rank"], 0);
    let files = import::discover(&[dir.path().to_path_buf()]).expect("files");
    let opts = import::ImportOptions::new("rt-dst");
    send::import_and_send(files, &opts, &send_opts(&stack))
        .await
        .expect("import the timeline");
    let key = |rows: Vec<Value>| {
        let mut v: Vec<String> = rows
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if let Some(o) = r.as_object_mut() {
                    o.remove("job");
                }
                r.to_string()
            })
            .collect();
        v.sort();
        v
    };
    for view in ["ranks", "kernel-types", "memcpy"] {
        let a = key(rows(&stack, "rt-src", view).await);
        let b = key(rows(&stack, "rt-dst", view).await);
        assert!(!a.is_empty(), "{view}");
        assert_eq!(a, b, "{view}: the round trip changed it");
    }
    // Bad input: an empty range and an unknown job are 4xx with the reason.
    let http = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(10));
    for (path, want) in [
        (
            "/api/v1/jobs/rt-src/timeline?from_step=9&to_step=3",
            "empty step range",
        ),
        (
            "/api/v1/jobs/rt-src/timeline?from_step=100000&to_step=100001",
            "no step of job",
        ),
        ("/api/v1/jobs/nobody/timeline", "not found"),
        ("/api/v1/jobs/rt-src/timeline?ranks=x", "not a rank number"),
        (
            "/api/v1/jobs/rt-src/timeline?max_events=10",
            "over the cap of 10",
        ),
    ] {
        let e = http
            .get_json::<Value>(&format!("{collector}{path}"))
            .await
            .expect_err(path)
            .to_string();
        assert!(e.contains(want), "{path}: {e}");
    }
    stack.stop().await;
}
