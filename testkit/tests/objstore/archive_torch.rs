//! The agent's trace archive with real, unmodified PyTorch: a plain
//! torchrun job (`python/tests/workloads/ddp_train.py`, gloo, CPU, one
//! rank) started with `KINETO_USE_DAEMON=1`, as in `kineto_daemon.rs`, is
//! traced on request (`rankscope_cli::query::traces::request`, through the
//! collector to the agent's `@dynolog`); the trace libkineto writes is
//! uploaded to a moto bucket under `[traces] archive_url` before the agent
//! deletes it; `rankscope traces` lists its URL, and `rankscope import
//! <that URL>` as a new job gives the same per-step breakdown.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rankscope_testkit::objstore::ObjstoreServer;

use super::archive::{breakdown, stack, Killed};
use super::{import, seed, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_torch_jobs_daemon_trace_is_archived_listed_and_imported_back() {
    let _one = crate::common::SERIAL.lock().await;
    let moto = ObjstoreServer::moto(None).unwrap_or_else(|e| panic!("{e}"));
    seed(&["s3", &moto.endpoint, "k", "s", "archive", "x/"]);
    let env = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ];
    // The in-process agent's credentials and endpoint, before it starts.
    for (k, v) in env {
        std::env::set_var(k, v);
    }
    let stack = stack("s3://archive/traces/{job}/{trace_id}/").await;
    let job = format!("archived-torch-{}", std::process::id());
    let python = rankscope_testkit::venv_python();
    // The trace is asked once the job trains: a window from a poll during
    // start-up may hold no step.
    let progress = stack.dir.path().join("archived-torch.progress");
    let torchrun = Killed(
        Command::new(&python)
            .args([
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "1",
                "--master-port",
            ])
            .arg(rankscope_testkit::free_port().to_string())
            .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_train.py"))
            .args(["--steps", "400", "--step-ms", "30", "--progress"])
            .arg(&progress)
            .env("KINETO_USE_DAEMON", "1")
            .env("RANKSCOPE_JOB_ID", &job)
            .env("OMP_NUM_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("torchrun"),
    );
    crate::common::wait_progress(&progress, 3).await;
    // A 1 s trace, once libkineto has registered the rank with the agent.
    let http = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(5));
    let url = format!("http://{}", stack.http_addr());
    let deadline = Instant::now() + Duration::from_secs(120);
    let trace = loop {
        match rankscope_cli::query::traces::request(
            &http,
            &url,
            &job,
            &[],
            rankscope_cli::query::traces::TraceSpan::DurationMs(1000),
        )
        .await
        {
            Ok((id, _)) => break id,
            Err(e) => assert!(e.to_string().contains("not found"), "{e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the agent never attributed {job}: did the torch job start?"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let row = loop {
        let v = stack
            .api_get(&format!("/api/v1/jobs/{job}/traces?trace_id={trace}"))
            .await;
        let rows = v["traces"].as_array().cloned().unwrap_or_default();
        if let Some(r) = rows.first().filter(|r| r["state"] == "imported") {
            break r.clone();
        }
        assert!(
            rows.iter().all(|r| r["state"] != "failed") && Instant::now() < deadline,
            "never imported: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The job runs to its end (killing torchrun would orphan its worker).
    let mut torchrun = torchrun;
    let status = torchrun.0.wait().expect("wait for torchrun");
    assert!(status.success(), "the torch job failed: {status}");
    let want_url = row["archive_url"].as_str().unwrap_or_default().to_owned();
    let prefix = format!("s3://archive/traces/{job}/{trace}/");
    assert!(
        want_url.starts_with(&prefix) && want_url.len() > prefix.len(),
        "{row}"
    );
    let counted = stack.agent.as_ref().expect("agent").metrics();
    assert_eq!(
        (counted.traces_archived, counted.trace_archive_failures),
        (1, 0)
    );
    let listing = Command::new(rankscope_testkit::bin_path("rankscope"))
        .args(["--collector", &url, "traces", "--job", &job])
        .output()
        .expect("rankscope traces");
    assert!(
        String::from_utf8_lossy(&listing.stdout).contains(&want_url),
        "{}",
        text(&listing)
    );
    // Import the archived file as a new job: the same per-step breakdown.
    let again = format!("{job}-again");
    let out = import(
        &stack,
        &env,
        &again,
        &[
            "--rank",
            "0",
            "--world-size",
            "1",
            "--node",
            "e2e-node",
            &want_url,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let (want, got) = (
        breakdown(&stack, &job).await,
        breakdown(&stack, &again).await,
    );
    assert!(!want.is_empty(), "the daemon trace gave no steps");
    assert_eq!(got, want, "archived and re-imported breakdowns differ");
    stack.stop().await;
}
