//! `rankscope-agent --check`: what this node can sample.
//!
//! In: the agent configuration. Out: a [`CheckReport`] (printable): whether
//! NVML loads and why not, each GPU with the metrics it reports now and
//! those it leaves empty, GPM support, and the host metrics sysinfo gives.
//! It takes one real sample of every GPU and of the host; nothing is sent.

use std::fmt;

use rankscope_proto::v1 as proto;

use super::gpu::GpuSampler;
use super::host::HostSampler;
use super::{describe_nvml_error, open_nvml};
use crate::Config;

/// What NVML gave.
#[derive(Debug, Clone, PartialEq)]
pub enum NvmlCheck {
    /// `gpu_sample_interval_ms = 0`.
    Disabled,
    /// The library did not load or initialise.
    Unavailable { library: String, reason: String },
    /// NVML works; one entry per GPU.
    Ok {
        library: String,
        driver: Option<String>,
        gpus: Vec<GpuCheck>,
    },
}

/// One GPU as sampled once.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCheck {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    /// `ok`, `lost` or `error: ...`.
    pub state: String,
    /// GPM metrics (SM activity, occupancy, tensor, DRAM) are available.
    pub gpm: bool,
    /// Metrics the GPU reported.
    pub metrics: Vec<&'static str>,
    /// Metrics it left empty (unsupported, or rates that need two ticks).
    pub missing: Vec<&'static str>,
}

/// What sysinfo gave.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCheck {
    pub cpus: usize,
    pub mem_total_bytes: Option<u64>,
    pub load1: Option<f32>,
    pub interfaces: Vec<String>,
}

/// The result of `--check`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    pub node: String,
    pub nvml: NvmlCheck,
    pub host: Result<HostCheck, String>,
    pub host_interval_ms: u64,
}

/// Probes NVML and the host as the agent would sample them.
pub fn check(cfg: &Config) -> CheckReport {
    let library = cfg.nvml_library().to_owned();
    let nvml = if cfg.gpu_sample_interval_ms == 0 {
        NvmlCheck::Disabled
    } else {
        match open_nvml(&library) {
            Err(e) => NvmlCheck::Unavailable {
                reason: describe_nvml_error(&library, &e),
                library,
            },
            Ok(n) => {
                let errors = std::sync::atomic::AtomicU64::new(0);
                let samples = GpuSampler::new(&n, cfg.gpu_sample_interval_ms).sample(1, &errors);
                let gpus = samples
                    .iter()
                    .map(|s| GpuCheck {
                        index: s.gpu_index,
                        name: s.name.clone(),
                        uuid: s.uuid.clone(),
                        pci_bus_id: s.pci_bus_id.clone(),
                        state: state_text(s),
                        gpm: n
                            .device_by_index(s.gpu_index)
                            .and_then(|d| d.gpm_support())
                            .unwrap_or(false),
                        metrics: present(s, true),
                        missing: present(s, false),
                    })
                    .collect();
                NvmlCheck::Ok {
                    driver: n.sys_driver_version().ok(),
                    library,
                    gpus,
                }
            }
        }
    };
    let host = HostSampler::new(0)
        .map(|mut h| {
            let s = h.sample(1, &[]);
            HostCheck {
                cpus: s.cpu_core_util_pct.len(),
                mem_total_bytes: s.mem_total_bytes,
                load1: s.load1,
                interfaces: s.net.into_iter().map(|n| n.name).collect(),
            }
        })
        .map_err(|e| e.to_string());
    CheckReport {
        node: cfg.node.clone(),
        nvml,
        host,
        host_interval_ms: cfg.host_sample_interval_ms,
    }
}

fn state_text(s: &proto::GpuSample) -> String {
    match proto::GpuState::try_from(s.state) {
        Ok(proto::GpuState::Ok) => "ok".into(),
        Ok(proto::GpuState::Lost) => format!("lost: {}", s.error),
        _ => format!("error: {}", s.error),
    }
}

/// Names of the metrics of `s` that are set (`set`) or unset (`!set`).
fn present(s: &proto::GpuSample, set: bool) -> Vec<&'static str> {
    let m = [
        ("gpu_util", s.gpu_util_pct.is_some()),
        ("mem_util", s.mem_util_pct.is_some()),
        ("sm_active", s.sm_active_pct.is_some()),
        ("sm_occupancy", s.sm_occupancy_pct.is_some()),
        ("tensor_active", s.tensor_active_pct.is_some()),
        ("dram_active", s.dram_active_pct.is_some()),
        ("memory", s.mem_used_bytes.is_some()),
        ("power", s.power_w.is_some()),
        ("power_limit", s.power_limit_w.is_some()),
        ("temperature", s.temp_c.is_some()),
        ("sm_clock", s.sm_clock_mhz.is_some()),
        ("mem_clock", s.mem_clock_mhz.is_some()),
        ("max_clocks", s.sm_clock_max_mhz.is_some()),
        ("throttle_reasons", s.throttle_mask.is_some()),
        ("pcie", s.pcie_tx_bytes_per_s.is_some()),
        ("nvlink", s.nvlink_tx_bytes_per_s.is_some()),
        ("ecc", s.ecc_corrected_total.is_some()),
        ("xid", s.xid_errors.is_some()),
        ("pcie_replays", s.pcie_replays_total.is_some()),
    ];
    m.iter()
        .filter(|(_, p)| *p == set)
        .map(|(n, _)| *n)
        .collect()
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "node: {}", self.node)?;
        match &self.nvml {
            NvmlCheck::Disabled => writeln!(f, "nvml: disabled (gpu_sample_interval_ms = 0)")?,
            NvmlCheck::Unavailable { library, reason } => {
                writeln!(f, "nvml: unavailable ({library}): {reason}")?;
                writeln!(f, "gpus: 0 (the agent samples the host only)")?;
            }
            NvmlCheck::Ok {
                library,
                driver,
                gpus,
            } => {
                let driver = driver.as_deref().unwrap_or("unknown");
                writeln!(f, "nvml: ok ({library}, driver {driver})")?;
                writeln!(f, "gpus: {}", gpus.len())?;
                for g in gpus {
                    writeln!(
                        f,
                        "  gpu {}: {} {} {} state={} gpm={}",
                        g.index,
                        g.name,
                        g.uuid,
                        g.pci_bus_id,
                        g.state,
                        if g.gpm { "yes" } else { "no" }
                    )?;
                    writeln!(f, "    metrics: {}", g.metrics.join(" "))?;
                    writeln!(f, "    missing: {}", g.missing.join(" "))?;
                }
                writeln!(
                    f,
                    "  (rates such as GPM, PCIe without GPM and NVLink need two ticks; one was taken)"
                )?;
            }
        }
        match &self.host {
            Ok(h) => {
                let mem = h
                    .mem_total_bytes
                    .map_or("unknown".into(), |b| format!("{} MiB", b / (1024 * 1024)));
                let load = h.load1.map_or("unknown".into(), |l| format!("{l:.2}"));
                writeln!(
                    f,
                    "host: ok (every {} ms): cpus={} memory={mem} load1={load} interfaces={}",
                    self.host_interval_ms,
                    h.cpus,
                    h.interfaces.join(",")
                )?;
            }
            Err(e) => writeln!(f, "host: unavailable: {e}")?,
        }
        Ok(())
    }
}
