//! Hardware evidence for straggler verdicts: recent GPU samples per GPU and
//! the comparison of a straggler's GPUs with its peers'.
//!
//! In: [`GpuObs`] (GPU samples the agents mapped to ranks) as batches are
//! stored; finalized step time spans; a verdict (job, rank, steps). Out: an
//! [`Evidence`] when the straggler's GPUs ran at a lower SM clock than the
//! median of the job's other GPUs (by more than [`CLOCK_MARGIN`]) or show
//! throttle reasons most of them do not, during the verdict's recent steps.
//! Pure: no I/O, no clock.
//!
//! Memory bound: at most `per_gpu` samples for each of at most `max_gpus`
//! GPUs (samples of further GPUs are counted and ignored); GPUs silent for
//! longer than the caller's horizon are pruned. Only samples mapped to a
//! rank are kept.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use rankscope_analysis::{StragglerCause, Verdict};

use crate::store::rows::EvidenceRow;

/// How much lower than its peers' median a GPU's SM clock must be to count.
pub const CLOCK_MARGIN: f64 = 0.05;

/// Steps of a verdict the evidence looks at (its most recent ones).
pub const EVIDENCE_STEPS: u64 = 16;

/// Throttle reasons that do not slow a busy GPU down.
const BENIGN: [&str; 4] = [
    "gpu_idle",
    "applications_clocks_setting",
    "sync_boost",
    "display_clock_setting",
];

/// One GPU sample as the stream keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuObs {
    pub node: String,
    pub gpu_index: u32,
    pub uuid: String,
    pub ts_ns: u64,
    pub period_ns: u64,
    /// (job, rank) mapped to the GPU.
    pub ranks: Vec<(String, u32)>,
    pub sm_clock_mhz: Option<u32>,
    pub throttle_reasons: Vec<String>,
    pub temp_c: Option<f32>,
    pub power_w: Option<f32>,
    /// NVML GPU utilization over the sample period.
    pub gpu_util_pct: Option<f32>,
}

/// What the straggler's GPUs showed, compared with its peers'.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub text: String,
    pub gpu_indexes: Vec<u32>,
    pub gpu_uuids: Vec<String>,
    pub sm_clock_mhz: Option<f64>,
    pub peer_sm_clock_mhz: Option<f64>,
    /// Slowing throttle reasons seen on the straggler's GPUs and on fewer
    /// than half of the peer GPUs.
    pub throttle_reasons: Vec<String>,
    pub temp_c: Option<f64>,
    pub peer_temp_c: Option<f64>,
    pub power_w: Option<f64>,
    pub peer_power_w: Option<f64>,
    pub samples: u32,
    pub peer_gpus: u32,
}

type GpuKey = (String, u32);

/// Recent samples per GPU; see the module docs.
#[derive(Debug)]
pub struct GpuHistory {
    gpus: HashMap<GpuKey, VecDeque<GpuObs>>,
    per_gpu: usize,
    max_gpus: usize,
    /// Samples ignored because `max_gpus` GPUs were tracked.
    pub dropped: u64,
}

impl GpuHistory {
    /// Keeps `per_gpu` samples of at most `max_gpus` GPUs.
    pub fn new(per_gpu: usize, max_gpus: usize) -> Self {
        Self {
            gpus: HashMap::new(),
            per_gpu: per_gpu.max(1),
            max_gpus,
            dropped: 0,
        }
    }

    /// Adds a sample (ignored when it maps to no rank).
    pub fn push(&mut self, o: GpuObs) {
        if o.ranks.is_empty() {
            return;
        }
        let key = (o.node.clone(), o.gpu_index);
        if !self.gpus.contains_key(&key) && self.gpus.len() >= self.max_gpus {
            self.dropped += 1;
            return;
        }
        let q = self.gpus.entry(key).or_default();
        if q.len() >= self.per_gpu {
            q.pop_front();
        }
        q.push_back(o);
    }

    /// Forgets GPUs whose newest sample is older than `horizon_ns`.
    pub fn prune(&mut self, horizon_ns: u64) {
        self.gpus
            .retain(|_, q| q.back().is_some_and(|o| o.ts_ns >= horizon_ns));
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.gpus.values().map(VecDeque::len).sum()
    }

