//! Host sampling on this machine's real /proc: ranges and consistency.

use crate::support::Rank;
use crate::util::*;

/// A `/proc/meminfo` value in bytes.
fn meminfo(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn proc_stat_cpus() -> usize {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count()
}

#[tokio::test]
async fn host_samples_match_this_machine() {
    let (collector, agent) = agent("/nonexistent/libnvidia-ml.so.1", 0, 100).await;
    let st = &collector.state;
    // This test process plays a rank, so its CPU and RSS are sampled.
    let me = std::process::id();
    let mut rank = Rank::over_tcp(agent.tcp_addr).await;
    rank.call(hello(identity("host-job", 2, 0, me))).await;

    let s = host_sample(st, "a sample with our process CPU %", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == me && p.cpu_pct.is_some())
    })
    .await;
    assert!(
        (50_000_000..5_000_000_000).contains(&s.period_ns),
        "period {}",
        s.period_ns
    );
    let cpu = s.cpu_util_pct.expect("total CPU");
    assert!((0.0..=100.0).contains(&cpu), "{cpu}");
    assert_eq!(s.cpu_core_util_pct.len(), proc_stat_cpus());
    assert!(s
        .cpu_core_util_pct
        .iter()
        .all(|c| (0.0..=100.0).contains(c)));
    let total = s.mem_total_bytes.expect("memory total");
    let used = s.mem_used_bytes.expect("memory used");
    let avail = s.mem_available_bytes.expect("memory available");
    assert!(total > 0 && total <= meminfo("MemTotal:"), "{total}");
    assert!(used <= total && avail <= total, "{used} {avail} {total}");
    assert!(used + avail <= total + total / 10, "roughly a partition");
    for l in [s.load1, s.load5, s.load15] {
        assert!(l.expect("load average") >= 0.0);
    }
    let lo = s
        .net
        .iter()
        .find(|n| n.name == "lo")
        .expect("loopback listed");
    // Our own gRPC traffic runs over loopback (received and sent alike).
    assert_eq!(lo.rx_bytes, lo.tx_bytes);
    let p = s.processes.iter().find(|p| p.pid == me).unwrap();
    assert_eq!((p.job_id.as_str(), p.rank), ("host-job", 2));
    let rss = p.rss_bytes.expect("RSS");
    assert!(rss > 1 << 20 && rss < total, "{rss}");
    assert!(p.cpu_pct.unwrap() >= 0.0);

    // Samples come every ~100 ms, their intervals do not overlap.
    let all = host_samples(st);
    for w in all.windows(2) {
        assert!(w[1].ts_ns > w[0].ts_ns);
        assert!(w[1].ts_ns - w[1].period_ns >= w[0].ts_ns - 1_000_000);
    }
    // Batches holding only samples wait up to a second for more (here
    // batch_max_delay_ms is 20 ms): about ten 100 ms ticks per batch.
    crate::support::wait_until("15 host samples", || host_samples(st).len() >= 15).await;
    let batches = st.batches.lock().unwrap().len();
    assert!(batches * 3 < host_samples(st).len(), "{batches} batches");
    rank.close();
    let report = agent.shutdown().await;
    assert_eq!(report.metrics.gpu_samples, 0);
    assert!(report.metrics.host_samples >= 2);
}
