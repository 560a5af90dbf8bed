//! `rankscope import` of the non-PyTorch producers through the collector:
//! real PaddlePaddle traces (2 processes, CPU, `profile_memory=True`) and a
//! real ONNX Runtime profile, written at test time by the producer scripts
//! of kineto/tests/producers (the venv of `make producers`), stored with
//! their steps on every rank; in the same multi-file import, a truncated
//! Paddle trace and a file of an unknown format fail with errors naming
//! them and the formats read, and nothing of the other files is lost.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use rankscope_cli::import::{self, send};

fn python() -> PathBuf {
    let venv = std::env::var_os("RANKSCOPE_PRODUCERS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv-producers"));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "the producers venv {} is missing: run `make producers` (or set \
         RANKSCOPE_PRODUCERS_VENV)",
        venv.display()
    );
    py
}

fn produce(args: &[&std::ffi::OsStr]) {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kineto/tests/producers");
    let mut cmd = Command::new(python());
    cmd.arg(scripts.join(args[0])).args(&args[1..]);
    let out = cmd.output().expect("start the producer");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn send_opts(stack: &Stack) -> send::SendOptions {
    send::SendOptions {
        parallel_files: 4,
        parse_threads: 2,
        ..stack.send_options()
    }
}

async fn wait_final(stack: &Stack, job: &str, want: u64) {
    let collector = format!("http://{}", stack.http_addr());
    let http = rankscope_cli::query::http::HttpClient::new(std::time::Duration::from_secs(5));
    let done = import::wait::until_final(
        &http,
        &collector,
        job,
        want,
        std::time::Duration::from_secs(60),
        false,
    )
    .await
    .expect("analytics final");
    assert_eq!(done, want);
}

/// Per operator of `rank` in the stored Operator view
/// (`/api/v1/jobs/{job}/ops`): (calls, host total ns).
async fn view_ops(
    stack: &Stack,
    job: &str,
    rank: u32,
) -> std::collections::BTreeMap<String, (u64, f64)> {
    let body = stack
        .api_get(&format!("/api/v1/jobs/{job}/ops?rank={rank}"))
        .await;
    body["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().expect("name").to_owned(),
                (
                    r["calls"].as_u64().expect("calls"),
                    r["host_total_us"].as_f64().expect("host_total_us") * 1000.0,
                ),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paddle_and_onnx_runtime_traces_import_and_bad_files_do_not_stop_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pd = dir.path().join("paddle");
    for rank in ["0", "1"] {
        produce(&[
            "paddle_train.py".as_ref(),
            pd.as_os_str(),
            rank.as_ref(),
            "3".as_ref(),
        ]);
    }
    let mut paddle: Vec<PathBuf> = std::fs::read_dir(&pd)
        .expect("paddle dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".paddle_trace.json"))
        .collect();
    paddle.sort();
    let ort_dir = dir.path().join("ort");
    std::fs::create_dir_all(&ort_dir).expect("mkdir");
    let model = ort_dir.join("model.onnx");
    produce(&[
        "ort_profile.py".as_ref(),
        "export".as_ref(),
        model.as_os_str(),
    ]);
    produce(&[
        "ort_profile.py".as_ref(),
        "run".as_ref(),
        model.as_os_str(),
        ort_dir.as_os_str(),
        "4".as_ref(),
    ]);
    let ort = std::fs::read_dir(&ort_dir)
        .expect("ort dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.to_string_lossy().contains("ort_profile_"))
        .expect("the ORT profile");

    let bytes = std::fs::read(&paddle[1]).expect("read");
    let cut = dir.path().join("cut.paddle_trace.json");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
    let odd = dir.path().join("results.json");
    std::fs::write(&odd, br#"{"images_per_s": 1234}"#).expect("write");

    let stack = Stack::start_without_agent().await;
    let mut opts = import::ImportOptions::new("paddle");
    opts.world_size_override = Some(2);
    let files = vec![
        paddle[0].clone(),
        cut.clone(),
        odd.clone(),
        paddle[1].clone(),
    ];
    let results = send::import_and_send_each(files, &opts, &send_opts(&stack))
        .await
        .expect("import");
    assert_eq!(results.len(), 4);
    for (i, rank) in [(0, 0), (3, 1)] {
        let r = results[i].as_ref().expect("a good Paddle file");
        assert_eq!(r.summary.identity.rank, rank);
        assert_eq!(r.summary.identity.labels["source"], "paddle");
        assert!(r.rows > 0);
    }
    let e = results[1].as_ref().expect_err("truncated").to_string();
    assert!(
        e.contains("cut.paddle_trace.json") && e.contains("truncated"),
        "{e}"
    );
    let e = results[2].as_ref().expect_err("unknown format").to_string();
    for needle in ["results.json", "PaddlePaddle", "ONNX Runtime", "Kineto"] {
        assert!(e.contains(needle), "{needle} not in {e}");
    }
    // 4 steps (prof.start() opens step 0) on each of the 2 ranks, analysed.
    wait_final(&stack, "paddle", 8).await;
    let steps = stack.api_steps("paddle", "").await;
    assert_eq!(steps.len(), 8, "{steps:?}");
    // The stored Operator view shows Paddle's own Operator Summary numbers.
    for rank in 0..2 {
        let summary = pd.join(format!("rank{rank}.summary.json"));
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(summary).expect("summary")).expect("json");
        let want = summary["operators"].as_object().expect("operators");
        let got = view_ops(&stack, "paddle", rank).await;
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>(),
            "rank {rank}: operator names"
        );
        for (name, item) in want {
            let (calls, host_total_ns) = got[name];
            assert_eq!(
                calls,
                item["calls"].as_u64().unwrap(),
                "rank {rank} {name}: calls"
            );
            let paddle = item["cpu_total_ns"].as_u64().unwrap() as f64;
            assert!(
                (host_total_ns - paddle).abs() <= 0.01 * paddle,
                "rank {rank} {name}: view {host_total_ns} ns, Paddle's summary {paddle} ns"
            );
        }
    }

    let reports = send::import_and_send(
        vec![ort],
        &import::ImportOptions::new("ort"),
        &send_opts(&stack),
    )
    .await
    .expect("import ORT");
    assert_eq!(reports[0].summary.identity.labels["source"], "onnxruntime");
    wait_final(&stack, "ort", 4).await;
    let steps = stack.api_steps("ort", "").await;
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "one step per model_run"
    );
    // The stored Operator view: per op type the profile's own totals.
    let totals: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ort_dir.join("ort_totals.json")).expect("ORT totals"),
    )
    .expect("json");
    let want = totals["op_types"].as_object().expect("op types");
    let got = view_ops(&stack, "ort", 0).await;
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (op, t) in want {
        let (calls, host_total_ns) = got[op];
        assert_eq!(calls, t["calls"].as_u64().unwrap(), "{op}: calls");
        let ort_ns = (t["dur_us"].as_u64().unwrap() * 1000) as f64;
        assert!(
            (host_total_ns - ort_ns).abs() < 0.5,
            "{op}: view {host_total_ns} ns, the profile's {ort_ns} ns"
        );
    }
    stack.stop().await;
}
