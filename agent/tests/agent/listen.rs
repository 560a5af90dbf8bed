//! The Unix socket listener: mode 0660, stale sockets replaced, live ones
//! and foreign files left alone.

use std::os::unix::fs::PermissionsExt;

use crate::support::*;
use crate::workload::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_is_created_0660_and_a_stale_one_replaced() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A stale socket left behind by a listener that is gone.
    let nested = dir.path().join("run/rankscope");
    std::fs::create_dir_all(&nested).unwrap();
    drop(std::os::unix::net::UnixListener::bind(nested.join("agent.sock")).unwrap());
    assert!(nested.join("agent.sock").exists());

    let agent = rankscope_agent::start(config(&collector.url(), Some(&nested)))
        .await
        .unwrap();
    let path = agent.unix_path.clone().unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let mut r = Rank::over_unix(&path).await;
    let ack = r
        .call(rankscope_proto::v1::RankMessage {
            identity: Some(identity("job", 0, 1)),
            ..Default::default()
        })
        .await;
    assert_eq!(ack.code, 0);

    // A second agent on the same (live) socket refuses to start.
    let err = match rankscope_agent::start(config(&collector.url(), Some(&nested))).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("second agent started on a live socket"),
    };
    assert!(err.contains("another process is listening"), "{err}");
    agent.shutdown().await;

    // A regular file at the socket path is never removed.
    let file_dir = dir.path().join("f");
    std::fs::create_dir_all(&file_dir).unwrap();
    std::fs::write(file_dir.join("agent.sock"), b"keep").unwrap();
    let err = match rankscope_agent::start(config(&collector.url(), Some(&file_dir))).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("agent replaced a regular file"),
    };
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(file_dir.join("agent.sock")).unwrap(), b"keep");

    // A missing parent directory is created.
    let fresh = dir.path().join("new/dir");
    let agent = rankscope_agent::start(config(&collector.url(), Some(&fresh)))
        .await
        .unwrap();
    assert!(fresh.join("agent.sock").exists());
    agent.shutdown().await;
}
