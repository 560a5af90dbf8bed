//! Tests of the ClickHouse fixture against the real server binary.
use super::*;

#[test]
fn private_server_answers_queries_and_dies_with_its_handle() {
    if std::env::var(URL_ENV).is_ok() {
        return; // covered by the external-server path
    }
    let ch = ClickHouse::start().unwrap();
    assert!(ch.is_private());
    assert_eq!(ch.query("SELECT 1 + 1").unwrap().trim(), "2");
    let lc = ch
        .query("SELECT toTypeName(toLowCardinality('x'))")
        .unwrap_or_else(|e| panic!("LowCardinality profile setting missing: {e}"));
    assert_eq!(lc.trim(), "LowCardinality(String)");
    let db = ch.fresh_database("tk").unwrap();
    assert!(db.starts_with("tk_"));
    let other = ch.fresh_database("tk").unwrap();
    assert_ne!(db, other);
    ch.query_in(&db, "CREATE TABLE t (x UInt8) ENGINE = TinyLog")
        .unwrap();
    ch.query_in(&db, "INSERT INTO t VALUES (7)").unwrap();
    assert_eq!(
        ch.query(&format!("SELECT x FROM {db}.t")).unwrap().trim(),
        "7"
    );
    let err = ch.query("SELECT * FROM no_such_table").unwrap_err();
    assert!(err.to_string().contains("no_such_table"), "{err}");

    ch.kill().unwrap();
    assert!(ch.ping().is_err());
    ch.restart().unwrap();
    assert_eq!(
        ch.query(&format!("SELECT x FROM {db}.t")).unwrap().trim(),
        "7"
    );

    let dir = ch.dir().unwrap();
    let url = ch.http_url.clone();
    drop(ch);
    assert!(!dir.exists(), "temp dir {dir:?} left behind");
    let endpoint = Endpoint::parse(&url).unwrap();
    assert!(http::request(&endpoint, "GET", "/ping", b"", Duration::from_secs(1)).is_err());
}

/// Child mode of `servers_die_with_the_test_process`: start a server, report it, then
/// either block until killed (`hang`) or exit normally (`exit`, using `shared`).
#[test]
fn child_process_helper() {
    let Ok(mode) = std::env::var("RANKSCOPE_TESTKIT_CHILD") else {
        return;
    };
    let ch = match mode.as_str() {
        "exit" => ClickHouse::shared().unwrap(),
        _ => Box::leak(Box::new(ClickHouse::start().unwrap())),
    };
    println!(
        "SERVER {} {}",
        ch.pid().unwrap(),
        ch.dir().unwrap().display()
    );
    if mode == "hang" {
        loop {
            std::thread::park();
        }
    }
}

#[test]
fn servers_die_with_the_test_process() {
    use std::io::BufRead;
    if std::env::var(URL_ENV).is_ok() || std::env::var("RANKSCOPE_TESTKIT_CHILD").is_ok() {
        return;
    }
    for mode in ["hang", "exit"] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "clickhouse::tests::child_process_helper",
                "--nocapture",
            ])
            .env("RANKSCOPE_TESTKIT_CHILD", mode)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .by_ref()
            .map(|l| l.unwrap())
            .find(|l| l.starts_with("SERVER "))
            .unwrap_or_else(|| panic!("{mode}: child printed no SERVER line"));
        let mut parts = line.split(' ').skip(1);
        let pid: i32 = parts.next().unwrap().parse().unwrap();
        let dir = PathBuf::from(parts.next().unwrap());
        if mode == "hang" {
            child.kill().unwrap(); // SIGKILL: no destructor, no atexit
        }
        lines.for_each(drop); // read to EOF so the child never writes into a closed pipe
        let status = child.wait().unwrap();
        if mode == "exit" {
            assert!(status.success(), "exit: child failed: {status}");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_alive(pid) {
            assert!(
                Instant::now() < deadline,
                "{mode}: server {pid} outlived its test process"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        if mode == "exit" {
            assert!(!dir.exists(), "exit: shared server dir {dir:?} left behind");
        } else {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// Alive and not a zombie.
pub(crate) fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn fresh_database_rejects_unsafe_prefixes() {
    let ch = ClickHouse {
        http_url: "http://127.0.0.1:1".into(),
        tcp_port: 1,
        endpoint: Endpoint::parse("http://127.0.0.1:1").unwrap(),
        private: Mutex::new(None),
    };
    let err = ch.fresh_database("x; DROP").unwrap_err();
    assert!(err.to_string().contains("must be"), "{err}");
}

#[test]
fn port_clash_is_recognised() {
    let clash = TestkitError::StartFailed {
        reason: "exited".into(),
        log_tail: "Net Exception: Address already in use: 127.0.0.1:8123".into(),
    };
    assert!(is_port_clash(&clash));
    let other = TestkitError::StartFailed {
        reason: "exited".into(),
        log_tail: "bad config".into(),
    };
    assert!(!is_port_clash(&other));
}
