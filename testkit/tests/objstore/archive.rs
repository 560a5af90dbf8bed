//! The agent's trace archive: a daemon trace captured on request (a stand-in
//! for libkineto, `FakeClient`, polling the agent's `@dynolog` for a real
//! process whose environment names the job; the trace file is a real one
//! libkineto wrote) is uploaded to moto under `[traces] archive_url`
//! before the agent deletes it; `rankscope traces` lists its URL, and
//! `rankscope import <that URL>` as a new job gives the same per-rank
//! breakdown. With `archive_torch`, the only tests here that read provider
//! variables in-process (the agent runs in the test): each sets them before
//! its agent starts, one at a time (`common::SERIAL`, held by every test
//! whose agent serves libkineto's fixed `@dynolog` name).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rankscope_testkit::objstore::ObjstoreServer;

use crate::common::kineto_client::FakeClient;

use super::{import, seed, text};
use crate::common::{self, Stack};

pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn log_file(config: &str) -> Option<PathBuf> {
    config
        .lines()
        .find_map(|l| l.strip_prefix("ACTIVITIES_LOG_FILE="))
        .map(PathBuf::from)
}

/// A stack whose agent serves `@dynolog` and archives to `archive_url`.
pub(crate) async fn stack(archive_url: &str) -> Stack {
    let mut s = Stack::start_without_agent().await;
    let mut cfg = common::agent_config(&format!("http://{}", s.grpc_addr()), s.dir.path());
    cfg.trace_dir = s.dir.path().join("traces").to_string_lossy().into_owned();
    cfg.kineto_daemon_name = "dynolog".into();
    cfg.traces.archive_url = archive_url.to_owned();
    s.agent = Some(common::start_dynolog_agent(cfg).await);
    s
}

/// Per step of a job's one rank: (compute, communication, idle) ns, in step
/// order (the daemon import numbers steps from the job's next step, a file
/// import from 0: the order is what is compared).
pub(crate) async fn breakdown(stack: &Stack, job: &str) -> Vec<serde_json::Value> {
    let v = stack
        .api_get(&format!("/api/v1/jobs/{job}/breakdown"))
        .await;
    let mut rows = v["breakdown"]
        .as_array()
        .or_else(|| v["steps"].as_array())
        .unwrap_or_else(|| panic!("no breakdown for {job}: {v}"))
        .clone();
    rows.sort_by_key(|r| r["step"].as_u64());
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                o.retain(|k, _| k != "step" && !k.contains("job") && !k.ends_with("_ns_at"));
            }
            r
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_daemon_trace_is_archived_listed_and_imported_back() {
    let _one = common::SERIAL.lock().await;
    let moto = ObjstoreServer::moto(None).unwrap_or_else(|e| panic!("{e}"));
    seed(&["s3", &moto.endpoint, "k", "s", "archive", "x/"]);
    // The in-process agent's credentials and endpoint (set before it starts;
    // every other test here passes them to a child process instead).
    for (k, v) in [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ] {
        std::env::set_var(k, v);
    }
    let stack = stack("s3://archive/traces/{job}/{trace_id}/").await;
    let job = format!("archived-{}", std::process::id());
    let rank = Killed(
        Command::new("sleep")
            .arg("300")
            .env("RANKSCOPE_JOB_ID", &job)
            .env("RANK", "0")
            .env("WORLD_SIZE", "1")
            .spawn()
            .expect("spawn"),
    );
    let pid = rank.0.id();
    let client = FakeClient::new("archive", "dynolog");
    let http = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(5));
    let url = format!("http://{}", stack.http_addr());
    let deadline = Instant::now() + Duration::from_secs(90);
    let trace = loop {
        assert_eq!(client.poll(pid), "", "nothing requested yet");
        let attributed = stack
            .agent
            .as_ref()
            .expect("agent")
            .kineto_processes()
            .iter()
            .any(|(_, id)| id.job_id == job);
        if attributed {
            match rankscope_cli::query::traces::request(
                &http,
                &url,
                &job,
                &[],
                rankscope_cli::query::traces::TraceSpan::DurationMs(100),
            )
            .await
            {
                Ok((id, _)) => break id,
                Err(e) => assert!(e.to_string().contains("not found"), "{e}"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "the agent never attributed {job}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = loop {
        if let Some(f) = log_file(&client.poll(pid)) {
            break f;
        }
        assert!(Instant::now() < deadline, "no trace config for pid {pid}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let fixture = rankscope_testkit::workspace_root()
        .join("kineto/tests/fixtures/daemon_cpu_2rank/rank0.json.gz");
    // libkineto writes plain JSON where the agent told it to.
    let mut json = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(fixture).expect("fixture")),
        &mut json,
    )
    .expect("gunzip the fixture");
    std::fs::write(&file, &json).expect("write the trace");
    let deadline = Instant::now() + Duration::from_secs(60);
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
    let name = file
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let want_url = format!("s3://archive/traces/{job}/{trace}/{name}");
    assert_eq!(row["archive_url"], want_url.as_str(), "{row}");
    let counted = stack.agent.as_ref().expect("agent").metrics();
    assert_eq!(
        (counted.traces_archived, counted.trace_archive_failures),
        (1, 0)
    );
    // The CLI's listing shows it too.
    let listing = Command::new(rankscope_testkit::bin_path("rankscope"))
        .args(["--collector", &url, "traces", "--job", &job])
        .output()
        .expect("rankscope traces");
    assert!(
        String::from_utf8_lossy(&listing.stdout).contains(&want_url),
        "{}",
        text(&listing)
    );
    drop(rank);
    // Import the archived file as a new job: the same per-step breakdown.
    let env = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ];
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
    assert!(!want.is_empty());
    assert_eq!(got, want, "archived and re-imported breakdowns differ");
    // The same object as a plain http(s) URL of one file (moto serves
    // path-style GETs; the object made public-read, no credentials).
    let object = want_url.trim_start_matches("s3://archive/");
    seed(&["s3-public", &moto.endpoint, "k", "s", "archive", object]);
    let plain = want_url.replacen("s3://", &format!("{}/", moto.endpoint), 1);
    let by_url = format!("{job}-url");
    let out = import(
        &stack,
        &[],
        &by_url,
        &[
            "--rank",
            "0",
            "--world-size",
            "1",
            "--node",
            "e2e-node",
            &plain,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(breakdown(&stack, &by_url).await, want);
    stack.stop().await;
}
