//! Fleet memory: which nodes, GPUs and links keep slowing jobs down, across
//! every job this collector's ClickHouse holds.
//!
//! In: a [`FleetQuery`] (window `since`, grouping `by`, `min_jobs`) and the
//! window's [`FleetFacts`] (rank placements, verdicts, their evidence, hang
//! suspects; from the rollup of migration 0014, each unit's exposure counted
//! in SQL and only the flagged placements). Out: [`FleetRow`]s, one
//! per unit, ranked worst first by the recurrence score of
//! [`rankscope_analysis::fleet`]; units seen in fewer than `min_jobs` jobs
//! come last, marked `low_exposure`, unranked.
//!
//! A verdict counts against the units of its (job, rank) placement: the
//! rank's node, its GPU (NVML samples of the agent, else the rank's
//! `gpu_uuid` label, else the verdict evidence's GPUs), its link (the
//! rank's `link` label). What-if cost of a verdict, GPU-hours: `(updated −
//! first seen) × (1 − 1/slowdown) × world size` — while the verdict is
//! active the job runs at the straggler's pace, so the fraction `1 −
//! 1/slowdown` of its wall time is lost, on every GPU of the job (world size:
//! the job's highest rank seen + 1). An estimate from the verdict row alone,
//! in collector wall time: a replayed or imported job (whose steps arrive
//! faster than they ran) shows less; the per-job route's
//! `expected_gain_pct` is the exact figure from the breakdowns.
//!
//! [`counters`] adds the GPUs' error counters (Xid, ECC, PCIe replays) to
//! the rows' hardware evidence. [`watch`] evaluates the `repeat_offender`
//! alert rule on a tick; [`cache`] keeps the route's answers for one such
//! tick.

pub mod cache;
pub mod counters;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use rankscope_analysis::fleet::FleetPolicy;
use rankscope_analysis::fleet::{rank_fleet, Exposure};
use serde::{Deserialize, Serialize};

use crate::store::fleet::FleetFacts;

/// What a fleet row is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Node,
    Gpu,
    Link,
}

impl std::str::FromStr for By {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "node" => Ok(By::Node),
            "gpu" => Ok(By::Gpu),
            "link" => Ok(By::Link),
            _ => Err(format!("by = {s:?} is unknown: use node, gpu or link")),
        }
    }
}

/// Parses `since` (`7d`, `12h`, `30m`, `90s`, `2w`, or an absolute time in
/// ns since the Unix epoch: 19 or more digits, so a bare `7` is an error,
/// not 7 ns) into the window's start, ns. Errors name the value.
pub fn parse_since(since: &str, now_ns: u64) -> Result<u64, String> {
    let s = since.trim();
    let bad = || {
        format!("since = {since:?} is malformed: use a duration like 7d, 12h, 30m, 90s, 2w or ns since the Unix epoch (19 digits)")
    };
    if s.starts_with('-') {
        return Err(format!(
            "since = {since:?} is in the future: give a duration back from now (7d) or a past time"
        ));
    }
    if s.len() >= 19 && s.bytes().all(|b| b.is_ascii_digit()) {
        let at: u64 = s.parse().map_err(|_| bad())?;
        if at > now_ns {
            return Err(format!(
                "since = {since:?} is in the future (now is {now_ns} ns)"
            ));
        }
        return Ok(at);
    }
    let unit_at = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(unit_at);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let unit_s: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!(
            "since = {since:?} is an empty window: give a duration > 0"
        ));
    }
    let back = n
        .checked_mul(unit_s)
        .and_then(|s| s.checked_mul(1_000_000_000))
        .ok_or_else(bad)?;
    Ok(now_ns.saturating_sub(back))
}

/// A verdict as shown on a unit's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetVerdictRef {
    pub job: String,
    pub rank: u32,
    pub first_step: u64,
    pub last_step: u64,
    pub steps_flagged: u64,
    pub slowdown: f64,
    pub cause: String,
    pub first_seen_ns: u64,
}

/// Hardware evidence seen on a unit's verdicts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Hardware {
    /// Distinct evidence sentences (capped at [`MAX_LIST`]).
    pub evidence: Vec<String>,
    /// Distinct throttle reasons.
    pub throttle_reasons: Vec<String>,
    /// Verdicts whose GPUs ran at a lower SM clock than the job's others.
    pub clock_below_peers: u64,
    /// The unit's GPUs' errors in the window ([`counters`]; 0 by link, and
    /// where the agent cannot read them). Critical Xid events.
    pub xid_errors: u64,
    /// ECC errors, corrected and uncorrected (increase of the volatile totals).
    pub ecc_corrected_errors: u64,
    pub ecc_uncorrected_errors: u64,
    /// PCIe replays (increase of the replay counters).
    pub pcie_replays: u64,
}

