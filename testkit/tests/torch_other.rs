//! Real PyTorch (CPU, gloo, 4 processes under torchrun, `rankscope run`, no
//! rankscope code in the script): a rank that does extra tensor work between
//! `loss.backward()` and `optimizer.step()` — outside every instrumented
//! phase — is named with cause `other`, the amount per step and where the
//! time sits, a what-if gain that matches the truth, one alert and the
//! goodput's straggler wait of that gain; the same job with that rank last
//! by a hair gets no verdict.
//!
//! Needs the Python environment `make py` builds (`.venv/`, or
//! `RANKSCOPE_VENV`) and the `rankscope` binary. The tests run one at a
//! time: each starts 4 training processes on a 2-core machine.

use crate::common;

use std::process::{Command, Stdio};

use common::Stack;

const RANKS: u32 = 4;
const STEPS: u64 = 16;

/// Runs `ddp_extra.py` under `rankscope run` and torchrun to its end; rank 2
/// does `extra_ms` of tensor work after backward each step.
async fn run_job(stack: &Stack, job: &str, extra_ms: u32) {
    let agent = stack
        .agent
        .as_ref()
        .and_then(|a| a.unix_path.clone())
        .expect("agent unix socket");
    // Ahead of other work on the machine (nice -10; without the privilege
    // nice says so and runs it as is): the balanced job must not lose CPU
    // to, say, a compiler on the same cores, which makes a real straggler.
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "-10"])
        .arg(rankscope_testkit::bin_path("rankscope"))
        .arg("run")
        .arg("--agent")
        .arg(format!("unix:{}", agent.display()))
        .arg("--job")
        .arg(job)
        .arg("--")
        .arg(rankscope_testkit::venv_python())
        .args(["-m", "torch.distributed.run", "--nproc-per-node"])
        .arg(RANKS.to_string())
        .arg("--master-port")
        .arg(rankscope_testkit::free_port().to_string())
        .arg(rankscope_testkit::workspace_root().join("python/tests/workloads/ddp_extra.py"))
        .args(["--steps", &STEPS.to_string(), "--extra-rank", "2"])
        .args(["--extra-ms", &extra_ms.to_string()])
        .env("OMP_NUM_THREADS", "1")
        .env("XDG_CACHE_HOME", stack.dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("rankscope run starts");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "training failed:\n{text}");
    assert!(
        !text.contains("Traceback"),
        "an exception in training:\n{text}"
    );
    stack.analytics_final(job, STEPS * u64::from(RANKS)).await;
}

/// Per step of `job`: the median step time of its ranks as the what-if gain
/// takes it (the `ranks / 2`-th in ascending order), ns.
fn median_step_times(stack: &Stack, job: &str) -> std::collections::BTreeMap<u64, u64> {
    let sql = format!(
        "SELECT step, rank, any(step_time_ns) FROM {}.step_breakdown \
         WHERE job_id = '{job}' GROUP BY step, rank ORDER BY step, rank",
        stack.database
    );
    let mut per_step: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for line in stack.clickhouse.query(&sql).expect("query").lines() {
        let v: Vec<u64> = line
            .split('\t')
            .map(|x| x.parse().expect("number"))
            .collect();
        per_step.entry(v[0]).or_default().push(v[2]);
    }
    per_step
        .into_iter()
        .map(|(step, mut t)| {
            t.sort_unstable();
            (step, t[t.len() / 2])
        })
        .collect()
}

