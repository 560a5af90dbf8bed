//! The SDK against a real agent (in-process, real gRPC over a Unix socket
//! and TCP): delivery, identity, drops while the agent is away, reconnects,
//! out-of-order calls, and the C ABI driven by a C program.

use std::path::Path;
use std::time::{Duration, Instant};

use rankscope_sdk::{event, CallError, Client, CollectiveRecord, Options};

const WAIT: Duration = Duration::from_secs(20);

fn agent_config(dir: &Path) -> rankscope_agent::Config {
    rankscope_agent::Config {
        listen_addr: "127.0.0.1:0".into(),
        metrics_listen_addr: "127.0.0.1:0".into(),
        unix_socket_path: dir.join("agent.sock").to_string_lossy().into_owned(),
        // Nothing listens there: the agent holds batches and retries, which
        // does not affect what it acknowledges to ranks.
        collector_url: "http://127.0.0.1:9".into(),
        agent_id: "sdk-test".into(),
        node: "sdk-node".into(),
        shutdown_flush_timeout_ms: 100,
        ..Default::default()
    }
}

fn options(agent: String, rank: u32, queue_events: usize) -> Options {
    let mut o = Options {
        agent: Some(agent),
        queue_events,
        ..Default::default()
    };
    o.identity.job_id = Some("sdk-job".into());
    o.identity.rank = Some(rank);
    o.identity.world_size = Some(4);
    o
}

