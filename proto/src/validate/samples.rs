//! Validation of the telemetry samples of an `AgentBatch` (GPU and host).
//!
//! In: the batch's `gpu_samples` and `host_samples`. Out: `Ok` or a
//! [`SampleError`] naming the sample, field and value, with a short
//! `reason()` label for rejection counters.
//!
//! Rules: every sample has a time (`ts_ns != 0`); a GPU sample's `state` is
//! a known value other than UNSPECIFIED; every float is finite and not
//! negative, percentages of a device are at most 100 (process CPU may exceed
//! 100: it is per core); mapped ranks, processes and interfaces carry their
//! required names. Unset optional metrics are always valid ("missing").

use crate::v1 as proto;

/// Largest percentage a device metric may report (utilisation, activity).
const MAX_PCT: f32 = 100.0;

/// Why a batch's samples were rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("{kind}[{index}]: ts_ns is 0")]
    MissingTime { kind: &'static str, index: usize },
    #[error("gpu_samples[{index}]: state is missing, UNSPECIFIED or unknown ({state})")]
    BadState { index: usize, state: i32 },
    #[error("{kind}[{index}]: {field} = {value} is not a finite value in [0, {max}]")]
    OutOfRange {
        kind: &'static str,
        index: usize,
        field: &'static str,
        value: f32,
        max: f32,
    },
    #[error("{kind}[{index}]: {field} is empty")]
    EmptyName {
        kind: &'static str,
        index: usize,
        field: &'static str,
    },
}

impl SampleError {
    /// Short label for rejection counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingTime { .. } => "sample_missing_time",
            Self::BadState { .. } => "sample_bad_state",
            Self::OutOfRange { .. } => "sample_out_of_range",
            Self::EmptyName { .. } => "sample_empty_name",
        }
    }
}

fn check(
    kind: &'static str,
    index: usize,
    field: &'static str,
    value: Option<f32>,
    max: f32,
) -> Result<(), SampleError> {
    match value {
        Some(v) if !(v.is_finite() && (0.0..=max).contains(&v)) => Err(SampleError::OutOfRange {
            kind,
            index,
            field,
            value: v,
            max,
        }),
        _ => Ok(()),
    }
}

/// Checks the telemetry samples of one batch (all or nothing).
pub fn validate_samples(
    gpu: &[proto::GpuSample],
    host: &[proto::HostSample],
) -> Result<(), SampleError> {
    const GPU: &str = "gpu_samples";
    const HOST: &str = "host_samples";
    for (index, s) in gpu.iter().enumerate() {
        if s.ts_ns == 0 {
            return Err(SampleError::MissingTime { kind: GPU, index });
        }
        match proto::GpuState::try_from(s.state) {
            Ok(proto::GpuState::Unspecified) | Err(_) => {
                return Err(SampleError::BadState {
                    index,
                    state: s.state,
                })
            }
            Ok(_) => {}
        }
        let pcts = [
            ("gpu_util_pct", s.gpu_util_pct),
            ("mem_util_pct", s.mem_util_pct),
            ("sm_active_pct", s.sm_active_pct),
            ("sm_occupancy_pct", s.sm_occupancy_pct),
            ("tensor_active_pct", s.tensor_active_pct),
            ("dram_active_pct", s.dram_active_pct),
        ];
        for (field, v) in pcts {
            check(GPU, index, field, v, MAX_PCT)?;
        }
        for (field, v) in [
            ("power_w", s.power_w),
            ("power_limit_w", s.power_limit_w),
            ("temp_c", s.temp_c),
        ] {
            check(GPU, index, field, v, f32::MAX)?;
        }
        if s.ranks.iter().any(|r| r.job_id.is_empty()) {
            return Err(SampleError::EmptyName {
                kind: GPU,
                index,
                field: "ranks.job_id",
            });
        }
    }
    for (index, s) in host.iter().enumerate() {
        if s.ts_ns == 0 {
            return Err(SampleError::MissingTime { kind: HOST, index });
        }
        check(HOST, index, "cpu_util_pct", s.cpu_util_pct, MAX_PCT)?;
        for v in &s.cpu_core_util_pct {
            check(HOST, index, "cpu_core_util_pct", Some(*v), MAX_PCT)?;
        }
        for (field, v) in [("load1", s.load1), ("load5", s.load5), ("load15", s.load15)] {
            check(HOST, index, field, v, f32::MAX)?;
        }
        if s.net.iter().any(|n| n.name.is_empty()) {
            return Err(SampleError::EmptyName {
                kind: HOST,
                index,
                field: "net.name",
            });
        }
        for p in &s.processes {
            if p.job_id.is_empty() {
                return Err(SampleError::EmptyName {
                    kind: HOST,
                    index,
                    field: "processes.job_id",
                });
            }
            check(HOST, index, "processes.cpu_pct", p.cpu_pct, f32::MAX)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> proto::GpuSample {
        proto::GpuSample {
            ts_ns: 5,
            state: proto::GpuState::Ok as i32,
            gpu_util_pct: Some(100.0),
            ..Default::default()
        }
    }

    #[test]
    fn valid_samples_pass_and_missing_metrics_are_fine() {
        let host = proto::HostSample {
            ts_ns: 1,
            cpu_util_pct: Some(3.5),
            processes: vec![proto::ProcessSample {
                job_id: "j".into(),
                cpu_pct: Some(350.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(validate_samples(&[gpu()], &[host]), Ok(()));
        let bare = proto::GpuSample {
            ts_ns: 1,
            state: proto::GpuState::Lost as i32,
            ..Default::default()
        };
        assert_eq!(validate_samples(&[bare], &[]), Ok(()));
    }

    #[test]
    fn bad_samples_are_named() {
        let mut g = gpu();
        g.state = 0;
        let e = validate_samples(&[gpu(), g], &[]).unwrap_err();
        assert_eq!(e.reason(), "sample_bad_state");
        assert!(e.to_string().starts_with("gpu_samples[1]"), "{e}");

        let mut g = gpu();
        g.sm_active_pct = Some(f32::NAN);
        let e = validate_samples(&[g], &[]).unwrap_err();
        assert!(e.to_string().contains("sm_active_pct"), "{e}");

        let mut g = gpu();
        g.mem_util_pct = Some(100.5);
        assert_eq!(
            validate_samples(&[g], &[]).unwrap_err().reason(),
            "sample_out_of_range"
        );

        let mut g = gpu();
        g.ranks.push(proto::RankRef::default());
        assert_eq!(
            validate_samples(&[g], &[]).unwrap_err().reason(),
            "sample_empty_name"
        );

        let host = proto::HostSample::default();
        let e = validate_samples(&[], &[host]).unwrap_err();
        assert_eq!(e.to_string(), "host_samples[0]: ts_ns is 0");
    }
}