async fn straggler_alerts(stack: &Stack, job: &str) -> Vec<serde_json::Value> {
    let v = stack.api_get(&format!("/api/v1/alerts?job={job}")).await;
    v["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["rule"] == "straggler")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_work_between_backward_and_the_optimizer_is_cause_other_with_the_true_gain() {
    let _serial = common::SERIAL.lock().await;
    let stack = Stack::start().await;

    // The same job with rank 2 last by a hair (1 ms of extra work a step):
    // no verdict, no alert. It is also the truth's baseline.
    run_job(&stack, "ddp-hair", 1).await;
    // (run_job waited until every breakdown was final.) Nothing is
    // `other`, and no rank is flagged for long: on a quiet machine there
    // is no verdict at all, but under heavy load (other builds on the 2
    // cores) any rank, rank 2 included, can be descheduled and stand out
    // for a few steps (seen: rank 2, compute, steps 10-12 of 16).
    let v = stack.api_get("/api/v1/jobs/ddp-hair/stragglers").await;
    let hair = v["stragglers"].as_array().expect("stragglers");
    assert!(
        hair.iter().all(|s| s["cause"] != "other"
            && s["steps_flagged"].as_u64().is_some_and(|n| n <= STEPS / 4)),
        "{v}"
    );
    let alerts = straggler_alerts(&stack, "ddp-hair").await;
    assert!(
        alerts.iter().all(|a| a["evidence"]["cause"] != "other"),
        "{alerts:?}"
    );

    run_job(&stack, "ddp-other", 800).await;
    // The verdict, with its evidence stored (it is written beside it). The
    // `other` verdict is rank 2's, its only one. (The others' compute rule
    // is not under test here: under heavy load on this machine a peer can
    // also stand out for a few steps, at no what-if gain while rank 2
    // gates every step.)
    let rows = stack
        .api_poll("/api/v1/jobs/ddp-other/stragglers", "stragglers", |rows| {
            rows.iter()
                .any(|s| s["rank"] == 2 && s["evidence"].is_string())
        })
        .await;
    let other: Vec<_> = rows.iter().filter(|s| s["cause"] == "other").collect();
    let of_rank_2: Vec<_> = rows.iter().filter(|s| s["rank"] == 2).collect();
    assert_eq!(other.len(), 1, "one `other` straggler: {rows:?}");
    assert_eq!(of_rank_2.len(), 1, "one verdict of rank 2: {rows:?}");
    let s = other[0];
    assert_eq!(s["rank"], 2, "{s}");
    for v in rows.iter().filter(|s| s["rank"] != 2) {
        eprintln!("besides rank 2: {v}");
    }
    let evidence = s["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("after backward, before optimizer"),
        "{evidence}"
    );
    // The amount per step: "<ms> ms per step of its own time ... above the
    // median rank's", and the stretch's length, each the extra work's 800
    // ms within 15 % (the rest: its compute's difference to the median's,
    // and this machine's load).
    let figure = |after: &str| -> f64 {
        let at = evidence.find(after).map_or(0, |i| i + after.len());
        evidence[at..]
            .split(" ms")
            .next()
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or_else(|| panic!("no ms figure after {after:?}: {evidence}"))
    };
    let (own_ms, stretch_ms) = (
        figure(""),
        figure("the longest stretch outside its spans was"),
    );
    for ms in [own_ms, stretch_ms] {
        assert!((680.0..=920.0).contains(&ms), "{ms} ms: {evidence}");
    }

    // One alert for rank 2, raised within the first 5 steps (its fields
    // are the verdict as it activated).
    let alerts = stack
        .api_poll("/api/v1/alerts?job=ddp-other", "alerts", |a| {
            a.iter().any(|a| a["rule"] == "straggler" && a["rank"] == 2)
        })
        .await;
    let straggler: Vec<_> = alerts
        .iter()
        .filter(|a| a["rule"] == "straggler" && a["rank"] == 2)
        .collect();
    assert_eq!(straggler.len(), 1, "{alerts:?}");
    let a = straggler[0];
    assert_eq!(
        (a["rank"].as_u64(), a["state"].as_str()),
        (Some(2), Some("firing")),
        "{a}"
    );
    let named_at = a["evidence"]["last_step"].as_u64().expect("last_step");
    assert!(named_at <= 4, "named at step {named_at}: {a}");
    let fired = stack
        .clickhouse
        .query(&format!(
            "SELECT count() FROM {}.alerts WHERE job_id = 'ddp-other' AND rule = 'straggler' \
             AND rank = 2 AND state = 'firing'",
            stack.database
        ))
        .expect("query");
    assert_eq!(fired.trim(), "1", "firing transitions");

    // The what-if gain against the truth: the step time the extra work
    // added, over the step time with it, on the verdict's steps. A job's
    // step time: the median over those steps of each step's median rank
    // (the jobs ran one after the other; a median, not a mean, so that a
    // burst of other load on this machine during one of them does not
    // count).
    let (first, last) = (
        s["first_step"].as_u64().unwrap(),
        s["last_step"].as_u64().unwrap(),
    );
    let typical = |job: &str| {
        let per_step = median_step_times(&stack, job);
        let mut t: Vec<u64> = (first..=last).map(|s| per_step[&s]).collect();
        t.sort_unstable();
        t[t.len() / 2] as f64
    };
    let (t_with, t_without) = (typical("ddp-other"), typical("ddp-hair"));
    let truth = 100.0 * (t_with - t_without) / t_with;
    let gain = s["expected_gain_pct"].as_f64().expect("a gain");
    eprintln!(
        "steps {first}..={last}: expected_gain_pct {gain:.2}%, truth {truth:.2}% \
         (step time {t_with:.0} ns with the extra work, {t_without:.0} ns without)"
    );
    assert!(
        (gain - truth).abs() <= 0.10 * truth + 1.0,
        "gain {gain:.2}% vs truth {truth:.2}%"
    );

    // Goodput counts the lost time as the straggler's, not as exposed
    // communication of the others.
    let g = stack.api_get("/api/v1/jobs/ddp-other/goodput").await;
    let part = |name: &str| {
        g["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["part"] == name)
            .and_then(|p| p["pct"].as_f64())
            .unwrap_or_else(|| panic!("{name}: {g}"))
    };
    assert!(
        part("straggler_wait") > part("exposed_communication"),
        "{g}"
    );
    // And as much as the verdict's what-if gain says: its gain over the
    // verdict's steps' (median) step time, within 10 % (+ 1 % of the wall
    // time: another rank standing out briefly under load adds its own).
    let wall = g["wall_ns"].as_f64().expect("wall_ns");
    let waited = g["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["part"] == "straggler_wait")
        .and_then(|p| p["ns"].as_f64())
        .expect("straggler_wait ns");
    let per_step = median_step_times(&stack, "ddp-other");
    let covered: f64 = (first..=last).map(|s| per_step[&s] as f64).sum();
    let want = gain / 100.0 * covered;
    eprintln!(
        "goodput straggler_wait {:.0} ms, the verdict's gain over its steps {:.0} ms",
        waited / 1e6,
        want / 1e6
    );
    assert!(
        (waited - want).abs() <= 0.10 * want + 0.01 * wall,
        "straggler_wait {waited:.0} ns vs gain {want:.0} ns: {g}"
    );
    // Against the truth (the step time the extra work added, on each of
    // the verdict's steps) it is bounded through the gain: the gain is
    // within 10 % + 1 pp of the truth (above) and straggler_wait within
    // 10 % + 1 % of wall of the gain. A direct 10 % bound compounds both
    // errors (seen: gain 86.4 % vs truth 94.3 %, straggler_wait 6 % under
    // the gain, 14 % under the truth), so it is printed, not asserted.
    let truth_ns = (t_with - t_without) * (last - first + 1) as f64;
    eprintln!(
        "goodput straggler_wait {:.0} ms, truth {:.0} ms",
        waited / 1e6,
        truth_ns / 1e6
    );
    stack.stop().await;
}
