//! Traces in object storage, end to end against real servers the tests
//! start (testkit's `objstore` module; `make objstore-servers` installs
//! them): `rankscope import` of the DLRM set from a moto S3 server and
//! azurite gives the same `ranks` answers as the local import;
//! wrong credentials, a missing bucket, an empty prefix and a store that is
//! down give clear errors (and the rest of a multi-path import goes on);
//! the agent archives a daemon trace to S3 (`[traces] archive_url`), the
//! listing shows the URL, and importing that URL gives the same per-rank
//! breakdown, for a stand-in rank (`archive`) and for a real torch job
//! traced through libkineto's daemon protocol (`archive_torch`). Files are seeded with each provider's own client
//! (`testkit/objstore_seed.py`), not with rankscope's code.
//!
//! Not tested: GCS. PyPI's `gcp-storage-emulator` serves only GCS's JSON
//! API; `object_store` lists and heads objects through GCS's XML API
//! (`GET /bucket?list-type=2`, `HEAD /bucket/object`), which the emulator
//! answers with 501 Not Implemented or a bucket list.

use crate::common;

#[path = "objstore/archive.rs"]
mod archive;
#[path = "objstore/archive_torch.rs"]
mod archive_torch;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::Stack;
use rankscope_testkit::objstore::{objstore_venv_bin, ObjstoreServer};

pub(crate) fn dlrm_dir() -> PathBuf {
    rankscope_testkit::workspace_root().join("cli/tests/fixtures/kineto/param_dlrm_8rank_v100")
}

/// Every file of the DLRM set (traces, README and HTA results).
fn dlrm_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dlrm_dir())
        .expect("dlrm set")
        .flatten()
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

