//! The Operator and Memory views of imported traces through the real
//! importer, collector and ClickHouse (`rankscope import`, then the
//! `ops` / `memory` routes and CLI): per rank they equal torch-tb-profiler
//! 0.4.3 on the same files (`cli/tests/fixtures/expected-tbp/`, made by
//! `make_expected.py` there; the importer-level comparison of every set is
//! `kineto/tests/tbp_views.rs`), job-wide rows carry the median over ranks
//! and the max with its rank, and bad input gets a clear answer.

use crate::common;
#[path = "trace_views/events.rs"]
mod events;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use rankscope_cli::import::{self, send};
use rankscope_cli::query::http::HttpError;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/fixtures")
}

async fn import_set(stack: &Stack, set: &str, job: &str) {
    let files = import::discover(&[fixtures().join("kineto").join(set)]).expect("trace files");
    let opts = import::ImportOptions::new(job);
    let send = stack.send_options();
    let reports = send::import_and_send(files, &opts, &send)
        .await
        .expect("import");
    assert!(reports.iter().all(|r| r.rows > 0), "{set}: {reports:?}");
}

fn expected(set: &str, stem: &str) -> Value {
    let p = fixtures().join(format!("expected-tbp/{set}__{stem}.tbp.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).expect("expected file")).expect("json")
}

async fn get(stack: &Stack, path: &str) -> Result<Value, HttpError> {
    rankscope_cli::query::get_json(&format!("http://{}{}", stack.http_addr(), path)).await
}

fn status(r: Result<Value, HttpError>) -> (u16, String) {
    match r {
        Err(HttpError::Status {
            status, message, ..
        }) => (status, message),
        other => panic!("expected an HTTP error, got {other:?}"),
    }
}

/// Sums one rank's rows by operator name: (calls, host self, host total,
/// device total) in µs.
fn by_name(rows: &[Value]) -> BTreeMap<String, (u64, f64, f64, f64, f64)> {
    let mut m: BTreeMap<String, (u64, f64, f64, f64, f64)> = BTreeMap::new();
    for r in rows {
        let e = m.entry(r["name"].as_str().unwrap().to_owned()).or_default();
        e.0 += r["calls"].as_u64().unwrap();
        e.1 += r["host_self_us"].as_f64().unwrap();
        e.2 += r["host_total_us"].as_f64().unwrap();
        e.3 += r["device_total_us"].as_f64().unwrap();
        e.4 += r["runtime_us"].as_f64().unwrap();
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_and_memory_of_imported_sets_equal_the_plugin() {
    let stack = Stack::start_without_agent().await;
    import_set(&stack, "param_dlrm_8rank_v100", "dlrm").await;
    import_set(&stack, "hta_nccl_parser_rank0_a100", "nccl").await;
    import_set(&stack, "hta_df_index_resolver_rank1_v100", "mem").await;

    // DLRM rank 3: 0.4.3 links no runtime call there (their External id
    // is their correlation id): calls and host total equal, and its host
    // self equals ours plus the runtime calls' time.
    let exp = expected("param_dlrm_8rank_v100", "worker3_step_12");
    let v = stack.api_get("/api/v1/jobs/dlrm/ops?rank=3").await;
    let ours = by_name(v["rows"].as_array().unwrap());
    let theirs = exp["as_is"]["ops"].as_object().unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (name, (calls, host_self, host_total, _, runtime)) in &ours {
        let t = &theirs[name];
        assert_eq!(*calls, t["calls"].as_u64().unwrap(), "{name}");
        let tol = 0.05 + 1e-3 * *calls as f64;
        assert!(
            (host_total - t["host_total"].as_f64().unwrap()).abs() <= tol,
            "{name}"
        );
        assert!(
            (host_self + runtime - t["host_self"].as_f64().unwrap()).abs() <= tol,
            "{name}"
        );
    }
    // Group by (operator, input shape): the plugin's "Operator + Input
    // Shape" table of the same file, through the collector.
    let v = stack
        .api_get("/api/v1/jobs/dlrm/ops?rank=3&group_by=shape")
        .await;
    assert!(v["notes"].as_array().unwrap().is_empty(), "{v}");
    let theirs = exp["as_is"]["ops_by_shape"].as_object().unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), theirs.len(), "(operator, shape) rows");
    for r in rows {
        let key = format!(
            "{}###{}",
            r["name"].as_str().unwrap(),
            r["input_shape"].as_str().unwrap()
        );
        let t = theirs
            .get(&key)
            .unwrap_or_else(|| panic!("{key} is not the plugin's"));
        let calls = r["calls"].as_u64().unwrap();
        assert_eq!(calls, t["calls"].as_u64().unwrap(), "{key}");
        let tol = 0.05 + 1e-3 * calls as f64;
        let host_total = r["host_total_us"].as_f64().unwrap();
        assert!(
            (host_total - t["host_total"].as_f64().unwrap()).abs() <= tol,
            "{key}"
        );
    }
    let job_wide = stack
        .api_get("/api/v1/jobs/dlrm/ops?group_by=shape&top=3")
        .await;
    assert!(
        job_wide["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["input_shape"].is_string()),
        "{job_wide}"
    );
    // A set taken without record_shapes: name rows and a note.
    let v = stack.api_get("/api/v1/jobs/mem/ops?group_by=shape").await;
    assert!(
        v["notes"][0]
            .as_str()
            .unwrap_or("")
            .contains("record_shapes"),
        "{v}"
    );

    // The A100 set links: device times equal the plugin's too.
    let exp = expected("hta_nccl_parser_rank0_a100", "nccl_data");
    let v = stack.api_get("/api/v1/jobs/nccl/ops?rank=0").await;
    let ours = by_name(v["rows"].as_array().unwrap());
    let theirs = exp["runtime_fixed"]["ops"].as_object().unwrap();
    for (name, (calls, _, host_total, device_total, _)) in &ours {
        let t = &theirs[name];
        let tol = 0.05 + 1e-3 * *calls as f64;
        assert!(
            (host_total - t["host_total"].as_f64().unwrap()).abs() <= tol,
            "{name}"
        );
        assert!(
            (device_total - t["device_total"].as_f64().unwrap()).abs() <= tol,
            "{name}: {device_total} vs {}",
            t["device_total"]
        );
    }
    assert!(ours.values().any(|o| o.3 > 0.0), "device time attributed");

    // Job-wide: one row per operator over the 8 ranks, with the max's rank.
    let v = stack.api_get("/api/v1/jobs/dlrm/ops?top=5").await;
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        assert_eq!(r["ranks"], 8, "{r}");
        let (med, max) = (
            r["host_self_us_median"].as_f64().unwrap(),
            r["host_self_us_max"].as_f64().unwrap(),
        );
        assert!(med <= max, "{r}");
        let rank = r["host_self_max_rank"].as_u64().unwrap();
        let per = stack
            .api_get(&format!("/api/v1/jobs/dlrm/ops?rank={rank}"))
            .await;
        let mine = by_name(per["rows"].as_array().unwrap());
        let name = r["name"].as_str().unwrap();
        assert!(
            (mine[name].1 - max).abs() < 1e-6,
            "{name}: max is rank {rank}'s"
        );
    }

    // Memory: peaks and the per-operator table equal the plugin's.
    let exp = expected("hta_df_index_resolver_rank1_v100", "df_index_resolver");
    let v = stack
        .api_get("/api/v1/jobs/mem/memory?ops=true&rank=1")
        .await;
    let peaks = exp["as_is"]["memory_peaks"].as_object().unwrap();
    for p in v["peaks"].as_array().unwrap() {
        let want = &peaks[p["device"].as_str().unwrap()];
        assert_eq!(p["peak_allocated_bytes"].as_f64(), want[0].as_f64(), "{p}");
        assert_eq!(p["peak_reserved_bytes"].as_f64(), want[1].as_f64(), "{p}");
    }
    assert_eq!(v["peaks"].as_array().unwrap().len(), peaks.len());
    let table = exp["as_is"]["memory_ops"].as_object().unwrap();
    let n: usize = table.values().map(|r| r.as_array().unwrap().len()).sum();
    assert_eq!(v["ops"].as_array().unwrap().len(), n);
    for r in v["ops"].as_array().unwrap() {
        let rows = table[r["device"].as_str().unwrap()].as_array().unwrap();
        let t = rows
            .iter()
            .find(|t| t[0] == r["name"])
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(r["calls"].as_u64(), t[1].as_u64(), "{r}");
        assert_eq!(r["size_increase_bytes"].as_f64(), t[2].as_f64(), "{r}");
        assert_eq!(r["self_size_increase_bytes"].as_f64(), t[3].as_f64(), "{r}");
        assert_eq!(r["allocation_count"].as_u64(), t[4].as_u64(), "{r}");
        assert_eq!(r["self_allocation_count"].as_u64(), t[5].as_u64(), "{r}");
        assert_eq!(r["allocation_size_bytes"].as_f64(), t[6].as_f64(), "{r}");
        assert_eq!(
            r["self_allocation_size_bytes"].as_f64(),
            t[7].as_f64(),
            "{r}"
        );
    }
    assert!(!v["curve"].as_array().unwrap().is_empty(), "a rank's curve");

    // A real torch CPU DDP job (profile_memory=True, with_stack=True; rank 1
    // holds an extra 4 MiB): peaks and table equal the plugin's, rank 1 has
    // the larger peak, and the stacks name the script's own file and line.
    import_set(&stack, "cpu_memory_stack_2rank", "torchmem").await;
    let v = stack.api_get("/api/v1/jobs/torchmem/memory?ops=true").await;
    let mut peak = [0.0; 2];
    for r in 0..2u32 {
        let exp = expected("cpu_memory_stack_2rank", &format!("rank{r}"));
        let want = &exp["as_is"]["memory_peaks"]["CPU"];
        let p = v["peaks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["rank"] == r && p["device"] == "CPU")
            .unwrap_or_else(|| panic!("rank {r}: {v}"));
        assert_eq!(p["peak_allocated_bytes"].as_f64(), want[0].as_f64(), "{p}");
        peak[r as usize] = want[0].as_f64().unwrap();
        let rows = exp["as_is"]["memory_ops"]["CPU"].as_array().unwrap();
        let ours: Vec<&Value> = v["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["rank"] == r)
            .collect();
        assert_eq!(ours.len(), rows.len(), "rank {r}");
        for t in rows {
            let o = ours
                .iter()
                .find(|o| o["name"] == t[0])
                .unwrap_or_else(|| panic!("{t}"));
            assert_eq!(o["calls"].as_u64(), t[1].as_u64(), "{t}");
            assert_eq!(o["size_increase_bytes"].as_f64(), t[2].as_f64(), "{t}");
            assert_eq!(
                o["self_allocation_size_bytes"].as_f64(),
                t[7].as_f64(),
                "{t}"
            );
        }
    }
    assert!(
        peak[1] > peak[0] + 4.0e6,
        "rank 1 holds 4 MiB more: {peak:?}"
    );
    events::memory_events_agree_with_the_table(&stack, &v, &peak).await;
    let v = stack
        .api_get("/api/v1/jobs/torchmem/ops?rank=0&group_by=stack")
        .await;
    assert!(v["notes"].as_array().unwrap().is_empty(), "{v}");
    let script = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["frames"].as_array().unwrap().iter())
        .find(|f| {
            f["file"]
                .as_str()
                .unwrap()
                .ends_with("make_cpu_memory_stack_traces.py")
        })
        .unwrap_or_else(|| panic!("no frame of the script: {v}"));
    assert!(script["line"].as_u64().unwrap() > 0, "{script}");

    // The CLI: the stack rows name the script's file:line.
    let bin = std::env::current_exe()
        .expect("test exe")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("rankscope");
    let out = std::process::Command::new(&bin)
        .args(["--collector", &format!("http://{}", stack.http_addr())])
        .args([
            "ops",
            "--job",
            "torchmem",
            "--rank",
            "0",
            "--group-by",
            "stack",
            "--format",
            "csv",
        ])
        .output()
        .expect("rankscope ops");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("make_cpu_memory_stack_traces.py:"), "{text}");
    let out = std::process::Command::new(&bin)
        .args(["--collector", &format!("http://{}", stack.http_addr())])
        .args([
            "ops",
            "--job",
            "dlrm",
            "--rank",
            "3",
            "--group-by",
            "shape",
            "--format",
            "csv",
        ])
        .output()
        .expect("rankscope ops --group-by shape");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines().next().unwrap_or("").contains("input"),
        "{text}"
    );
    assert!(text.contains("\"[["), "shapes in the CSV: {text}");
    let out = std::process::Command::new(&bin)
        .args(["--collector", &format!("http://{}", stack.http_addr())])
        .args(["ops", "--job", "dlrm", "--top", "0"])
        .output()
        .expect("rankscope ops");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("top must be"),
        "{out:?}"
    );

    // Bad input.
    let none = stack.api_get("/api/v1/jobs/dlrm/memory").await;
    assert_eq!(none["peaks"].as_array().map(Vec::len), Some(0));
    assert!(
        none["notes"][0]
            .as_str()
            .unwrap()
            .contains("profile_memory"),
        "{none}"
    );
    let stack_note = stack
        .api_get("/api/v1/jobs/dlrm/ops?group_by=stack&rank=0")
        .await;
    assert!(
        stack_note["notes"][0]
            .as_str()
            .unwrap()
            .contains("with_stack"),
        "{stack_note}"
    );
    let (s, m) = status(get(&stack, "/api/v1/jobs/dlrm/ops?top=0").await);
    assert_eq!(s, 400, "{m}");
    assert!(m.contains("top"), "{m}");
    let (s, _) = status(get(&stack, "/api/v1/jobs/dlrm/ops?top=10001").await);
    assert_eq!(s, 400);
    let (s, m) = status(get(&stack, "/api/v1/jobs/dlrm/ops?group_by=module").await);
    assert_eq!(s, 400, "{m}");
    let (s, _) = status(get(&stack, "/api/v1/jobs/nosuchjob/ops").await);
    assert_eq!(s, 404);
    let (s, _) = status(get(&stack, "/api/v1/jobs/nosuchjob/memory").await);
    assert_eq!(s, 404);
    let (s, m) = status(get(&stack, "/api/v1/jobs/dlrm/ops?rank=99").await);
    assert_eq!(s, 404, "{m}");
    stack.stop().await;
}
