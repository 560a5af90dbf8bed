//! GPU sampling through the real nvml-wrapper path against the stand-in.

use rankscope_agent::NvmlState;
use rankscope_proto::v1 as proto;

use crate::stub::Stub;
use crate::support::{self, Rank};
use crate::util::*;

const TWO_GPUS: &str = "
device_count 2
gpu 0 name NVIDIA A100-SXM4-80GB
gpu 0 uuid GPU-5f2b7c1e-aaaa-bbbb-cccc-000000000000
gpu 0 bus_id 00000000:3B:00.0
gpu 0 util_gpu 87
gpu 0 util_mem 41
gpu 0 mem_total 85899345920
gpu 0 mem_used 42949672960
gpu 0 power_mw 312500
gpu 0 power_limit_mw 400000
gpu 0 temp_c 71
gpu 0 clock_sm 1410
gpu 0 clock_mem 1593
gpu 0 clock_sm_max 1980
gpu 0 clock_mem_max 2619
gpu 0 throttle 0x44
gpu 0 pcie_tx_kbps 5000
gpu 0 pcie_rx_kbps 7000
gpu 0 ecc_corrected 3
gpu 0 ecc_uncorrected 1
gpu 0 pcie_replays 17
gpu 0 process 4242 1073741824
gpu 0 process 4343 -1
gpu 1 util_gpu 5
";

const OK: i32 = proto::GpuState::Ok as i32;

