//! Daemon-trace iteration numbering on corrected clocks (issue 36 item 4):
//! the trace hub numbers each captured rank's iterations by the reference
//! iteration that ends nearest in time, so two nodes whose clocks differ by
//! more than half an iteration would number the same iteration apart. With
//! the job's node clock estimate applied first, they agree.
//!
//! The job is simulated with node 1's clock 60 ms ahead (iterations of
//! 100 ms: raw, node 1's iteration k ends nearer the reference's k + 1);
//! two control streams stand in for the nodes' agents and report captured
//! traces (as `rankscope-agent` does after libkineto wrote them), and the
//! collector's import commands must give both ranks the same first step.

use crate::common;

use std::time::Duration;

use common::*;
use rankscope_proto::v1 as proto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const PERIOD_NS: u64 = 100_000_000;

/// One fake agent: its report sender and the collector's commands.
struct FakeAgent {
    tx: mpsc::Sender<proto::AgentReport>,
    commands: tonic::Streaming<proto::ControlCommand>,
}

async fn fake_agent(stack: &Stack, id: &str, node: &str) -> FakeAgent {
    let url = format!("http://{}", stack.grpc_addr());
    let mut client = proto::collector_control_client::CollectorControlClient::connect(url)
        .await
        .expect("connect");
    let (tx, rx) = mpsc::channel(8);
    tx.send(proto::AgentReport {
        hello: Some(proto::AgentHello {
            agent_id: id.into(),
            node: node.into(),
            agent_session: 1,
            kineto_listening: true,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let open = client.control(tonic::Request::new(ReceiverStream::new(rx)));
    let commands = tokio::time::timeout(Duration::from_secs(30), open)
        .await
        .expect("the control stream opens within 30 s")
        .expect("control stream")
        .into_inner();
    FakeAgent { tx, commands }
}

impl FakeAgent {
    /// Reports `rank` of `trace` captured with iterations ending at `ends`.
    async fn captured(&self, trace: &str, job: &str, rank: u32, ends: Vec<u64>) {
        let status = proto::TraceStatus {
            trace_id: trace.into(),
            job_id: job.into(),
            rank,
            state: "captured".into(),
            at_ns: ends[ends.len() - 1],
            pid: 100 + rank as i32,
            iteration_end_ns: ends,
            events: 10,
            ..Default::default()
        };
        let report = proto::AgentReport {
            traces: vec![status],
            ..Default::default()
        };
        self.tx.send(report).await.expect("report");
    }

    /// The import command for `rank`.
    async fn import(&mut self, rank: u32) -> proto::ImportCommand {
        loop {
            let next = tokio::time::timeout(Duration::from_secs(30), self.commands.message())
                .await
                .expect("an import command within 30 s")
                .expect("stream")
                .expect("open");
            if let Some(proto::control_command::Command::Import(i)) = next.command {
                if i.rank == rank {
                    return i;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iterations_of_nodes_60ms_apart_get_the_same_step_numbers() {
    let stack = Stack::start().await;
    let job = "clock-traces";
    let sim = rankscope_cli::simulate::SimConfig {
        ranks: 2,
        ranks_per_node: 1,
        steps: 6,
        layers: 2,
        node_clock_offsets: vec!["1:+60ms".parse().unwrap()],
        ..sim_config(job, 2, 6)
    };
    rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack.all_stored(&sim).await;
    let clocks = stack.api_get(&format!("/api/v1/jobs/{job}/clocks")).await;
    let n1 = clocks["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "sim-node-1")
        .cloned()
        .expect("node 1");
    assert!(
        (n1["offset_us"].as_f64().unwrap() - 60_000.0).abs() < 100.0,
        "{clocks}"
    );

    let mut a = fake_agent(&stack, "fake-0", "sim-node-0").await;
    let mut b = fake_agent(&stack, "fake-1", "sim-node-1").await;
    let url = format!("http://{}", stack.http_addr());
    let client = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(10));
    let (trace, _) = rankscope_cli::query::traces::request(
        &client,
        &url,
        job,
        &[],
        rankscope_cli::query::traces::TraceSpan::Iterations(4),
    )
    .await
    .expect("trace request");
    // The same 5 iterations on both ranks; node 1 stamps them 60 ms late.
    let t0 = 1_800_000_000_000_000_000u64;
    let ends = |late: u64| {
        (0..5)
            .map(|k| t0 + k * PERIOD_NS + late)
            .collect::<Vec<_>>()
    };
    a.captured(&trace, job, 0, ends(0)).await;
    b.captured(&trace, job, 1, ends(60_000_000)).await;
    let (ia, ib) = (a.import(0).await, b.import(1).await);
    // Raw, rank 1's first iteration would take the step after rank 0's.
    assert_eq!(ia.first_step, ib.first_step, "{ia:?} {ib:?}");
    assert_eq!(ia.first_step, 6, "after the job's last SDK step: {ia:?}");
    // The collector's graceful shutdown waits for open control streams.
    drop((a, b));
    stack.stop().await;
}
