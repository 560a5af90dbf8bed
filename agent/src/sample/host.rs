//! Host sampling: CPU, load, memory and rank processes through sysinfo,
//! network bytes from `/proc/net/dev`.
//!
//! In: the time of each tick and the ranks with an open stream. Out: one
//! `proto::HostSample` per tick ([`HostSampler::sample`]).
//!
//! Invariants: utilisation and byte counts cover the interval since the
//! previous tick (`period_ns`); a value the OS does not give is left unset;
//! a rank process's CPU % needs two observations, so its first sample has
//! no `cpu_pct`; rank processes that do not exist here (another pid
//! namespace) are left out. Only the listed pids are read (no process-table
//! scan) and their threads are not enumerated. Network counters come from one
//! read of `/proc/net/dev` rather than sysinfo's per-interface sysfs files
//! (about 40 file opens per tick, most of the sampler's cost).

use std::collections::{BTreeMap, HashSet};

use rankscope_proto::v1 as proto;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::ranks::RankInfo;

/// Samples the host; see the module docs.
pub struct HostSampler {
    sys: System,
    /// Cumulative (rx, tx) bytes per interface at the previous tick.
    nets: BTreeMap<String, (u64, u64)>,
    last_ns: u64,
    /// Pids seen at the previous tick (their CPU % is meaningful now).
    seen: HashSet<u32>,
}

impl HostSampler {
    /// Takes the first reading (the baseline of the first sample's interval).
    pub fn new(now_ns: u64) -> Result<Self, sysinfo::Error> {
        let mut sys = System::new()?;
        sys.refresh_cpu_usage();
        let nets = net_dev().unwrap_or_default();
        Ok(Self {
            sys,
            nets,
            last_ns: now_ns,
            seen: HashSet::new(),
        })
    }

    /// A sample of the interval since the previous call (or `new`).
    pub(crate) fn sample(&mut self, now_ns: u64, ranks: &[RankInfo]) -> proto::HostSample {
        let period_ns = now_ns.saturating_sub(self.last_ns);
        self.last_ns = now_ns;
        self.sys.refresh_cpu_usage();
        self.sys.refresh_memory();
        let finite = |x: f32| x.is_finite().then_some(x.clamp(0.0, 100.0));
        let cores: Vec<f32> = self
            .sys
            .cpus()
            .iter()
            .map(|c| finite(c.usage()).unwrap_or(0.0))
            .collect();
        let load = System::load_average().ok();
        let total = self.sys.total_memory();
        let now = net_dev().unwrap_or_default();
        let net: Vec<proto::NetInterface> = now
            .iter()
            .map(|(name, &(rx, tx))| {
                let (prx, ptx) = self.nets.get(name).copied().unwrap_or((rx, tx));
                proto::NetInterface {
                    name: name.clone(),
                    rx_bytes: delta(rx, prx),
                    tx_bytes: delta(tx, ptx),
                }
            })
            .collect();
        self.nets = now;
        proto::HostSample {
            ts_ns: now_ns,
            period_ns,
            cpu_util_pct: (!cores.is_empty())
                .then(|| finite(self.sys.global_cpu_usage()))
                .flatten(),
            cpu_core_util_pct: cores,
            load1: load.as_ref().map(|l| l.one as f32),
            load5: load.as_ref().map(|l| l.five as f32),
            load15: load.as_ref().map(|l| l.fifteen as f32),
            mem_total_bytes: (total > 0).then_some(total),
            mem_used_bytes: (total > 0).then(|| self.sys.used_memory()),
            mem_available_bytes: (total > 0).then(|| self.sys.available_memory()),
            net,
            processes: self.processes(ranks),
        }
    }

    fn processes(&mut self, ranks: &[RankInfo]) -> Vec<proto::ProcessSample> {
        let pids: Vec<Pid> = ranks
            .iter()
            .filter(|r| r.pid != 0)
            .map(|r| Pid::from_u32(r.pid))
            .collect();
        if pids.is_empty() {
            self.seen.clear();
            return Vec::new();
        }
        self.sys.refresh_processes_specifics(
            ProcessesToUpdate::Some(&pids),
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .without_tasks(),
        );
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for r in ranks.iter().filter(|r| r.pid != 0) {
            let Some(p) = self.sys.process(Pid::from_u32(r.pid)) else {
                continue;
            };
            let cpu = p.cpu_usage();
            out.push(proto::ProcessSample {
                pid: r.pid,
                job_id: r.job_id.clone(),
                rank: r.rank,
                cpu_pct: (self.seen.contains(&r.pid) && cpu.is_finite()).then_some(cpu.max(0.0)),
                rss_bytes: Some(p.memory()),
            });
            seen.insert(r.pid);
        }
        self.seen = seen;
        out
    }
}

/// Bytes since the previous reading (a counter that went back restarted).
fn delta(now: u64, prev: u64) -> u64 {
    if now >= prev {
        now - prev
    } else {
        now
    }
}

/// Cumulative (rx, tx) bytes per interface from `/proc/net/dev`.
fn net_dev() -> Option<BTreeMap<String, (u64, u64)>> {
    let text = std::fs::read_to_string("/proc/net/dev").ok()?;
    Some(parse_net_dev(&text))
}

fn parse_net_dev(text: &str) -> BTreeMap<String, (u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            // Receive: bytes packets errs drop fifo frame compressed multicast;
            // then transmit: bytes ...
            (!name.is_empty() && f.len() >= 9).then(|| (name.to_owned(), (f[0], f[8])))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_dev_is_parsed() {
        let text = "Inter-|   Receive                            |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
  eth0: 9876543210 5000    0    0    0     0          0        12  42        7    0    0    0     0       0          0
bad line
";
        let m = parse_net_dev(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m["lo"], (123_456, 123_456));
        assert_eq!(m["eth0"], (9_876_543_210, 42));
        assert_eq!(delta(10, 4), 6);
        assert_eq!(delta(3, 10), 3, "a reset counter counts from 0");
        assert!(
            net_dev().is_some_and(|m| m.contains_key("lo")),
            "this machine"
        );
    }
}
