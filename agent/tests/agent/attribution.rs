//! Job attribution: a rank that does not name its job is attributed from
//! its process's scheduler environment (read from /proc by the agent).

use rankscope_proto::v1 as proto;

use crate::support::*;
use crate::workload::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rank_without_job_is_attributed_from_its_slurm_environment() {
    // A real process standing in for the training rank.
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .env("SLURM_JOB_ID", "slurm-777")
        .env("SLURM_PROCID", "3")
        .env("SLURM_NTASKS", "4")
        .env("SLURM_NODEID", "1")
        .spawn()
        .expect("spawn sleep");
    let collector = FakeCollector::start().await;
    let mut cfg = config(&collector.url(), None);
    cfg.batch_max_delay_ms = 10;
    let agent = rankscope_agent::start(cfg).await.unwrap();
    let mut r = Rank::over_tcp(agent.tcp_addr).await;
    let ack = r
        .call(proto::RankMessage {
            identity: Some(proto::RankIdentity {
                pid: child.id(),
                ..Default::default()
            }),
            seq: 1,
            names: names(&[(1, "k")]),
            events: kernels(2, 0),
        })
        .await;
    assert_eq!(ack.code, 0, "{}", ack.message);
    wait_until("the events reached the collector", || {
        collector.state.events() == 2
    })
    .await;
    let batches = collector.state.batches.lock().unwrap().clone();
    let id = batches[0].ranks[0].identity.clone().unwrap();
    assert_eq!(id.job_id, "slurm-777");
    assert_eq!((id.rank, id.world_size), (3, 4));
    assert_eq!(id.labels["slurm_node_id"], "1");
    let _ = child.kill();
    let _ = child.wait();
    agent.shutdown().await;
}
