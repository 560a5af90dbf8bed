//! `rankscope simulate`: a training-job simulator that streams through the
//! same rank-facing ingest API (`RankIngest.StreamEvents`) a real trainer uses.
//!
//! In: a [`SimConfig`] (ranks, steps, seed, stragglers, model size, pacing)
//! and the agent's URL. Out: one gRPC stream per rank carrying that rank's
//! steps, spans, NCCL collectives and GPU kernels, and a [`SimSummary`] of what
//! the agent accepted, dropped or rejected.
//!
//! Split: [`model`] turns a config into events (pure, deterministic for a
//! seed, generated lazily step by step); [`client`] owns the network side
//! (one tokio task and one connection per rank, acks read in order);
//! [`summary`] formats the result.
//!
//! Invariants: a config that passed [`SimConfig::validate`] never makes the
//! model panic; the events sent for a rank are exactly those of
//! [`model::plan`] for that rank, in the same order.

pub mod client;
pub mod clock;
pub mod model;
pub mod placement;
pub mod summary;

pub use client::{run, run_nodes, SimError};
pub use clock::NodeClockOffset;
pub use model::{plan, plan_iter, EventCounts, JobPlan, PlanIter, RankStep, StepPlan};
pub use placement::Placement;
pub use summary::{SimSummary, SummaryFormat};

use std::str::FromStr;

/// Default number of events per `RankMessage`.
pub const DEFAULT_EVENTS_PER_MESSAGE: usize = 2_000;

/// One slowed-down rank: its GPU compute takes `factor` times as long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Straggler {
    /// Global rank that is slow.
    pub rank: u32,
    /// Compute time multiplier, > 0 (1.3 = 30 % slower).
    pub factor: f64,
}

impl FromStr for Straggler {
    type Err = ConfigError;

    /// Parses `RANK:FACTOR`, e.g. `5:1.3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::StragglerSyntax(s.to_string());
        let (rank, factor) = s.split_once(':').ok_or_else(bad)?;
        let rank = rank.trim().parse::<u32>().map_err(|_| bad())?;
        let factor = factor.trim().parse::<f64>().map_err(|_| bad())?;
        if !factor.is_finite() || factor <= 0.0 {
            return Err(ConfigError::StragglerFactor {
                rank,
                factor: factor.to_string(),
            });
        }
        Ok(Self { rank, factor })
    }
}

/// Everything that defines a simulated job and how it is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Job id every rank reports.
    pub job: String,
    /// Run id every rank reports; empty = unknown.
    pub run_id: String,
    /// Number of ranks (world size), >= 1.
    pub ranks: u32,
    /// Ranks per node; node of rank r is `sim-node-{r / ranks_per_node}`.
    pub ranks_per_node: u32,
    /// Training steps per rank.
    pub steps: u64,
    /// Number of the first step (continue an earlier run of the same job:
    /// give the step after its last and a `start_ns` after its end).
    pub first_step: u64,
    /// Seed of all timing jitter.
    pub seed: u64,
    /// Slow ranks (each rank at most once).
    pub stragglers: Vec<Straggler>,
    /// Begin of step 0 on every rank, ns since the Unix epoch.
    pub start_ns: u64,
    /// Transformer layers (model size knob), >= 1.
    pub layers: u32,
    /// Sigma of the log-normal timing jitter (0.03 = about 3 %), in [0, 1).
    pub jitter: f64,
    /// Throttle for all ranks together, events per second; `None` = as fast
    /// as the agent acknowledges.
    pub rate_events_per_s: Option<f64>,
    /// Send each step only once the wall clock has passed its end (use with
    /// `start_ns` = now so timestamps are real times).
    pub realtime: bool,
    /// Most events per `RankMessage`, >= 1 (under a rate, messages hold
    /// the rank SDK's `MAX_DELAY` of each rank's share, if that is less, and
    /// a step's end goes out with its step).
    pub events_per_message: usize,
    /// Node and GPU of each rank (`--placement`); empty = `sim-node-{r /
    /// ranks_per_node}` and no GPU.
    pub placement: Vec<Placement>,
    /// Nodes whose clock is off (`--node-clock-offset`): their ranks'
    /// timestamps are shifted.
    pub node_clock_offsets: Vec<NodeClockOffset>,
    /// Ranks with time outside their phases every step (`--outside`).
    pub outside: Vec<Outside>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            job: "sim".to_string(),
            run_id: String::new(),
            ranks: 8,
            ranks_per_node: 8,
            steps: 50,
            first_step: 0,
            seed: 1,
            stragglers: Vec::new(),
            start_ns: 1_700_000_000_000_000_000,
            layers: 12,
            jitter: 0.03,
            rate_events_per_s: None,
            realtime: false,
            events_per_message: DEFAULT_EVENTS_PER_MESSAGE,
            placement: Vec::new(),
            node_clock_offsets: Vec::new(),
            outside: Vec::new(),
        }
    }
}

