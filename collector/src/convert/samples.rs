//! Conversion of an `AgentBatch`'s telemetry samples into rows and into the
//! stream task's GPU observations.
//!
//! In: a batch whose samples passed `validate_samples`. Out:
//! [`TelemetryRows`] (`gpu_samples`, `host_samples`, one `rank_gpu_samples`
//! row per (GPU sample, mapped rank), one `rank_process_samples` row per rank
//! process, one `gpu_error_samples` row per GPU sample whose interval saw
//! an error: an Xid event or a grown ECC / PCIe replay total) and [`GpuObs`]
//! for straggler evidence.
//!
//! Invariants: every row carries the batch's node and identity; unset proto
//! metrics become NULL; proto types stop here.

use rankscope_proto::v1 as proto;

use crate::store::rows::{
    GpuErrorRow, GpuSampleRow, HostSampleRow, RankGpuRow, RankProcessRow, TelemetryRows,
};
use crate::stream::evidence::GpuObs;

/// The telemetry rows of `batch`.
pub fn sample_rows(batch: &proto::AgentBatch) -> TelemetryRows {
    let mut rows = TelemetryRows::default();
    let id = (&batch.agent_id, batch.agent_session, batch.seq);
    for s in &batch.gpu_samples {
        for r in &s.ranks {
            rows.rank_gpu.push(RankGpuRow {
                job_id: r.job_id.clone(),
                rank: r.rank,
                node: batch.node.clone(),
                gpu_index: s.gpu_index,
                uuid: s.uuid.clone(),
                ts_ns: s.ts_ns,
                period_ns: s.period_ns,
                gpu_util_pct: s.gpu_util_pct,
                sm_active_pct: s.sm_active_pct,
                sm_clock_mhz: s.sm_clock_mhz,
                power_w: s.power_w,
                temp_c: s.temp_c,
                throttle_mask: s.throttle_mask,
                throttle_reasons: s.throttle_reasons.clone(),
                agent_id: id.0.clone(),
                agent_session: id.1,
                batch_seq: id.2,
            });
        }
        let counts = (
            s.xid_errors.unwrap_or(0),
            s.ecc_corrected_new.unwrap_or(0),
            s.ecc_uncorrected_new.unwrap_or(0),
            s.pcie_replays_new.unwrap_or(0),
        );
        if counts != (0, 0, 0, 0) {
            rows.gpu_errors.push(GpuErrorRow {
                node: batch.node.clone(),
                uuid: s.uuid.clone(),
                gpu_index: s.gpu_index,
                ts_ns: s.ts_ns,
                period_ns: s.period_ns,
                xid_errors: counts.0,
                last_xid: s.last_xid,
                ecc_corrected: counts.1,
                ecc_uncorrected: counts.2,
                pcie_replays: counts.3,
                ecc_corrected_total: s.ecc_corrected_total,
                ecc_uncorrected_total: s.ecc_uncorrected_total,
                pcie_replays_total: s.pcie_replays_total,
                agent_id: id.0.clone(),
                agent_session: id.1,
                batch_seq: id.2,
            });
        }
        rows.gpu_samples.push(GpuSampleRow {
            node: batch.node.clone(),
            agent_id: id.0.clone(),
            agent_session: id.1,
            batch_seq: id.2,
            ts_ns: s.ts_ns,
            period_ns: s.period_ns,
            gpu_index: s.gpu_index,
            uuid: s.uuid.clone(),
            name: s.name.clone(),
            pci_bus_id: s.pci_bus_id.clone(),
            state: i8::try_from(s.state).unwrap_or(0),
            error: s.error.clone(),
            gpu_util_pct: s.gpu_util_pct,
            mem_util_pct: s.mem_util_pct,
            sm_active_pct: s.sm_active_pct,
            sm_occupancy_pct: s.sm_occupancy_pct,
            tensor_active_pct: s.tensor_active_pct,
            dram_active_pct: s.dram_active_pct,
            mem_used_bytes: s.mem_used_bytes,
            mem_total_bytes: s.mem_total_bytes,
            power_w: s.power_w,
            power_limit_w: s.power_limit_w,
            temp_c: s.temp_c,
            sm_clock_mhz: s.sm_clock_mhz,
            sm_clock_max_mhz: s.sm_clock_max_mhz,
            mem_clock_mhz: s.mem_clock_mhz,
            mem_clock_max_mhz: s.mem_clock_max_mhz,
            throttle_mask: s.throttle_mask,
            throttle_reasons: s.throttle_reasons.clone(),
            pcie_tx_bytes_per_s: s.pcie_tx_bytes_per_s,
            pcie_rx_bytes_per_s: s.pcie_rx_bytes_per_s,
            nvlink_tx_bytes_per_s: s.nvlink_tx_bytes_per_s,
            nvlink_rx_bytes_per_s: s.nvlink_rx_bytes_per_s,
            ecc_corrected_total: s.ecc_corrected_total,
            ecc_uncorrected_total: s.ecc_uncorrected_total,
            xid_errors: s.xid_errors,
            last_xid: s.last_xid,
            process_pids: s.processes.iter().map(|p| p.pid).collect(),
            process_mem_bytes: s.processes.iter().map(|p| p.used_memory_bytes).collect(),
            rank_jobs: s.ranks.iter().map(|r| r.job_id.clone()).collect(),
            rank_ids: s.ranks.iter().map(|r| r.rank).collect(),
        });
    }
    for h in &batch.host_samples {
        for p in &h.processes {
            rows.rank_process.push(RankProcessRow {
                job_id: p.job_id.clone(),
                rank: p.rank,
                node: batch.node.clone(),
                pid: p.pid,
                ts_ns: h.ts_ns,
                period_ns: h.period_ns,
                cpu_pct: p.cpu_pct,
                rss_bytes: p.rss_bytes,
                agent_id: id.0.clone(),
                agent_session: id.1,
                batch_seq: id.2,
            });
        }
        rows.host_samples.push(HostSampleRow {
            node: batch.node.clone(),
            agent_id: id.0.clone(),
            agent_session: id.1,
            batch_seq: id.2,
            ts_ns: h.ts_ns,
            period_ns: h.period_ns,
            cpu_util_pct: h.cpu_util_pct,
            cpu_core_util_pct: h.cpu_core_util_pct.clone(),
            load1: h.load1,
            load5: h.load5,
            load15: h.load15,
            mem_total_bytes: h.mem_total_bytes,
            mem_used_bytes: h.mem_used_bytes,
            mem_available_bytes: h.mem_available_bytes,
            net_interfaces: h.net.iter().map(|n| n.name.clone()).collect(),
            net_rx_bytes: h.net.iter().map(|n| n.rx_bytes).collect(),
            net_tx_bytes: h.net.iter().map(|n| n.tx_bytes).collect(),
        });
    }
    rows
}

