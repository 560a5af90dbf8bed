//! Real PyTorch (CPU, gloo, 4 processes under torchrun and `rankscope run`,
//! libkineto's daemon mode on, no rankscope or profiler code in the script):
//! a rank doing extra tensor work between `loss.backward()` and
//! `optimizer.step()` gets an `other` verdict, the verdict's automatic
//! Kineto trace is captured and imported, and the operators that fill the
//! rank's gap are named — the extra work's matrix product (`aten::mm`)
//! among them — in the stragglers route's `gap_operators` and the evidence
//! text (issue 31, item 2).
//!
//! Serves libkineto's fixed abstract socket name `dynolog`: run it in a
//! network namespace of its own (`make test` does) or with no other daemon
//! holding the name. Needs the Python environment `make py` builds.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Stack;

/// A stack with automatic traces on, whose agent serves `@dynolog`.
async fn stack() -> Stack {
    let mut s = Stack::start_without_agent_with(|c| {
        c.traces.auto.enabled = true;
        c.traces.auto.iterations = 3;
        c.traces.auto.cooldown_secs = 3600;
    })
    .await;
    let mut cfg = common::agent_config(&format!("http://{}", s.grpc_addr()), s.dir.path());
    cfg.trace_dir = s.dir.path().join("traces").to_string_lossy().into_owned();
    cfg.kineto_daemon_name = "dynolog".into();
    s.agent = Some(common::start_dynolog_agent(cfg).await);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_filling_an_other_stragglers_gap_are_named_from_its_trace() {
    use std::os::unix::process::CommandExt;
    let _serial = common::SERIAL.lock().await;
    let stack = stack().await;
    let job = format!("ddp-other-traced-{}", std::process::id());
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    // Rank 2 does 150 ms of extra work a step (matrix products and waits,
    // see ddp_extra.py); the job runs until the test has its answer.
    let child = common::Group(
        Command::new(rankscope_testkit::bin_path("rankscope"))
            .arg("run")
            .arg("--agent")
            .arg(format!("unix:{}", agent.display()))
            .args(["--job", &job, "--"])
            .arg(rankscope_testkit::venv_python())
            .args(["-m", "torch.distributed.run", "--nproc-per-node", "4"])
            .arg("--master-port")
            .arg(rankscope_testkit::free_port().to_string())
            .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_extra.py"))
            .args(["--steps", "1000", "--extra-rank", "2", "--extra-ms", "150"])
            .env("KINETO_USE_DAEMON", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("rankscope run starts"),
    );
    // The verdict, its trace imported, and the operators of its gap: in the
    // route at once, in the stored evidence text once the results writer
    // flushed the verdict version that found them.
    let deadline = Instant::now() + Duration::from_secs(300);
    let s = loop {
        // 404 until the job's first events are stored.
        let url = format!("http://{}/api/v1/jobs/{job}/stragglers", stack.http_addr());
        let v: serde_json::Value = rankscope_cli::query::get_json(&url)
            .await
            .unwrap_or_default();
        let found = v["stragglers"].as_array().and_then(|rows| {
            rows.iter()
                .find(|s| {
                    s["rank"] == 2
                        && s["cause"] == "other"
                        && s["gap_operators"].as_array().is_some_and(|o| !o.is_empty())
                        && s["evidence"]
                            .as_str()
                            .is_some_and(|e| e.contains("in that stretch"))
                })
                .cloned()
        });
        if let Some(s) = found {
            break s;
        }
        if Instant::now() >= deadline {
            let traces = stack.api_get(&format!("/api/v1/jobs/{job}/traces")).await;
            panic!("no gap operators named: {v}\ntraces: {traces}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop(child);
    eprintln!("{s}");
    let ops = s["gap_operators"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().filter_map(|o| o["name"].as_str()).collect();
    assert!(names.contains(&"aten::mm"), "{names:?}: {s}");
    assert!(
        ops.iter().all(|o| o["ms_per_step"]
            .as_f64()
            .is_some_and(|ms| ms > 0.0 && ms < 150.0)),
        "{s}"
    );
    // The operators sit in the stretch the evidence names, and its text
    // carries them with the trace they come from.
    let trace = s["trace_id"].as_str().expect("the automatic trace");
    let evidence = s["evidence"].as_str().expect("evidence");
    assert!(
        evidence.contains("after backward, before optimizer"),
        "{evidence}"
    );
    assert!(
        evidence.contains(&format!("in that stretch, kineto trace {trace} (")),
        "{evidence}"
    );
    assert!(evidence.contains("aten::mm "), "{evidence}");
    stack.stop().await;
}