    /// No samples held.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// Mean GPU utilization of the GPUs mapped to (job, rank) over
    /// `[start_ns, end_ns)`, from the samples whose period overlaps it
    /// (`low_gpu_utilization` alert input); `None` without such samples.
    pub fn mean_util(&self, job: &str, rank: u32, start_ns: u64, end_ns: u64) -> Option<f64> {
        mean(
            self.gpus
                .values()
                .flat_map(|q| q.iter())
                .filter(|o| overlaps(o, start_ns, end_ns))
                .filter(|o| o.ranks.iter().any(|(j, r)| j == job && *r == rank))
                .filter_map(|o| o.gpu_util_pct.map(f64::from)),
        )
    }

    /// Evidence for (job, rank) over `[start_ns, end_ns)`, if any.
    pub fn evidence(&self, job: &str, rank: u32, start_ns: u64, end_ns: u64) -> Option<Evidence> {
        let mut mine: BTreeMap<&GpuKey, Vec<&GpuObs>> = BTreeMap::new();
        let mut peers: BTreeMap<&GpuKey, Vec<&GpuObs>> = BTreeMap::new();
        for (key, q) in &self.gpus {
            for o in q.iter().filter(|o| overlaps(o, start_ns, end_ns)) {
                let of_job =
                    |f: &dyn Fn(u32) -> bool| o.ranks.iter().any(|(j, r)| j == job && f(*r));
                if of_job(&|r| r == rank) {
                    mine.entry(key).or_default().push(o);
                } else if of_job(&|r| r != rank) {
                    peers.entry(key).or_default().push(o);
                }
            }
        }
        let samples: Vec<&GpuObs> = mine.values().flatten().copied().collect();
        if samples.is_empty() {
            return None;
        }
        let mean_of =
            |v: &[&GpuObs], f: fn(&GpuObs) -> Option<f64>| mean(v.iter().filter_map(|o| f(o)));
        let peer_median = |f: fn(&GpuObs) -> Option<f64>| {
            median(peers.values().filter_map(|v| mean_of(v, f)).collect())
        };
        let clock = |o: &GpuObs| o.sm_clock_mhz.map(f64::from);
        let temp = |o: &GpuObs| o.temp_c.map(f64::from);
        let power = |o: &GpuObs| o.power_w.map(f64::from);
        let slowing = |o: &GpuObs| -> HashSet<String> {
            o.throttle_reasons
                .iter()
                .filter(|r| !BENIGN.contains(&r.as_str()))
                .cloned()
                .collect()
        };
        let my_reasons: BTreeSet<String> = samples.iter().flat_map(|o| slowing(o)).collect();
        let peer_reason_gpus = |r: &String| {
            peers
                .values()
                .filter(|v| v.iter().any(|o| slowing(o).contains(r)))
                .count()
        };
        let throttle_reasons: Vec<String> = my_reasons
            .into_iter()
            .filter(|r| 2 * peer_reason_gpus(r) < peers.len().max(1))
            .collect();
        let sm_clock_mhz = mean_of(&samples, clock);
        let peer_sm_clock_mhz = peer_median(clock);
        let clock_low = matches!((sm_clock_mhz, peer_sm_clock_mhz),
            (Some(m), Some(p)) if m < p * (1.0 - CLOCK_MARGIN));
        if !clock_low && throttle_reasons.is_empty() {
            return None;
        }
        let mut e = Evidence {
            text: String::new(),
            gpu_indexes: mine.keys().map(|k| k.1).collect(),
            gpu_uuids: mine
                .values()
                .filter_map(|v| v.first().map(|o| o.uuid.clone()))
                .collect(),
            sm_clock_mhz,
            peer_sm_clock_mhz,
            throttle_reasons,
            temp_c: mean_of(&samples, temp),
            peer_temp_c: peer_median(temp),
            power_w: mean_of(&samples, power),
            peer_power_w: peer_median(power),
            samples: u32::try_from(samples.len()).unwrap_or(u32::MAX),
            peer_gpus: u32::try_from(peers.len()).unwrap_or(u32::MAX),
        };
        let node = mine.keys().next().map_or("", |k| k.0.as_str());
        e.text = describe(&e, node);
        Some(e)
    }
}