/// One node, GPU or link over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetRow {
    /// 1-based place, worst first; `None` when `low_exposure`.
    pub place: Option<usize>,
    pub node: String,
    /// With `by = gpu`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
    /// With `by = link`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    pub jobs: u64,
    /// Rank placements (distinct (job, rank)) on the unit.
    pub placements: u64,
    pub rank_hours: f64,
    /// Straggler verdicts.
    pub verdicts: u64,
    /// Placements with at least one verdict (the score's `k`).
    pub flagged_placements: u64,
    /// Steps flagged, summed over the verdicts.
    pub verdict_steps: u64,
    pub hang_suspects: u64,
    pub cost_gpu_hours: f64,
    pub score: f64,
    pub low_exposure: bool,
    pub hardware: Hardware,
    /// Jobs with a verdict on the unit (capped at [`MAX_LIST`]).
    pub verdict_jobs: Vec<String>,
    /// The unit's verdicts, oldest first (capped at [`MAX_LIST`], newest kept).
    pub timeline: Vec<FleetVerdictRef>,
}

/// Most entries of a row's lists.
pub const MAX_LIST: usize = 50;

#[derive(Default)]
struct Unit<'a> {
    jobs: BTreeSet<&'a str>,
    placements: u64,
    rank_ns: u64,
    flagged: BTreeSet<Placed<'a>>,
    hangs: u64,
    cost_gpu_ns: f64,
    hardware: Hardware,
    verdict_jobs: BTreeSet<&'a str>,
    timeline: Vec<FleetVerdictRef>,
    verdict_steps: u64,
    /// Jobs counted in SQL (the rollup path), beside `jobs`.
    counted_jobs: u64,
}

/// (node, GPU, link), borrowed from the facts: no string is copied per
/// placement.
type Key<'a> = (&'a str, Option<&'a str>, Option<&'a str>);
/// (job, rank).
type Placed<'a> = (&'a str, u32);