#[tokio::test]
async fn exact_values_leave_the_agent() {
    let stub = Stub::new(TWO_GPUS);
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    // The first tick reads everything but rates (PCIe without GPM is read
    // on this tick, then about once a second).
    let s = gpu_sample(st, "first sample of GPU 0", |s| s.gpu_index == 0).await;
    assert_eq!(s.state, OK);
    assert_eq!(s.period_ns, 0);
    assert_eq!(s.name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(s.uuid, "GPU-5f2b7c1e-aaaa-bbbb-cccc-000000000000");
    assert_eq!(s.pci_bus_id, "00000000:3B:00.0");
    assert_eq!(s.gpu_util_pct, Some(87.0));
    assert_eq!(s.mem_util_pct, Some(41.0));
    assert_eq!(s.mem_total_bytes, Some(85_899_345_920));
    assert_eq!(s.mem_used_bytes, Some(42_949_672_960));
    assert_eq!(s.power_w, Some(312.5));
    assert_eq!(s.power_limit_w, Some(400.0));
    assert_eq!(s.temp_c, Some(71.0));
    assert_eq!(s.sm_clock_mhz, Some(1410));
    assert_eq!(s.mem_clock_mhz, Some(1593));
    assert_eq!(s.sm_clock_max_mhz, Some(1980));
    assert_eq!(s.mem_clock_max_mhz, Some(2619));
    assert_eq!(s.throttle_mask, Some(0x44));
    assert_eq!(s.throttle_reasons, ["sw_power_cap", "hw_thermal_slowdown"]);
    assert_eq!(s.pcie_tx_bytes_per_s, Some(5000 * 1024));
    assert_eq!(s.pcie_rx_bytes_per_s, Some(7000 * 1024));
    assert_eq!(s.ecc_corrected_total, Some(3));
    assert_eq!(s.ecc_uncorrected_total, Some(1));
    assert_eq!(s.pcie_replays_total, Some(17));
    assert_eq!(
        (s.ecc_corrected_new, s.pcie_replays_new),
        (None, None),
        "the first sample has no interval"
    );
    assert_eq!(s.xid_errors, Some(0));
    assert_eq!(s.last_xid, None);
    let procs: Vec<(u32, Option<u64>)> = s
        .processes
        .iter()
        .map(|p| (p.pid, p.used_memory_bytes))
        .collect();
    assert_eq!(procs, [(4242, Some(1 << 30)), (4343, None)]);
    // No GPM on this GPU: its metrics are missing, not zero.
    assert_eq!(s.sm_active_pct, None);
    assert_eq!(s.sm_occupancy_pct, None);
    assert_eq!(s.tensor_active_pct, None);
    assert_eq!(s.dram_active_pct, None);
    assert!(s.ranks.is_empty(), "no rank streams: {:?}", s.ranks);

    // GPU 1 has the defaults except its utilisation.
    let g1 = gpu_sample(st, "GPU 1", |s| s.gpu_index == 1).await;
    assert_eq!(g1.gpu_util_pct, Some(5.0));
    assert_eq!(g1.uuid, "GPU-00000000-0000-0000-0000-000000000001");
    assert_eq!(
        g1.pcie_replays_total,
        Some(0),
        "a counter at 0 is 0, not missing"
    );

    // Later ticks cover an interval; the blocking PCIe read is skipped.
    let later = gpu_sample(st, "second sample of GPU 0", |s| {
        s.gpu_index == 0 && s.period_ns > 0
    })
    .await;
    assert!(
        (50_000_000..5_000_000_000).contains(&later.period_ns),
        "period {}",
        later.period_ns
    );
    assert_eq!(later.pcie_tx_bytes_per_s, None);
    assert_eq!(
        later.nvlink_tx_bytes_per_s,
        Some(0),
        "stub counters stand still"
    );
    let m = agent.metrics();
    assert_eq!(m.nvml_state, NvmlState::Ok);
    assert_eq!(m.gpus, 2);
    assert!(m.gpu_samples >= 4);
    let report = agent.shutdown().await;
    assert_eq!(report.metrics.dropped_samples["queue_full"], 0);
    assert_eq!(
        report.metrics.delivered_samples + report.metrics.dropped_samples["shutdown"],
        report.metrics.gpu_samples,
        "every sample is delivered or counted as dropped"
    );
}

#[tokio::test]
async fn unsupported_metrics_are_missing_and_other_gpus_unaffected() {
    let stub = Stub::new(
        "device_count 2
gpu 0 unsupported util
gpu 0 unsupported power
gpu 0 unsupported temp
gpu 0 unsupported clocks
gpu 0 unsupported throttle
gpu 0 unsupported pcie
gpu 0 unsupported nvlink
gpu 0 unsupported ecc
gpu 0 unsupported xid
gpu 0 unsupported pcie_replay
gpu 0 unsupported processes
gpu 0 process 77 1",
    );
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    for period in [false, true] {
        let s = gpu_sample(st, "GPU 0", |s| {
            s.gpu_index == 0 && (s.period_ns > 0) == period
        })
        .await;
        assert_eq!(s.state, OK, "unsupported metrics do not make a GPU fail");
        assert_eq!(s.gpu_util_pct, None);
        assert_eq!(s.mem_util_pct, None);
        assert_eq!(s.power_w, None);
        assert_eq!(s.temp_c, None);
        assert_eq!(s.sm_clock_mhz, None);
        assert_eq!(s.mem_clock_mhz, None);
        assert_eq!(s.throttle_mask, None);
        assert!(s.throttle_reasons.is_empty());
        assert_eq!(s.pcie_tx_bytes_per_s, None);
        assert_eq!(s.nvlink_tx_bytes_per_s, None);
        assert_eq!(s.ecc_corrected_total, None);
        assert_eq!(s.xid_errors, None);
        assert_eq!(s.pcie_replays_total, None);
        assert!(s.processes.is_empty());
        // What is supported is still there.
        assert_eq!(s.mem_used_bytes, Some(1 << 30));
        assert_eq!(s.power_limit_w, Some(700.0));
        assert_eq!(s.sm_clock_max_mhz, Some(1980));
    }
    let g1 = gpu_sample(st, "GPU 1 at its second tick", |s| {
        s.gpu_index == 1 && s.period_ns > 0
    })
    .await;
    assert_eq!(g1.power_w, Some(300.0));
    assert_eq!(g1.temp_c, Some(60.0));
    assert_eq!(g1.throttle_mask, Some(0));
    assert_eq!(
        agent.metrics().gpu_read_errors,
        0,
        "NotSupported is no error"
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn a_lost_gpu_is_reported_and_the_others_go_on() {
    let stub = Stub::new("device_count 3\ngpu 1 temp_c 55");
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    gpu_sample(st, "GPU 1 ok", |s| s.gpu_index == 1 && s.state == OK).await;

    // GPU 1 falls off the bus, GPU 2 errors on every call.
    stub.set("device_count 3\ngpu 1 lost 1\ngpu 2 error 999");
    let lost = gpu_sample(st, "GPU 1 lost", |s| {
        s.gpu_index == 1 && s.state == proto::GpuState::Lost as i32
    })
    .await;
    assert!(lost.error.contains("fell off the bus"), "{}", lost.error);
    assert_eq!(
        lost.uuid, "GPU-00000000-0000-0000-0000-000000000001",
        "identity kept"
    );
    assert_eq!(lost.temp_c, None, "no metrics from a lost GPU");
    let err = gpu_sample(st, "GPU 2 error", |s| {
        s.gpu_index == 2 && s.state == proto::GpuState::Error as i32
    })
    .await;
    assert!(!err.error.is_empty());
    gpu_sample(st, "GPU 0 still sampled after the loss", |s| {
        s.gpu_index == 0 && s.state == OK && s.ts_ns > lost.ts_ns
    })
    .await;

    // It comes back (after a reset): sampled again.
    stub.set("device_count 3\ngpu 1 temp_c 56");
    let back = gpu_sample(st, "GPU 1 back", |s| {
        s.gpu_index == 1 && s.temp_c == Some(56.0)
    })
    .await;
    assert_eq!(back.state, OK);
    assert_eq!(agent.metrics().gpus, 3);
    agent.shutdown().await;
}

#[tokio::test]
async fn gpm_metrics_and_nvlink_rates_need_two_ticks() {
    let stub = Stub::new(
        "device_count 2
gpu 0 gpm 1
gpu 0 gpm_sm_active 62.5
gpu 0 gpm_sm_occupancy 40
gpu 0 gpm_tensor 30.25
gpu 0 gpm_dram 55
gpu 0 gpm_pcie_tx_mib_s 10
gpu 0 gpm_pcie_rx_mib_s 20
gpu 0 gpm_nvlink_tx_mib_s 100
gpu 0 gpm_nvlink_rx_mib_s 200
gpu 1 nvlink_tx_kib_s 1048576
gpu 1 nvlink_rx_kib_s 524288",
    );
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    let first = gpu_sample(st, "first GPM tick", |s| s.gpu_index == 0).await;
    assert_eq!(first.sm_active_pct, None, "GPM needs two samples");
    let s = gpu_sample(st, "GPM values", |s| {
        s.gpu_index == 0 && s.sm_active_pct.is_some()
    })
    .await;
    assert_eq!(s.sm_active_pct, Some(62.5));
    assert_eq!(s.sm_occupancy_pct, Some(40.0));
    assert_eq!(s.tensor_active_pct, Some(30.25));
    assert_eq!(s.dram_active_pct, Some(55.0));
    assert_eq!(s.pcie_tx_bytes_per_s, Some(10 << 20));
    assert_eq!(s.pcie_rx_bytes_per_s, Some(20 << 20));
    assert_eq!(s.nvlink_tx_bytes_per_s, Some(100 << 20));
    assert_eq!(s.nvlink_rx_bytes_per_s, Some(200 << 20));

    // Without GPM, NVLink rates come from the cumulative counters.
    let n = gpu_sample(st, "NVLink rate", |s| {
        s.gpu_index == 1 && s.nvlink_tx_bytes_per_s.is_some()
    })
    .await;
    let tx = n.nvlink_tx_bytes_per_s.unwrap() as f64;
    let rx = n.nvlink_rx_bytes_per_s.unwrap() as f64;
    assert!((tx / (1u64 << 30) as f64 - 1.0).abs() < 0.2, "tx {tx}");
    assert!((rx / (1u64 << 29) as f64 - 1.0).abs() < 0.2, "rx {rx}");
    agent.shutdown().await;
}

#[tokio::test]
async fn critical_xid_events_are_counted_once() {
    let stub = Stub::new("device_count 2\ngpu 1 xid 79\ngpu 1 xid 48");
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    let s = gpu_sample(st, "Xid seen", |s| {
        s.gpu_index == 1 && s.xid_errors > Some(0)
    })
    .await;
    assert_eq!(s.xid_errors, Some(2));
    assert_eq!(s.last_xid, Some(48));
    let after = gpu_sample(st, "next tick", |x| x.gpu_index == 1 && x.ts_ns > s.ts_ns).await;
    assert_eq!(after.xid_errors, Some(0), "counted in one interval only");
    assert_eq!(after.last_xid, Some(48));
    let total: u32 = gpu_samples(st)
        .iter()
        .filter(|x| x.gpu_index == 0)
        .filter_map(|x| x.xid_errors)
        .sum();
    assert_eq!(total, 0, "GPU 0 had none");
    agent.shutdown().await;
}

#[tokio::test]
async fn error_counts_are_the_increase_of_the_totals() {
    let stub = Stub::new("device_count 1\ngpu 0 ecc_corrected 3\ngpu 0 pcie_replays 40");
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    let s = gpu_sample(st, "an interval", |s| s.period_ns > 0).await;
    assert_eq!(
        (
            s.ecc_corrected_new,
            s.ecc_uncorrected_new,
            s.pcie_replays_new
        ),
        (Some(0), Some(0), Some(0))
    );
    stub.set(
        "device_count 1\ngpu 0 ecc_corrected 8\ngpu 0 ecc_uncorrected 1\ngpu 0 pcie_replays 47",
    );
    let s = gpu_sample(st, "the counters grew", |s| {
        s.pcie_replays_total == Some(47)
    })
    .await;
    assert_eq!(
        (
            s.ecc_corrected_new,
            s.ecc_uncorrected_new,
            s.pcie_replays_new
        ),
        (Some(5), Some(1), Some(7))
    );
    let next = gpu_sample(st, "the next tick", |x| x.ts_ns > s.ts_ns).await;
    assert_eq!(
        next.pcie_replays_new,
        Some(0),
        "counted in one interval only"
    );
    // A driver reload resets the volatile counters: what follows counts.
    stub.set(
        "device_count 1\ngpu 0 ecc_corrected 2\ngpu 0 ecc_uncorrected 1\ngpu 0 pcie_replays 47",
    );
    let s = gpu_sample(st, "the reset", |s| s.ecc_corrected_total == Some(2)).await;
    assert_eq!(s.ecc_corrected_new, Some(2));
    agent.shutdown().await;
}

#[tokio::test]
async fn init_failure_degrades_to_host_only() {
    for (library, why) in [
        (None, "NVIDIA kernel driver is not loaded"),
        (Some("/nonexistent/libnvidia-ml.so.1"), "cannot load"),
    ] {
        let stub = Stub::new("init_error 9\ndevice_count 2");
        let path = library.map_or_else(|| stub.path(), str::to_owned);
        let (collector, agent) = agent(&path, 100, 100).await;
        let st = &collector.state;
        host_sample(st, "a host sample", |_| true).await;
        // Rank events still flow.
        let mut rank = Rank::over_tcp(agent.tcp_addr).await;
        let ack = rank.call(hello(identity("j", 0, 0, 1))).await;
        assert_eq!(ack.code, 0);
        assert_eq!(agent.metrics().nvml_state, NvmlState::Unavailable, "{why}");
        assert!(gpu_samples(st).is_empty());
        rank.close();
        agent.shutdown().await;
        let check = rankscope_agent::sample::check::check(&rankscope_agent::Config {
            nvml_library_path: path.clone(),
            ..Default::default()
        });
        assert!(check.to_string().contains(why), "{check}");
    }
}

#[tokio::test]
async fn a_driver_that_comes_up_later_is_picked_up_without_a_restart() {
    let stub = Stub::new("init_error 9\ndevice_count 2");
    let collector = support::FakeCollector::start().await;
    let mut cfg = support::config(&collector.url(), None);
    cfg.gpu_sample_interval_ms = 100;
    cfg.host_sample_interval_ms = 100;
    cfg.nvml_library_path = stub.path();
    cfg.nvml_retry_interval_ms = 100;
    let agent = rankscope_agent::start(cfg).await.expect("agent starts");
    let st = &collector.state;
    host_sample(st, "a host sample", |_| true).await;
    assert_eq!(agent.metrics().nvml_state, NvmlState::Unavailable);
    assert!(gpu_samples(st).is_empty());
    // The driver is loaded: the next retry finds it.
    stub.set("device_count 2");
    gpu_sample(st, "a sample of GPU 1 after the retry", |s| {
        s.gpu_index == 1
    })
    .await;
    assert_eq!(agent.metrics().nvml_state, NvmlState::Ok);
    agent.shutdown().await;
}

/// A child process killed and reaped when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_rank_whose_environment_sets_cuda_visible_devices_is_mapped_by_it() {
    // The rank processes are in no GPU's process list (as behind a pid
    // namespace): the agent reads their /proc/<pid>/environ.
    let stub = Stub::new("device_count 3");
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    let rank_process = |cvd: &str| {
        Child(
            std::process::Command::new("sleep")
                .arg("600")
                .env("CUDA_VISIBLE_DEVICES", cvd)
                .spawn()
                .expect("spawn a rank process"),
        )
    };
    // (rank, local rank, CUDA_VISIBLE_DEVICES, the GPU it must land on):
    // a single entry wins over the local rank; in a list the local rank
    // picks the entry; a UUID names the GPU.
    let cases = [
        (5, 0, "2", 2),
        (6, 1, "2,0,1", 0),
        (7, 2, "GPU-00000000-0000-0000-0000-000000000001", 1),
    ];
    let mut procs = Vec::new();
    let mut streams = Vec::new();
    for (rank, local, cvd, _) in cases {
        let p = rank_process(cvd);
        let mut r = Rank::over_tcp(agent.tcp_addr).await;
        let ack = r.call(hello(identity("cvd", rank, local, p.0.id()))).await;
        assert_eq!(ack.code, 0, "{}", ack.message);
        procs.push(p);
        streams.push(r);
    }
    for (rank, _, _, gpu) in cases {
        gpu_sample(st, &format!("rank {rank} on GPU {gpu}"), |s| {
            s.gpu_index == gpu && s.ranks.iter().any(|r| r.rank == rank)
        })
        .await;
    }
    // Never on another GPU (the local-rank fallback would put each elsewhere).
    for s in gpu_samples(st) {
        for r in &s.ranks {
            let (_, _, _, gpu) = cases.iter().find(|c| c.0 == r.rank).expect("a known rank");
            assert_eq!(s.gpu_index, *gpu, "rank {} on GPU {}", r.rank, s.gpu_index);
        }
    }
    drop(streams);
    agent.shutdown().await;
}

#[tokio::test]
async fn gpus_are_mapped_to_ranks_by_pid_then_local_rank() {
    let stub = Stub::new("device_count 3\ngpu 1 process 5000 1048576");
    let (collector, agent) = gpu_agent(&stub).await;
    let st = &collector.state;
    let mut by_pid = Rank::over_tcp(agent.tcp_addr).await;
    by_pid.call(hello(identity("job", 3, 0, 5000))).await;
    // pid unknown (0): local rank 0 -> GPU 0.
    let mut by_local = Rank::over_tcp(agent.tcp_addr).await;
    by_local.call(hello(identity("job", 4, 0, 0))).await;
    // A pid with no process here: no CUDA_VISIBLE_DEVICES to read, local rank 2.
    let mut elsewhere = Rank::over_tcp(agent.tcp_addr).await;
    elsewhere
        .call(hello(identity("job", 5, 2, 999_999_999)))
        .await;

    let ranks = |i: u32| move |s: &proto::GpuSample| s.gpu_index == i && !s.ranks.is_empty();
    let g1 = gpu_sample(st, "GPU 1 mapped", ranks(1)).await;
    let g0 = gpu_sample(st, "GPU 0 mapped", ranks(0)).await;
    let g2 = gpu_sample(st, "GPU 2 mapped", ranks(2)).await;
    let tag = |s: &proto::GpuSample| -> Vec<(String, u32)> {
        s.ranks.iter().map(|r| (r.job_id.clone(), r.rank)).collect()
    };
    assert_eq!(tag(&g1), [("job".to_string(), 3)]);
    assert_eq!(tag(&g0), [("job".to_string(), 4)]);
    assert_eq!(tag(&g2), [("job".to_string(), 5)]);

    // Streams gone: no more ranks on new samples.
    for r in [&mut by_pid, &mut by_local, &mut elsewhere] {
        r.close();
    }
    support::wait_until("streams closed", || agent.metrics().streams_active == 0).await;
    // A tick that starts after this reads the registry without them; one
    // interval later no tick can have started before.
    let closed_ns = now_ns() + 150_000_000;
    let after = gpu_sample(st, "a sample after the streams ended", |s| {
        s.gpu_index == 1 && s.ts_ns > closed_ns
    })
    .await;
    assert!(after.ranks.is_empty(), "{:?}", after.ranks);
    agent.shutdown().await;
}

/// The costly reads (the PCIe replay counter took 177 us of CPU per call on
/// an H200, bench/RESULTS-gpu.md; the ECC totals; the enforced power limit)
/// are made on the once-a-second tick only, and every sample between
/// carries the last values read.
#[tokio::test]
async fn costly_reads_are_made_once_a_second_not_every_tick() {
    let stub = Stub::new("device_count 1\ngpu 0 pcie_replays 5\ngpu 0 ecc_corrected 2");
    let (collector, agent) = gpu_agent(&stub).await; // 100 ms: a slow tick in 10
    let st = &collector.state;
    support::wait_until("25 samples of GPU 0", || gpu_samples(st).len() >= 25).await;
    // Read while the agent runs: it holds the same instance of the copy.
    let ticks = stub.calls_of("nvmlDeviceGetUtilizationRates");
    let replays = stub.calls_of("nvmlDeviceGetPcieReplayCounter");
    let ecc = stub.calls_of("nvmlDeviceGetTotalEccErrors");
    let limit = stub.calls_of("nvmlDeviceGetEnforcedPowerLimit");
    assert!(ticks >= 25, "{ticks} ticks read the utilisation");
    // Slow ticks: the first and every 10th after it (+1: the sampler may be
    // between its reads of one tick).
    let slow_most = ticks.div_ceil(10) + 1;
    assert!(
        (2..=slow_most).contains(&replays),
        "PCIe replay counter read {replays} times in {ticks} ticks (at most {slow_most})"
    );
    assert!(
        (2..=slow_most).contains(&limit),
        "power limit read {limit} times in {ticks} ticks"
    );
    assert!(
        (4..=2 * slow_most).contains(&ecc),
        "ECC totals (corrected + uncorrected) read {ecc} times in {ticks} ticks"
    );
    let samples = gpu_samples(st);
    for s in &samples {
        assert_eq!(
            (s.pcie_replays_total, s.ecc_corrected_total, s.power_limit_w),
            (Some(5), Some(2), Some(700.0)),
            "sample at {} repeats the slow tick's values",
            s.ts_ns
        );
    }
    agent.shutdown().await;
}