fn overlaps(o: &GpuObs, start: u64, end: u64) -> bool {
    o.ts_ns > start && o.ts_ns.saturating_sub(o.period_ns) < end.max(start + 1)
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = v.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// "GPU 5 (GPU-..) on node-a: SM clock 1200 MHz vs 1980 MHz median of 7
/// peer GPUs (-39.4%); throttle reasons: hw_thermal_slowdown; 88 C vs 62 C;
/// 280 W vs 350 W".
fn describe(e: &Evidence, node: &str) -> String {
    let idx: Vec<String> = e.gpu_indexes.iter().map(u32::to_string).collect();
    let noun = if idx.len() == 1 { "GPU" } else { "GPUs" };
    let mut parts = vec![format!(
        "{noun} {} ({}) on {node}",
        idx.join(","),
        e.gpu_uuids.join(",")
    )];
    let vs = |what: &str, unit: &str, mine: Option<f64>, peer: Option<f64>| match (mine, peer) {
        (Some(m), Some(p)) if p > 0.0 => Some(format!(
            "{what}{m:.0}{unit} vs {p:.0}{unit}{}",
            if what.is_empty() {
                String::new()
            } else {
                format!(
                    " median of {} peer GPUs ({:+.1}%)",
                    e.peer_gpus,
                    100.0 * (m - p) / p
                )
            }
        )),
        (Some(m), _) => Some(format!("{what}{m:.0}{unit}")),
        _ => None,
    };
    parts.extend(vs("SM clock ", " MHz", e.sm_clock_mhz, e.peer_sm_clock_mhz));
    if !e.throttle_reasons.is_empty() {
        parts.push(format!(
            "throttle reasons: {}",
            e.throttle_reasons.join(", ")
        ));
    }
    parts.extend(vs("", " C", e.temp_c, e.peer_temp_c));
    parts.extend(vs("", " W", e.power_w, e.peer_power_w));
    let mut text = parts.remove(0);
    if !parts.is_empty() {
        text.push_str(": ");
        text.push_str(&parts.join("; "));
    }
    text
}

/// Time spans of a job's recently finalized steps (over all ranks).
#[derive(Debug, Default)]
pub struct StepSpans {
    spans: BTreeMap<u64, (u64, u64)>,
}

impl StepSpans {
    /// Most steps remembered.
    const CAP: usize = 256;

    /// Extends step `step`'s span with `[start_ns, end_ns)`.
    pub fn record(&mut self, step: u64, start_ns: u64, end_ns: u64) {
        let s = self.spans.entry(step).or_insert((start_ns, end_ns));
        s.0 = s.0.min(start_ns);
        s.1 = s.1.max(end_ns);
        while self.spans.len() > Self::CAP {
            self.spans.pop_first();
        }
    }

    /// The span of the known steps among the last [`EVIDENCE_STEPS`] of
    /// `first..=last`.
    pub fn window(&self, first: u64, last: u64) -> Option<(u64, u64)> {
        let from = first.max(last.saturating_sub(EVIDENCE_STEPS - 1));
        let mut it = self.spans.range(from..=last).map(|(_, s)| *s);
        let first = it.next()?;
        Some(it.fold(first, |(a, b), (c, d)| (a.min(c), b.max(d))))
    }
}

/// The evidence row of an active `compute` verdict `v` of `job`, when its
/// GPUs show any (over the verdict's recent steps in `spans`).
pub fn verdict_evidence(
    job: &str,
    v: &Verdict,
    spans: &StepSpans,
    gpus: &GpuHistory,
    first_seen_ns: u64,
    now_ns: u64,
) -> Option<EvidenceRow> {
    if !v.active || v.cause != StragglerCause::Compute {
        return None;
    }
    let (start, end) = spans.window(v.first_step, v.last_step)?;
    let e = gpus.evidence(job, v.rank, start, end)?;
    Some(EvidenceRow {
        job_id: job.to_owned(),
        rank: v.rank,
        first_step: v.first_step,
        node: v.node.clone(),
        evidence: e.text,
        gpu_indexes: e.gpu_indexes,
        gpu_uuids: e.gpu_uuids,
        sm_clock_mhz: e.sm_clock_mhz,
        peer_sm_clock_mhz: e.peer_sm_clock_mhz,
        throttle_reasons: e.throttle_reasons,
        temp_c: e.temp_c,
        peer_temp_c: e.peer_temp_c,
        power_w: e.power_w,
        peer_power_w: e.peer_power_w,
        samples: e.samples,
        peer_gpus: e.peer_gpus,
        first_seen_ns,
        updated_ns: now_ns,
    })
}

#[cfg(test)]
#[path = "evidence_tests.rs"]
mod tests;