/// The GPU samples of `batch` that are mapped to ranks, as the stream task
/// keeps them for straggler evidence.
pub fn gpu_obs(batch: &proto::AgentBatch) -> Vec<GpuObs> {
    batch
        .gpu_samples
        .iter()
        .filter(|s| !s.ranks.is_empty() && s.state == proto::GpuState::Ok as i32)
        .map(|s| GpuObs {
            node: batch.node.clone(),
            gpu_index: s.gpu_index,
            uuid: s.uuid.clone(),
            ts_ns: s.ts_ns,
            period_ns: s.period_ns,
            ranks: s.ranks.iter().map(|r| (r.job_id.clone(), r.rank)).collect(),
            sm_clock_mhz: s.sm_clock_mhz,
            throttle_reasons: s.throttle_reasons.clone(),
            temp_c: s.temp_c,
            power_w: s.power_w,
            gpu_util_pct: s.gpu_util_pct,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> proto::AgentBatch {
        proto::AgentBatch {
            agent_id: "a".into(),
            agent_session: 9,
            seq: 3,
            node: "n1".into(),
            gpu_samples: vec![proto::GpuSample {
                ts_ns: 100,
                period_ns: 10,
                gpu_index: 2,
                uuid: "GPU-2".into(),
                state: proto::GpuState::Ok as i32,
                sm_clock_mhz: Some(1200),
                throttle_mask: Some(0x40),
                throttle_reasons: vec!["hw_thermal_slowdown".into()],
                processes: vec![proto::GpuProcess {
                    pid: 7,
                    used_memory_bytes: None,
                }],
                ranks: vec![
                    proto::RankRef {
                        job_id: "j".into(),
                        rank: 5,
                    },
                    proto::RankRef {
                        job_id: "j".into(),
                        rank: 6,
                    },
                ],
                ..Default::default()
            }],
            host_samples: vec![proto::HostSample {
                ts_ns: 200,
                net: vec![proto::NetInterface {
                    name: "eth0".into(),
                    rx_bytes: 1,
                    tx_bytes: 2,
                }],
                processes: vec![proto::ProcessSample {
                    pid: 7,
                    job_id: "j".into(),
                    rank: 5,
                    cpu_pct: Some(99.5),
                    rss_bytes: None,
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn rows_carry_identity_nulls_and_rank_fanout() {
        let r = sample_rows(&batch());
        assert_eq!(r.gpu_samples.len(), 1);
        let g = &r.gpu_samples[0];
        assert_eq!(
            (g.node.as_str(), g.agent_session, g.batch_seq),
            ("n1", 9, 3)
        );
        assert_eq!(g.state, 1);
        assert_eq!(g.power_w, None);
        assert_eq!(g.process_mem_bytes, vec![None]);
        assert_eq!(g.rank_ids, vec![5, 6]);
        assert_eq!(r.rank_gpu.len(), 2, "one row per mapped rank");
        assert_eq!(r.rank_gpu[1].rank, 6);
        assert_eq!(r.rank_gpu[1].sm_clock_mhz, Some(1200));
        assert_eq!(r.host_samples[0].net_interfaces, vec!["eth0"]);
        assert_eq!(r.host_samples[0].net_tx_bytes, vec![2]);
        assert_eq!(r.rank_process[0].cpu_pct, Some(99.5));
        assert_eq!(r.rank_process[0].ts_ns, 200);
        assert_eq!(r.len(), 5);
        let obs = gpu_obs(&batch());
        assert_eq!(
            obs[0].ranks,
            vec![("j".to_string(), 5), ("j".to_string(), 6)]
        );
        assert!(r.gpu_errors.is_empty(), "no error in the interval");
    }

    #[test]
    fn only_samples_that_saw_an_error_are_error_rows() {
        let mut b = batch();
        let healthy = b.gpu_samples[0].clone();
        let s = &mut b.gpu_samples[0];
        (s.xid_errors, s.ecc_corrected_new, s.pcie_replays_new) = (Some(0), Some(0), Some(0));
        b.gpu_samples.push(proto::GpuSample {
            ts_ns: 110,
            xid_errors: Some(0),
            ecc_uncorrected_new: Some(2),
            ecc_uncorrected_total: Some(2),
            pcie_replays_new: Some(5),
            ..healthy.clone()
        });
        b.gpu_samples.push(proto::GpuSample {
            ts_ns: 120,
            xid_errors: Some(1),
            last_xid: Some(79),
            ..healthy
        });
        let r = sample_rows(&b);
        assert_eq!(r.gpu_samples.len(), 3);
        let got: Vec<(u64, u32, u64, u64, u64, Option<u32>)> = r
            .gpu_errors
            .iter()
            .map(|e| {
                (
                    e.ts_ns,
                    e.xid_errors,
                    e.ecc_corrected,
                    e.ecc_uncorrected,
                    e.pcie_replays,
                    e.last_xid,
                )
            })
            .collect();
        assert_eq!(got, [(110, 0, 0, 2, 5, None), (120, 1, 0, 0, 0, Some(79))]);
        let e = &r.gpu_errors[0];
        assert_eq!(
            (
                e.node.as_str(),
                e.uuid.as_str(),
                e.batch_seq,
                e.ecc_uncorrected_total
            ),
            ("n1", "GPU-2", 3, Some(2))
        );
    }
}