/// The fleet rows of `facts`, grouped `by`, ranked (see the module docs).
pub fn assemble(facts: &FleetFacts, by: By, policy: FleetPolicy) -> Vec<FleetRow> {
    // (job, rank) -> the units it ran on.
    let mut units_of: HashMap<Placed, Vec<Key>> = HashMap::with_capacity(facts.placements.len());
    let mut sampled: HashMap<Placed, Vec<(&str, u64)>> = HashMap::new();
    for g in &facts.rank_gpus {
        let v = sampled.entry((g.job_id.as_str(), g.rank)).or_default();
        v.push((g.uuid.as_str(), g.sampled_ns));
    }
    let mut units: BTreeMap<Key, Unit> = BTreeMap::new();
    // The rollup path: each unit's exposure was counted in SQL; `placements`
    // only maps the verdicts' and hang suspects' placements to their units.
    let counted = facts.exposure.is_some();
    for e in facts.exposure.iter().flatten() {
        let unit = Some(e.unit.as_str()).filter(|u| !u.is_empty());
        let key: Key = match by {
            By::Node => (e.node.as_str(), None, None),
            By::Gpu => (e.node.as_str(), unit, None),
            By::Link => (e.node.as_str(), None, unit),
        };
        let u = units.entry(key).or_default();
        u.counted_jobs += e.jobs;
        u.placements += e.placements;
        u.rank_ns += e.rank_ns;
    }
    for p in &facts.placements {
        let id = (p.job_id.as_str(), p.rank);
        let span = p.last_ns.saturating_sub(p.first_ns);
        let keyed: Vec<(Key, u64)> = match by {
            By::Node => vec![((p.node.as_str(), None, None), span)],
            By::Gpu => match sampled.get(&id) {
                Some(g) => g
                    .iter()
                    .map(|(u, ns)| ((p.node.as_str(), Some(*u), None), *ns))
                    .collect(),
                None if !p.gpu_label.is_empty() => {
                    vec![((p.node.as_str(), Some(p.gpu_label.as_str()), None), span)]
                }
                None => Vec::new(),
            },
            By::Link if !p.link_label.is_empty() => {
                vec![((p.node.as_str(), None, Some(p.link_label.as_str())), span)]
            }
            By::Link => Vec::new(),
        };
        for (key, ns) in keyed {
            if !counted {
                let u = units.entry(key).or_default();
                u.jobs.insert(p.job_id.as_str());
                u.placements += 1;
                u.rank_ns += ns;
            }
            units_of.entry(id).or_default().push(key);
        }
    }
    let evidence: BTreeMap<(&str, u32, u64), _> = facts
        .evidence
        .iter()
        .map(|e| ((e.job_id.as_str(), e.rank, e.first_step), e))
        .collect();
    let mut world: BTreeMap<&str, u32> = BTreeMap::new();
    for p in &facts.placements {
        let w = world.entry(p.job_id.as_str()).or_default();
        *w = (*w).max(p.rank + 1);
    }
    for j in &facts.worlds {
        let w = world.entry(j.job_id.as_str()).or_default();
        *w = (*w).max(j.world);
    }
    for v in &facts.verdicts {
        let id = (v.job_id.as_str(), v.rank);
        let ev = evidence.get(&(v.job_id.as_str(), v.rank, v.first_step));
        let keys = units_of.entry(id).or_insert_with(|| {
            // Its rank row is older than the window: place it from the verdict.
            let keys: Vec<Key> = match by {
                By::Node => vec![(v.node.as_str(), None, None)],
                By::Gpu => ev
                    .map(|e| e.gpu_uuids.iter())
                    .into_iter()
                    .flatten()
                    .map(|g| (v.node.as_str(), Some(g.as_str()), None))
                    .collect(),
                By::Link => Vec::new(),
            };
            for key in &keys {
                let u = units.entry(*key).or_default();
                u.jobs.insert(v.job_id.as_str());
                u.placements += 1;
            }
            keys
        });
        let gpus = world.get(v.job_id.as_str()).copied().unwrap_or(v.rank + 1);
        let lost = if v.slowdown > 1.0 {
            1.0 - 1.0 / v.slowdown
        } else {
            0.0
        };
        let active_ns = v.updated_ns.saturating_sub(v.first_seen_ns);
        let cost = active_ns as f64 * lost * f64::from(gpus);
        for key in keys.iter() {
            let Some(u) = units.get_mut(key) else {
                continue;
            };
            u.flagged.insert(id);
            u.verdict_steps += v.steps_flagged;
            u.cost_gpu_ns += cost;
            u.verdict_jobs.insert(v.job_id.as_str());
            u.timeline.push(FleetVerdictRef {
                job: v.job_id.clone(),
                rank: v.rank,
                first_step: v.first_step,
                last_step: v.last_step,
                steps_flagged: v.steps_flagged,
                slowdown: v.slowdown,
                cause: v.cause.clone(),
                first_seen_ns: v.first_seen_ns,
            });
            if let Some(e) = ev {
                let hw = &mut u.hardware;
                if !e.evidence.is_empty() && !hw.evidence.contains(&e.evidence) {
                    hw.evidence.push(e.evidence.clone());
                }
                for r in &e.throttle_reasons {
                    if !hw.throttle_reasons.contains(r) {
                        hw.throttle_reasons.push(r.clone());
                    }
                }
                if e.sm_clock_mhz > 0.0 && e.sm_clock_mhz < e.peer_sm_clock_mhz {
                    hw.clock_below_peers += 1;
                }
            }
        }
    }
    for h in &facts.hangs {
        for key in units_of
            .get(&(h.job_id.as_str(), h.rank))
            .into_iter()
            .flatten()
        {
            if let Some(u) = units.get_mut(key) {
                u.hangs += h.suspects;
            }
        }
    }
    let (keys, units): (Vec<Key>, Vec<Unit>) = units.into_iter().unzip();
    let exposure: Vec<Exposure> = units
        .iter()
        .map(|u| Exposure {
            placements: u.placements,
            flagged: u.flagged.len() as u64,
            jobs: u.jobs.len() as u64 + u.counted_jobs,
        })
        .collect();
    let mut slots: Vec<Option<(Key, Unit)>> = keys.into_iter().zip(units).map(Some).collect();
    rank_fleet(&exposure, policy)
        .into_iter()
        .filter_map(|s| {
            let (key, mut u) = slots[s.index].take()?;
            u.timeline
                .sort_by_key(|t| (t.first_seen_ns, t.job.clone(), t.rank));
            let skip = u.timeline.len().saturating_sub(MAX_LIST);
            u.timeline.drain(..skip);
            u.hardware.evidence.truncate(MAX_LIST);
            Some(FleetRow {
                place: s.rank,
                node: key.0.to_owned(),
                gpu_uuid: key.1.map(str::to_owned),
                link: key.2.map(str::to_owned),
                jobs: u.jobs.len() as u64 + u.counted_jobs,
                placements: u.placements,
                rank_hours: u.rank_ns as f64 / 3.6e12,
                verdicts: u.timeline.len() as u64 + skip as u64,
                flagged_placements: u.flagged.len() as u64,
                verdict_steps: u.verdict_steps,
                hang_suspects: u.hangs,
                cost_gpu_hours: u.cost_gpu_ns / 3.6e12,
                score: s.score,
                low_exposure: s.low_exposure,
                hardware: u.hardware,
                verdict_jobs: u
                    .verdict_jobs
                    .into_iter()
                    .take(MAX_LIST)
                    .map(str::to_owned)
                    .collect(),
                timeline: u.timeline,
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
