//! Jobs routed to their owner collector (issue 36 items 1 and 2): several
//! collectors over one ClickHouse, one agent per simulated node.
//!
//! - a 4-node job (4 agents, 8 simulated ranks each, a planted straggler)
//!   over 3 collectors named by one list: all its batches reach one
//!   collector, and its breakdowns and verdict equal the same job through
//!   one collector; a second job, its id chosen so, lands on another;
//! - kill -9 of the owning collector mid-job: the job moves to the next of
//!   its rendezvous order, every event is stored once and the results
//!   equal a fault-free run; the killed collector comes back and the job's
//!   ownership settles on it again, with no event stored twice;
//! - bad input: an unresolvable or unreachable collector makes the agent
//!   keep spooling and say why on /metrics and in its log; a collector of
//!   another schema version refuses to share a job.
//!
//! Collectors are the real binary where kill -9 is needed, else in this
//! process; agents run in this process (their own sockets and sessions).

use crate::common;
#[path = "routing/support.rs"]
mod support;

use std::time::Duration;

use common::eventually;
use rankscope_cli::simulate::{plan, run_nodes};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_node_job_reaches_one_collector_and_equals_the_same_job_through_one() {
    let ch = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let (db_ref, db) = (
        ch.fresh_database("route_ref").unwrap(),
        ch.fresh_database("route").unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let (dir_ref, dir_multi) = (dir.path().join("ref"), dir.path().join("multi"));
    std::fs::create_dir_all(&dir_ref).unwrap();
    std::fs::create_dir_all(&dir_multi).unwrap();

    let reference = in_process_collector(&ch, &db_ref).await;
    let ref_agents = agents_for(&format!("http://{}", reference.grpc_addr), &dir_ref).await;
    let mut collectors = Vec::new();
    for _ in 0..3 {
        collectors.push(in_process_collector(&ch, &db).await);
    }
    let keys: Vec<String> = collectors.iter().map(|c| c.grpc_addr.to_string()).collect();
    let list = keys
        .iter()
        .map(|k| format!("http://{k}"))
        .collect::<Vec<_>>()
        .join(",");
    let agents = agents_for(&list, &dir_multi).await;

    let job_a = job_id_owned("route-a", &keys, |_| true);
    let owner_a = rankscope_agent::route::rendezvous_order(&job_a, keys.iter().map(String::as_str))
        [0]
    .to_owned();
    let job_b = job_id_owned("route-b", &keys, |o| o != owner_a);
    let owner_b = rankscope_agent::route::rendezvous_order(&job_b, keys.iter().map(String::as_str))
        [0]
    .to_owned();

    let steps = 30;
    let sim = job(&job_a, steps, now_ns());
    run_job(&sim, &ref_agents).await;
    run_job(&sim, &agents).await;
    let want_rows = 32 * steps;
    eventually(120, "both runs' breakdowns final", || {
        breakdown_rows(&ch, &db_ref, &job_a) == want_rows
            && breakdown_rows(&ch, &db, &job_a) == want_rows
    })
    .await;

    // Every batch of the job reached its owner: a collector that received
    // one would have taken the job (job_owners).
    assert_eq!(owners(&ch, &db, &job_a), vec![owner_a.clone()]);
    for a in &agents {
        let metrics = agent_http(a, "/metrics").await;
        assert!(metrics.contains(&owner_line(&job_a, &owner_a)), "{metrics}");
        for k in &keys {
            assert!(
                metrics.contains(&format!(
                    "rankscope_agent_collector_up{{collector=\"{k}\"}} 1"
                )),
                "{metrics}"
            );
        }
        let status = agent_http(a, "/status").await;
        assert!(
            status.contains(&format!("{job_a} -> {owner_a}")),
            "{status}"
        );
    }
    let total = plan(&sim).event_counts().total();
    eventually(60, "every event stored", || {
        events(&ch, &db, &job_a).0 >= total
    })
    .await;
    let (stored, distinct) = events(&ch, &db, &job_a);
    assert_eq!(stored, total);
    assert_eq!(distinct, stored, "no event stored twice");

    // The same breakdowns and verdict as through one collector.
    assert_eq!(
        breakdowns(&ch, &db, &job_a),
        breakdowns(&ch, &db_ref, &job_a)
    );
    // Both runs' verdicts are written after their breakdowns (their own
    // INSERTs): compare them once both are in, not a snapshot of one.
    eventually(
        60,
        "the straggler verdict, as through one collector",
        || {
            let want = verdicts(&ch, &db_ref, &job_a);
            want.lines().any(|l| l.starts_with("13\t")) && verdicts(&ch, &db, &job_a) == want
        },
    )
    .await;

    // A second job whose hash names another collector lands there.
    let sim_b = job(&job_b, 5, now_ns());
    run_job(&sim_b, &agents).await;
    eventually(60, "the second job's breakdowns", || {
        breakdown_rows(&ch, &db, &job_b) == 32 * 5
    })
    .await;
    assert_ne!(owner_b, owner_a);
    for a in &agents {
        let metrics = agent_http(a, "/metrics").await;
        assert!(
            metrics.contains("rankscope_agent_collector_failovers_total 0"),
            "{metrics}"
        );
    }
    assert_eq!(owners(&ch, &db, &job_b), vec![owner_b.clone()]);
    assert_eq!(owners(&ch, &db, &job_a), vec![owner_a.clone()]);
    for a in &agents {
        let metrics = agent_http(a, "/metrics").await;
        assert!(metrics.contains(&owner_line(&job_b, &owner_b)), "{metrics}");
    }
    // Two take-overs in all, one per job, counted on /metrics.
    let mut taken = 0;
    for c in &collectors {
        let text = get_text(&format!("http://{}/metrics", c.http_addr)).await;
        let key = "rankscope_collector_jobs_owned_total{event=\"taken\"} ";
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .expect("jobs_owned_total");
        taken += line[key.len()..].trim().parse::<u64>().expect("a count");
    }
    assert_eq!(taken, 2);
    // Every collector answers the job's queries (they read ClickHouse).
    for c in &collectors {
        let url = format!(
            "http://{}/api/v1/jobs/{job_a}/breakdown?last={steps}",
            c.http_addr
        );
        let body: serde_json::Value = rankscope_cli::query::get_json(&url).await.expect("API");
        assert_eq!(
            body["breakdown"].as_array().expect("rows").len() as u64,
            want_rows,
            "{url}"
        );
    }
    for a in agents.into_iter().chain(ref_agents) {
        let report = a.shutdown().await;
        assert_eq!(report.undelivered_events, 0);
    }
    for c in collectors.into_iter().chain([reference]) {
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_hands_the_job_over_once_and_takes_it_back() {
    let ch = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let (db_ref, db) = (
        ch.fresh_database("route_ref").unwrap(),
        ch.fresh_database("route").unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let (dir_ref, dir_multi) = (dir.path().join("ref"), dir.path().join("multi"));
    std::fs::create_dir_all(&dir_ref).unwrap();
    std::fs::create_dir_all(&dir_multi).unwrap();

    let reference = in_process_collector(&ch, &db_ref).await;
    let ref_agents = agents_for(&format!("http://{}", reference.grpc_addr), &dir_ref).await;
    let mut procs: Vec<CollectorProc> = (0..3)
        .map(|i| CollectorProc::configure(dir.path(), &format!("c{i}"), &ch.http_url, &db))
        .collect();
    let keys: Vec<String> = procs.iter().map(CollectorProc::key).collect();
    let list = keys
        .iter()
        .map(|k| format!("http://{k}"))
        .collect::<Vec<_>>()
        .join(",");
    let agents = agents_for(&list, &dir_multi).await;
    let job_id = job_id_owned("route-kill", &keys, |_| true);
    let order: Vec<String> =
        rankscope_agent::route::rendezvous_order(&job_id, keys.iter().map(String::as_str))
            .into_iter()
            .map(str::to_owned)
            .collect();
    let (owner, next) = (order[0].clone(), order[1].clone());
    let owner_index = keys.iter().position(|k| *k == owner).unwrap();

    let (steps, more) = (60u64, 20u64);
    let start_ns = now_ns();
    let sim = job(&job_id, steps, start_ns);
    let end_ns = plan(&sim).step_times().iter().map(|t| t.3).max().unwrap();
    let mut cont = job(&job_id, more, end_ns + 1_000_000_000);
    cont.first_step = steps;
    let total = plan(&sim).event_counts().total();
    let total_cont = plan(&cont).event_counts().total();

    // The fault-free reference, through one collector.
    run_job(&sim, &ref_agents).await;
    run_job(&cont, &ref_agents).await;
    eventually(120, "reference analytics final", || {
        breakdown_rows(&ch, &db_ref, &job_id) == 32 * (steps + more)
    })
    .await;

    // The same job over three collectors, its owner killed in the middle.
    let mut faulty = sim.clone();
    faulty.rate_events_per_s = Some(total as f64 / 6.0);
    let urls = agent_urls(&agents);
    let job = tokio::spawn(async move {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        run_nodes(&faulty, &urls).await
    });
    eventually(60, "a third of the job's step markers stored", || {
        count(
            &ch,
            &format!("SELECT count() FROM {db}.steps WHERE job_id = '{job_id}'"),
        ) >= 32 * 2 * steps / 3
    })
    .await;
    assert_eq!(owners(&ch, &db, &job_id), vec![owner.clone()]);
    procs[owner_index].kill9();
    let sent = job.await.unwrap().expect("simulate");
    assert_eq!(sent.dropped, 0, "the agents accepted every event");
    eventually(120, "analytics final after the failover", || {
        breakdown_rows(&ch, &db, &job_id) == 32 * steps
    })
    .await;
    // It moved to the next collector of its order, and nowhere else.
    assert_eq!(owners(&ch, &db, &job_id), vec![owner.clone(), next.clone()]);
    for a in &agents {
        let metrics = agent_http(a, "/metrics").await;
        assert!(metrics.contains(&owner_line(&job_id, &next)), "{metrics}");
        assert!(
            metrics.contains(&format!(
                "rankscope_agent_collector_up{{collector=\"{owner}\"}} 0"
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains("rankscope_agent_collector_failovers_total 1"),
            "{metrics}"
        );
    }
    eventually(60, "every event stored", || {
        events(&ch, &db, &job_id).0 >= total
    })
    .await;
    let (stored, distinct) = events(&ch, &db, &job_id);
    assert_eq!(stored, total, "every accepted event stored");
    assert_eq!(distinct, stored, "no event stored twice");
    let want_all = breakdowns(&ch, &db_ref, &job_id);
    let want: Vec<&str> = want_all.lines().take((32 * steps) as usize).collect();
    let got = breakdowns(&ch, &db, &job_id);
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        want,
        "breakdowns differ from the fault-free run"
    );

    // The killed collector comes back: the agents take it back into the
    // set and the job's ownership settles on it (its rendezvous owner).
    procs[owner_index].restart(&dir.path().join("c-back.log"));
    eventually(30, "every agent sees the owner up again", || {
        agents.iter().all(|a| {
            let t = a.route_status();
            t.contains(&format!("  {owner} up"))
        })
    })
    .await;
    run_job(&cont, &agents).await;
    eventually(120, "analytics final after the return", || {
        breakdown_rows(&ch, &db, &job_id) == 32 * (steps + more)
    })
    .await;
    assert_eq!(
        owners(&ch, &db, &job_id).last(),
        Some(&owner),
        "the owner took the job back"
    );
    for a in &agents {
        let metrics = agent_http(a, "/metrics").await;
        assert!(metrics.contains(&owner_line(&job_id, &owner)), "{metrics}");
    }
    eventually(60, "every event stored", || {
        events(&ch, &db, &job_id).0 >= total + total_cont
    })
    .await;
    let (stored, distinct) = events(&ch, &db, &job_id);
    assert_eq!(stored, total + total_cont, "every accepted event stored");
    assert_eq!(distinct, stored, "no event stored twice");
    assert_eq!(
        breakdowns(&ch, &db, &job_id),
        want_all,
        "breakdowns differ from the fault-free run"
    );
    // Both runs' verdicts are written after their breakdowns (their own
    // INSERTs): compare them once both are in, not a snapshot of one.
    eventually(
        60,
        "the straggler verdict, as through one collector",
        || {
            let want = verdicts(&ch, &db_ref, &job_id);
            want.lines().any(|l| l.starts_with("13\t")) && verdicts(&ch, &db, &job_id) == want
        },
    )
    .await;
    // The collector that held it meanwhile let it go.
    let next_log = dir.path().join(format!(
        "c{}.log",
        keys.iter().position(|k| *k == next).unwrap()
    ));
    eventually(30, "the interim owner released the job", || {
        std::fs::read_to_string(&next_log)
            .unwrap_or_default()
            .contains("job released")
    })
    .await;
    for a in agents.into_iter().chain(ref_agents) {
        let report = a.shutdown().await;
        assert_eq!(report.undelivered_events, 0);
    }
    reference.shutdown().await;
    drop(procs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolvable_or_unreachable_collector_keeps_the_spool_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let down = rankscope_testkit::free_port();
    for (name, url, says_metrics, says_log) in [
        (
            "unresolvable",
            "http://no-such-collector.invalid:7700".to_owned(),
            "rankscope_agent_collector_resolve_error{url=\"http://no-such-collector.invalid:7700\",reason=\"DNS lookup of no-such-collector.invalid".to_owned(),
            "collector_url does not resolve",
        ),
        (
            "unreachable",
            format!("http://127.0.0.1:{down}"),
            format!("rankscope_agent_collector_up{{collector=\"127.0.0.1:{down}\"}} 0"),
            "collector unreachable; holding batches and retrying",
        ),
    ] {
        let (mut child, rank_port, metrics_port, spool) = agent_proc(dir.path(), name, &url);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", rank_port)).is_err() {
            assert!(child.try_wait().unwrap().is_none(), "{name}: the agent exited");
            assert!(std::time::Instant::now() < deadline, "{name}: the agent never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let job_id = format!("route-{name}");
        let sim = common::sim_config(&job_id, 2, 3);
        let sent = rankscope_cli::simulate::run(&sim, &format!("http://127.0.0.1:{rank_port}"))
            .await
            .expect("simulate");
        assert_eq!(sent.dropped, 0, "{name}: the agent accepted every event");
        // Accepted events are on disk, waiting for a collector.
        eventually(30, &format!("{name}: batches in the spool"), || {
            std::fs::read_dir(&spool).is_ok_and(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().ends_with(".batch"))
            })
        })
        .await;
        let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
        let mut metrics = String::new();
        for _ in 0..500 {
            metrics = get_text(&metrics_url).await;
            if metrics.contains(&says_metrics) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(metrics.contains(&says_metrics), "{name}: {metrics}");
        assert!(metrics.contains("rankscope_agent_batches_acked_total 0"), "{name}: {metrics}");
        let log = dir.path().join(format!("{name}.log"));
        eventually(30, &format!("{name}: the reason in the log"), || {
            std::fs::read_to_string(&log).unwrap_or_default().contains(says_log)
        })
        .await;
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_of_another_schema_version_refuses_to_share_a_job() {
    let stack = common::Stack::start_without_agent().await;
    let db = &stack.database;
    let now = now_ns();
    // Another collector, at schema version 9, holds the job now.
    stack
        .clickhouse
        .query(&format!(
            "INSERT INTO {db}.job_owners VALUES ('route-versions', 'old-collector:7700', 9, {now}, {now})"
        ))
        .expect("insert owner");
    let err = stack
        .ingest(common::small_batch("route-versions", 1))
        .await
        .expect_err("a job held at another schema version is refused");
    assert_eq!(err.code(), tonic::Code::Aborted, "{err:?}");
    for part in [
        "\"route-versions\"",
        "\"old-collector:7700\" at schema version 9",
        "refuse to share a job",
    ] {
        assert!(
            err.message().contains(part),
            "{part:?} not in: {}",
            err.message()
        );
    }
    assert_eq!(
        stack.rows_now("steps", "route-versions"),
        0,
        "nothing of it stored"
    );
    // Other jobs are not held back.
    let mut other = common::small_batch("route-other", 1);
    other.agent_session = 78;
    stack.ingest(other).await.expect("another job is stored");
    stack.stop().await;
}
