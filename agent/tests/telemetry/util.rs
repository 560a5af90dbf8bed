//! Helpers: an agent with telemetry on, sending to a fake collector, and
//! access to the samples that collector received.

use rankscope_agent::AgentHandle;
use rankscope_proto::v1 as proto;

use crate::stub::Stub;
use crate::support::{self, CollectorState, FakeCollector};

/// An agent sampling GPUs through `stub` (or `library`) and the host.
pub async fn agent(library: &str, gpu_ms: u64, host_ms: u64) -> (FakeCollector, AgentHandle) {
    let collector = FakeCollector::start().await;
    let mut cfg = support::config(&collector.url(), None);
    cfg.gpu_sample_interval_ms = gpu_ms;
    cfg.host_sample_interval_ms = host_ms;
    cfg.nvml_library_path = library.to_owned();
    let agent = rankscope_agent::start(cfg).await.expect("agent starts");
    (collector, agent)
}

/// An agent sampling the stub's GPUs every 100 ms, host sampling off.
pub async fn gpu_agent(stub: &Stub) -> (FakeCollector, AgentHandle) {
    agent(&stub.path(), 100, 0).await
}

/// Every GPU sample the collector stored, in arrival order.
pub fn gpu_samples(st: &CollectorState) -> Vec<proto::GpuSample> {
    let batches = st.batches.lock().unwrap();
    batches.iter().flat_map(|b| b.gpu_samples.clone()).collect()
}

/// Every host sample the collector stored, in arrival order.
pub fn host_samples(st: &CollectorState) -> Vec<proto::HostSample> {
    let batches = st.batches.lock().unwrap();
    batches
        .iter()
        .flat_map(|b| b.host_samples.clone())
        .collect()
}

/// Waits for a GPU sample matching `pred` and returns it.
pub async fn gpu_sample(
    st: &CollectorState,
    what: &str,
    pred: impl Fn(&proto::GpuSample) -> bool,
) -> proto::GpuSample {
    support::wait_until(what, || gpu_samples(st).iter().any(&pred)).await;
    gpu_samples(st).into_iter().find(|s| pred(s)).unwrap()
}

/// Waits for a host sample matching `pred` and returns it.
pub async fn host_sample(
    st: &CollectorState,
    what: &str,
    pred: impl Fn(&proto::HostSample) -> bool,
) -> proto::HostSample {
    support::wait_until(what, || host_samples(st).iter().any(&pred)).await;
    host_samples(st).into_iter().find(|s| pred(s)).unwrap()
}

/// A rank identity with a pid and local rank.
pub fn identity(job: &str, rank: u32, local_rank: u32, pid: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: job.into(),
        rank,
        world_size: 8,
        local_rank,
        pid,
        ..Default::default()
    }
}

/// The first message of a rank stream: just the identity.
pub fn hello(identity: proto::RankIdentity) -> proto::RankMessage {
    proto::RankMessage {
        identity: Some(identity),
        seq: 1,
        ..Default::default()
    }
}

/// Wall-clock time, ns since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