/// A rank that spends time outside its phases every step: `ms` of host
/// work after backward, before the optimizer (gradient clipping, metrics,
/// logging on one rank), which no span covers: an `other` straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outside {
    pub rank: u32,
    /// Milliseconds per step, finite and >= 0.
    pub ms: f64,
}

impl FromStr for Outside {
    type Err = ConfigError;

    /// Parses `RANK:MS`, e.g. `3:20`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::OutsideSyntax(s.to_string());
        let (rank, ms) = s.split_once(':').ok_or_else(bad)?;
        let rank = rank.trim().parse::<u32>().map_err(|_| bad())?;
        let ms = ms.trim().parse::<f64>().map_err(|_| bad())?;
        if !ms.is_finite() || ms < 0.0 {
            return Err(bad());
        }
        Ok(Self { rank, ms })
    }
}

/// A config value that cannot be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("straggler {0:?} is not RANK:FACTOR (e.g. 5:1.3)")]
    StragglerSyntax(String),
    #[error("straggler rank {rank}: factor {factor} must be a finite number > 0")]
    StragglerFactor { rank: u32, factor: String },
    #[error("straggler rank {rank} is out of range: the job has {ranks} ranks (0..{ranks})")]
    StragglerRank { rank: u32, ranks: u32 },
    #[error("straggler rank {rank} is given more than once")]
    StragglerTwice { rank: u32 },
    #[error("outside time {0:?} is not RANK:MS with MS >= 0 (e.g. 3:20)")]
    OutsideSyntax(String),
    #[error("{0}")]
    Placement(String),
    #[error("{0}")]
    ClockOffset(String),
    #[error("{field} = {value} is invalid: {rule}")]
    Invalid {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
}