/// Polls `cond` every few ms until it holds or `WAIT` passes.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn record_step(c: &Client, step: u64) {
    let t = rankscope_sdk::now_ns();
    c.step_begin(step, Some(t)).unwrap();
    c.span(
        event::span_category("forward").unwrap(),
        "forward",
        t,
        t + 10,
        -1,
        0,
    )
    .unwrap();
    c.collective(&CollectiveRecord {
        op: event::collective_op("all_reduce").unwrap(),
        process_group: "0".into(),
        seq: step,
        group_size: 4,
        dtype: event::dtype("float32"),
        count: 256,
        bytes: 1024,
        start_ns: t + 10,
        end_ns: t + 20,
        device: -1,
        ..Default::default()
    })
    .unwrap();
    c.step_end(step, Some(t + 30)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_agent_over_the_unix_socket_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let agent = rankscope_agent::start(agent_config(dir.path()))
        .await
        .unwrap();
    let unix = format!("unix:{}", agent.unix_path.clone().unwrap().display());
    let tcp = format!("http://{}", agent.tcp_addr);
    let (unix_client, tcp_client) = tokio::task::spawn_blocking(move || {
        let a = Client::start(options(unix, 0, 1024)).unwrap();
        let b = Client::start(options(tcp, 1, 1024)).unwrap();
        for step in 0..10 {
            record_step(&a, step);
            record_step(&b, step);
        }
        assert!(a.flush(WAIT), "flush over the Unix socket: {:?}", a.stats());
        assert!(b.flush(WAIT), "flush over TCP: {:?}", b.stats());
        (a, b)
    })
    .await
    .unwrap();
    for c in [&unix_client, &tcp_client] {
        let s = c.stats();
        assert_eq!((s.sent, s.dropped, s.rejected), (40, 0, 0), "{s:?}");
        assert!(s.connected);
        assert_eq!(c.identity().pid, std::process::id());
    }
    let m = agent.metrics();
    assert_eq!(m.accepted_events, 80, "{m:?}");
    assert_eq!(m.streams_active, 2);
    // Shutting down closes the streams: the agent sees them end.
    tokio::task::spawn_blocking(move || {
        unix_client.shutdown(WAIT);
        tcp_client.shutdown(WAIT);
    })
    .await
    .unwrap();
    let deadline = Instant::now() + WAIT;
    while agent.metrics().streams_active != 0 {
        assert!(Instant::now() < deadline, "streams still open");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    agent.shutdown().await;
}

#[test]
fn without_an_agent_calls_return_at_once_and_drops_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("unix:{}", dir.path().join("nobody.sock").display());
    let c = Client::start(options(missing, 2, 64)).unwrap();
    let started = Instant::now();
    let mut dropped = 0u64;
    for step in 0..1000u64 {
        let t = rankscope_sdk::now_ns();
        for r in [c.step_begin(step, Some(t)), c.step_end(step, Some(t + 1))] {
            match r {
                Ok(()) => {}
                Err(CallError::Dropped) => dropped += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }
    let elapsed = started.elapsed();
    wait_for("the first connection attempt to fail", || {
        c.stats().last_error.is_some()
    });
    let s = c.stats();
    // 64 fit in the queue, the rest were dropped newest-first and counted.
    assert_eq!(dropped, 2000 - 64);
    assert_eq!(
        (s.dropped, s.dropped_queue_full, s.sent),
        (dropped, dropped, 0)
    );
    assert!(!s.connected);
    assert!(
        s.last_error.as_deref().unwrap_or("").contains("connect"),
        "{s:?}"
    );
    // Not a timing assertion on the hot path: a blocked caller would wait
    // for the 5 s connect timeout at least once.
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // flush says false at once instead of waiting for an agent that is not there.
    let t = Instant::now();
    assert!(!c.flush(WAIT));
    assert!(t.elapsed() < WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_resumes_when_the_agent_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = agent_config(dir.path());
    let agent = rankscope_agent::start(cfg.clone()).await.unwrap();
    let url = format!("unix:{}", agent.unix_path.clone().unwrap().display());
    let c = std::sync::Arc::new(
        tokio::task::spawn_blocking(move || Client::start(options(url, 3, 4096)).unwrap())
            .await
            .unwrap(),
    );
    let c1 = c.clone();
    tokio::task::spawn_blocking(move || {
        record_step(&c1, 0);
        assert!(c1.flush(WAIT));
    })
    .await
    .unwrap();
    agent.shutdown().await;
    let c2 = c.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the client to notice the agent left", || {
            !c2.stats().connected
        });
        // Training goes on while the agent is away: events queue up.
        for step in 1..5 {
            record_step(&c2, step);
        }
    })
    .await
    .unwrap();
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let c3 = c.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the client to reconnect", || c3.stats().connected);
        record_step(&c3, 5);
        assert!(c3.flush(WAIT), "{:?}", c3.stats());
        let s = c3.stats();
        assert!(s.reconnects >= 1, "{s:?}");
        // Everything recorded while the agent was away was delivered after it came back.
        assert_eq!(s.sent, 24, "{s:?}");
        assert_eq!(s.dropped, 0, "{s:?}");
    })
    .await
    .unwrap();
    assert_eq!(agent.metrics().accepted_events, 20);
    agent.shutdown().await;
}