/// Runs the seeding script in the servers' venv; its stdout.
pub(crate) fn seed(args: &[&str]) -> String {
    let python = objstore_venv_bin("python").unwrap_or_else(|e| panic!("{e}"));
    let script = rankscope_testkit::workspace_root().join("testkit/objstore_seed.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .expect("seed script runs");
    assert!(
        out.status.success(),
        "seeding {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rankscope import --job JOB ARGS...` against the stack, with only the
/// given provider variables (none of the test process's own).
pub(crate) fn import(stack: &Stack, env: &[(&str, &str)], job: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(rankscope_testkit::bin_path("rankscope"));
    for (k, _) in std::env::vars() {
        if ["AWS_", "AZURE", "GOOGLE_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied())
        .arg("--collector")
        .arg(format!("http://{}", stack.http_addr()))
        .args(["import", "--job", job, "--wait-secs", "120", "--ingest"])
        .arg(format!("http://{}", stack.grpc_addr()))
        .args(args)
        .output()
        .expect("rankscope runs")
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The job's `ranks` answer without what names the job or the file.
pub(crate) async fn ranks(stack: &Stack, job: &str) -> Vec<serde_json::Value> {
    let v = stack.api_get(&format!("/api/v1/jobs/{job}/ranks")).await;
    v["ranks"]
        .as_array()
        .unwrap_or_else(|| panic!("no ranks for {job}: {v}"))
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                o.retain(|k, _| !k.contains("job") && !k.contains("file"));
            }
            r
        })
        .collect()
}

/// Provider variables for one `rankscope import`.
type Env<'a> = Vec<(&'a str, &'a str)>;

fn s3_env<'a>(endpoint: &'a str, key: &'a str, secret: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
}

/// moto with authentication on, an IAM user's keys, the DLRM set under
/// `s3://traces/dlrm/`.
fn moto_with_dlrm() -> (ObjstoreServer, String, String) {
    let moto = ObjstoreServer::moto(Some(3)).unwrap_or_else(|e| panic!("{e}"));
    let keys: serde_json::Value =
        serde_json::from_str(&seed(&["s3-user", &moto.endpoint])).expect("keys json");
    let (key, secret) = (
        keys["key"].as_str().expect("key").to_owned(),
        keys["secret"].as_str().expect("secret").to_owned(),
    );
    let mut args = vec!["s3", &moto.endpoint, &key, &secret, "traces", "dlrm/"];
    let files = dlrm_files();
    args.extend(files.iter().map(String::as_str));
    seed(&args);
    (moto, key, secret)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlrm_from_s3_and_azure_answers_like_the_local_import() {
    let (moto, key, secret) = moto_with_dlrm();
    let azurite = ObjstoreServer::azurite().unwrap_or_else(|e| panic!("{e}"));
    let blob = format!("{}/devstoreaccount1", azurite.endpoint);
    let files = dlrm_files();
    let mut args = vec!["azure", blob.as_str(), "traces", "dlrm/"];
    args.extend(files.iter().map(String::as_str));
    seed(&args);
    let stack = Stack::start_without_agent().await;
    let local = import(&stack, &[], "local", &[dlrm_dir().to_str().unwrap()]);
    assert!(local.status.success(), "{}", text(&local));
    let want = ranks(&stack, "local").await;
    assert_eq!(want.len(), 8);

    let azurite_url = azurite.endpoint.clone();
    let providers: Vec<(&str, &str, Env)> = vec![
        (
            "s3",
            "s3://traces/dlrm/",
            s3_env(&moto.endpoint, &key, &secret),
        ),
        (
            "azure",
            "az://traces/dlrm/",
            vec![
                ("AZURE_STORAGE_USE_EMULATOR", "true"),
                ("AZURITE_BLOB_STORAGE_URL", &azurite_url),
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (job, url, env) in &providers {
        let out = import(&stack, env, job, &[url]);
        if !out.status.success() {
            failures.push(format!("{job}: {}", text(&out)));
            continue;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("imported 8 file(s)"),
            "{job}: {}",
            text(&out)
        );
        let got = ranks(&stack, job).await;
        if got != want {
            failures.push(format!("{job}: ranks differ:\n{got:#?}\nlocal:\n{want:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Azure's errors name the URL and what the service said.
    let emulator = [
        ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ("AZURITE_BLOB_STORAGE_URL", azurite_url.as_str()),
    ];
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a [&'a str]);
    let cases: [Case; 3] = [
        (
            &[("AZURE_STORAGE_ACCOUNT_KEY", "d3Jvbmc=")],
            "az://traces/dlrm/",
            &["az://traces/dlrm/: listing failed", "403"],
        ),
        (
            &[],
            "az://no-such-container/dlrm/",
            &[
                "az://no-such-container/dlrm/: listing failed",
                "ContainerNotFound",
            ],
        ),
        (
            &[],
            "az://traces/nothing-here/",
            &["az://traces/nothing-here/: no .json or .json.gz trace files"],
        ),
    ];
    for (extra, url, want) in cases {
        let env: Vec<(&str, &str)> = emulator.iter().chain(extra).copied().collect();
        let out = import(&stack, &env, "azure-bad", &[url]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}", text(&out));
        for w in want {
            assert!(err.contains(w), "no {w:?} in {}", text(&out));
        }
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_missing_buckets_empty_prefixes_and_a_store_that_is_down_are_named() {
    let (mut moto, key, secret) = moto_with_dlrm();
    let stack = Stack::start_without_agent().await;
    let endpoint = moto.endpoint.clone();
    let check = |job: &str, env: Vec<(&str, &str)>, args: &[&str], want: &[&str]| {
        let out = import(&stack, &env, job, args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{job} succeeded: {}", text(&out));
        for w in want {
            assert!(err.contains(w), "{job}: no {w:?} in {}", text(&out));
        }
    };
    check(
        "wrong-key",
        s3_env(&endpoint, "AKIAWRONGWRONGWRONG0", "wrong"),
        &["s3://traces/dlrm/"],
        &["s3://traces/dlrm/: listing failed", "InvalidAccessKeyId"],
    );
    check(
        "no-bucket",
        s3_env(&endpoint, &key, &secret),
        &["s3://no-such-bucket/dlrm/"],
        &["s3://no-such-bucket/dlrm/", "NoSuchBucket"],
    );
    check(
        "empty-prefix",
        s3_env(&endpoint, &key, &secret),
        &["s3://traces/nothing-here/"],
        &["s3://traces/nothing-here/: no .json or .json.gz trace files under this prefix"],
    );
    check(
        "not-a-trace",
        s3_env(&endpoint, &key, &secret),
        &["s3://traces/dlrm/README.md"],
        &["s3://traces/dlrm/README.md: not JSON"],
    );
    // The store goes down: its path fails with a clear error, the local
    // file given beside it is imported all the same.
    moto.kill();
    let local = dlrm_dir().join("worker0_step_12.1694128201545.pt.trace.json.gz");
    let out = import(
        &stack,
        &s3_env(&endpoint, &key, &secret),
        "partly",
        &["s3://traces/dlrm/", local.to_str().unwrap()],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr.contains("s3://traces/dlrm/: listing failed") && stderr.contains(&endpoint),
        "{}",
        text(&out)
    );
    assert!(stdout.contains("imported 1 file(s)"), "{}", text(&out));
    // The import acknowledged its batches only once ClickHouse held them.
    assert!(
        stack.events_now("partly") > 0,
        "the local file's events are stored"
    );
    stack.stop().await;
}