impl SimConfig {
    /// Checks every field; the model and client assume a validated config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, value: String, rule| ConfigError::Invalid { field, value, rule };
        if self.job.is_empty() {
            return Err(invalid("job", String::new(), "must not be empty"));
        }
        if self.ranks == 0 {
            return Err(invalid("ranks", "0".into(), "must be >= 1"));
        }
        if self.ranks_per_node == 0 {
            return Err(invalid("ranks_per_node", "0".into(), "must be >= 1"));
        }
        if self.layers == 0 || self.layers > 1_000 {
            let rule = "must be in 1..=1000";
            return Err(invalid("layers", self.layers.to_string(), rule));
        }
        if !(0.0..1.0).contains(&self.jitter) {
            let rule = "must be in [0, 1)";
            return Err(invalid("jitter", self.jitter.to_string(), rule));
        }
        if let Some(rate) = self.rate_events_per_s {
            if !rate.is_finite() || rate <= 0.0 {
                let rule = "must be a finite number > 0";
                return Err(invalid("rate", rate.to_string(), rule));
            }
        }
        if self.events_per_message == 0 {
            return Err(invalid("events_per_message", "0".into(), "must be >= 1"));
        }
        if let Err(rule) = placement::check(&self.placement, self.ranks) {
            return Err(ConfigError::Placement(rule));
        }
        clock::check(self)?;
        for o in &self.outside {
            if o.rank >= self.ranks || !o.ms.is_finite() || o.ms < 0.0 {
                let rule = "needs a rank of the job and a finite MS >= 0";
                return Err(invalid("outside", format!("{}:{}", o.rank, o.ms), rule));
            }
        }
        for (i, s) in self.stragglers.iter().enumerate() {
            if s.rank >= self.ranks {
                return Err(ConfigError::StragglerRank {
                    rank: s.rank,
                    ranks: self.ranks,
                });
            }
            if !s.factor.is_finite() || s.factor <= 0.0 {
                return Err(ConfigError::StragglerFactor {
                    rank: s.rank,
                    factor: s.factor.to_string(),
                });
            }
            if self.stragglers[..i].iter().any(|o| o.rank == s.rank) {
                return Err(ConfigError::StragglerTwice { rank: s.rank });
            }
        }
        Ok(())
    }

    /// Compute slowdown of `rank` (1.0 unless it is a straggler).
    pub fn slowdown(&self, rank: u32) -> f64 {
        self.stragglers
            .iter()
            .find(|s| s.rank == rank)
            .map_or(1.0, |s| s.factor)
    }

    /// Time `rank` spends outside its phases per step, ns (summed when
    /// given more than once).
    pub fn outside_ns(&self, rank: u32) -> u64 {
        let ms: f64 = self
            .outside
            .iter()
            .filter(|o| o.rank == rank)
            .map(|o| o.ms)
            .sum();
        (ms * 1e6).round() as u64
    }

    /// Number of nodes the ranks span.
    pub fn nodes(&self) -> u32 {
        if self.placement.is_empty() {
            return self.ranks.div_ceil(self.ranks_per_node.max(1));
        }
        let nodes: std::collections::BTreeSet<&str> =
            self.placement.iter().map(|p| p.node.as_str()).collect();
        nodes.len() as u32
    }

    /// The placement entry of `rank`, when `--placement` gave one.
    pub fn placed(&self, rank: u32) -> Option<&Placement> {
        self.placement.iter().find(|p| p.rank == rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn straggler_parses_rank_and_factor() {
        let s: Straggler = "5:1.3".parse().unwrap();
        assert_eq!(
            s,
            Straggler {
                rank: 5,
                factor: 1.3
            }
        );
    }

    #[test]
    fn straggler_syntax_errors_are_named() {
        for bad in ["5", "x:1.3", "5:y", ":", "5:1.3:2"] {
            let err = bad.parse::<Straggler>().unwrap_err();
            assert!(
                matches!(err, ConfigError::StragglerSyntax(_)),
                "{bad}: {err}"
            );
        }
        for bad in ["5:0", "5:-1", "5:inf", "5:NaN"] {
            let err = bad.parse::<Straggler>().unwrap_err();
            assert!(
                matches!(err, ConfigError::StragglerFactor { rank: 5, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn validate_rejects_out_of_range_and_duplicate_stragglers() {
        let mut cfg = SimConfig {
            stragglers: vec![Straggler {
                rank: 8,
                factor: 1.3,
            }],
            ..SimConfig::default()
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(err, ConfigError::StragglerRank { rank: 8, ranks: 8 });
        assert!(err.to_string().contains("out of range"), "{err}");
        cfg.stragglers = vec![
            Straggler {
                rank: 1,
                factor: 1.3,
            },
            Straggler {
                rank: 1,
                factor: 2.0,
            },
        ];
        assert_eq!(
            cfg.validate().unwrap_err(),
            ConfigError::StragglerTwice { rank: 1 }
        );
        cfg.stragglers = vec![Straggler {
            rank: 7,
            factor: 1.3,
        }];
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.slowdown(7), 1.3);
        assert_eq!(cfg.slowdown(0), 1.0);
    }

    #[test]
    fn validate_rejects_degenerate_sizes() {
        let cases: [(&str, SimConfig); 6] = [
            (
                "ranks",
                SimConfig {
                    ranks: 0,
                    ..SimConfig::default()
                },
            ),
            (
                "ranks_per_node",
                SimConfig {
                    ranks_per_node: 0,
                    ..SimConfig::default()
                },
            ),
            (
                "layers",
                SimConfig {
                    layers: 0,
                    ..SimConfig::default()
                },
            ),
            (
                "jitter",
                SimConfig {
                    jitter: 1.5,
                    ..SimConfig::default()
                },
            ),
            (
                "rate",
                SimConfig {
                    rate_events_per_s: Some(0.0),
                    ..SimConfig::default()
                },
            ),
            (
                "job",
                SimConfig {
                    job: String::new(),
                    ..SimConfig::default()
                },
            ),
        ];
        for (field, cfg) in cases {
            match cfg.validate() {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn nodes_round_up() {
        let cfg = SimConfig {
            ranks: 17,
            ranks_per_node: 8,
            ..SimConfig::default()
        };
        assert_eq!(cfg.nodes(), 3);
    }
}