#[test]
fn calls_out_of_order_are_refused_with_a_reason_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("unix:{}", dir.path().join("nobody.sock").display());
    let c = Client::start(options(missing, 0, 64)).unwrap();
    let err = c.step_end(3, None).unwrap_err();
    assert!(
        matches!(&err, CallError::OutOfOrder(m) if m.contains("without step_begin(3)")),
        "{err}"
    );
    c.step_begin(4, None).unwrap();
    let err = c.step_begin(5, None).unwrap_err();
    assert!(err.to_string().contains("step 4 is still open"), "{err}");
    c.step_end(4, None).unwrap();
    let err = c.step_begin(2, None).unwrap_err();
    assert!(err.to_string().contains("must increase"), "{err}");
    assert!(matches!(c.span_end(), Err(CallError::OutOfOrder(_))));
    let err = c
        .span(event::span_category("other").unwrap(), "x", 10, 5, -1, 0)
        .unwrap_err();
    assert!(err.to_string().contains("before start_ns"), "{err}");
    assert_eq!(c.stats().invalid_calls, 5);
    // Bad identities are refused at start, naming the problem.
    let mut o = options("unix:/x".into(), 4, 64);
    o.identity.world_size = Some(4);
    let err = Client::start(o).unwrap_err();
    assert!(err.to_string().contains("rank 4 is out of range"), "{err}");
    let err = Client::start(options("ftp://x".into(), 0, 64)).unwrap_err();
    assert!(err.to_string().contains("ftp://x"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_abi_streams_from_a_c_program() {
    let dir = tempfile::tempdir().unwrap();
    let agent = rankscope_agent::start(agent_config(dir.path()))
        .await
        .unwrap();
    let url = format!("unix:{}", agent.unix_path.clone().unwrap().display());
    // The cdylib cargo built for this package, next to the test binary's deps.
    let exe = std::env::current_exe().unwrap();
    let target_dir = exe.parent().unwrap().parent().unwrap();
    let lib = target_dir.join("librankscope_sdk.so");
    // `cargo test` builds this package's lib as an rlib only; `make test`
    // builds the cdylib first (`cargo build -p rankscope-sdk`).
    assert!(
        lib.exists(),
        "{} was not built: run `cargo build -p rankscope-sdk` first (make test does)",
        lib.display()
    );
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = dir.path().join("c_smoke");
    let cc = std::process::Command::new("cc")
        .arg(manifest.join("tests/c/smoke.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(target_dir)
        .arg("-lrankscope_sdk")
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("cc");
    assert!(cc.success());
    let mut cmd = std::process::Command::new(&bin);
    cmd.arg(&url)
        .env("LD_LIBRARY_PATH", target_dir)
        .env("RANKSCOPE_JOB_ID", "c-job")
        .env("RANK", "1")
        .env("WORLD_SIZE", "2");
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3 steps x (begin, span, collective, end), all acknowledged.
    assert!(stdout.contains("sent=12 dropped=0"), "{stdout}");
    assert!(stdout.contains("order=-2"), "{stdout}");
    assert!(
        stdout.contains("badinit=rank 5 is out of range"),
        "{stdout}"
    );
    assert_eq!(agent.metrics().accepted_events, 12);
    agent.shutdown().await;
}

/// The world group's ranks travel as the empty list
/// (`rankscope_proto::group_ranks_or_world`), a subgroup's as given: what
/// the agent received, read back from its dump folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_world_groups_ranks_travel_as_the_empty_list() {
    use rankscope_proto::prost::Message as _;
    use rankscope_proto::v1 as proto;

    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump");
    let agent = rankscope_agent::start(rankscope_agent::Config {
        dump_dir: dump.to_string_lossy().into_owned(),
        shutdown_flush_timeout_ms: 10_000,
        ..agent_config(dir.path())
    })
    .await
    .unwrap();
    let tcp = format!("http://{}", agent.tcp_addr);
    tokio::task::spawn_blocking(move || {
        let c = Client::start(options(tcp, 0, 1024)).unwrap();
        for (seq, (pg, size, ranks)) in [("0", 4, vec![0, 1, 2, 3]), ("even", 2, vec![0, 2])]
            .into_iter()
            .enumerate()
        {
            c.collective(&CollectiveRecord {
                op: event::collective_op("all_reduce").unwrap(),
                process_group: pg.into(),
                seq: seq as u64,
                group_size: size,
                group_ranks: ranks,
                bytes: 4,
                start_ns: 10,
                end_ns: 20,
                device: -1,
                ..Default::default()
            })
            .unwrap();
        }
        assert!(c.flush(WAIT), "flush: {:?}", c.stats());
        c.shutdown(WAIT);
    })
    .await
    .unwrap();
    agent.shutdown().await;
    let mut sent: Vec<(u32, Vec<u32>)> = Vec::new();
    for f in std::fs::read_dir(&dump).unwrap() {
        let batch = proto::AgentBatch::decode(&*std::fs::read(f.unwrap().path()).unwrap())
            .expect("a dump file is an encoded AgentBatch");
        for g in &batch.ranks {
            for e in &g.events {
                if let Some(proto::event::Kind::Collective(c)) = &e.kind {
                    sent.push((c.group_size, c.group_ranks.clone()));
                }
            }
        }
    }
    sent.sort();
    assert_eq!(sent, [(2, vec![0, 2]), (4, vec![])]);
}
