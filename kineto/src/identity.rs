//! The rank identity of an imported file.
//!
//! In: the options, `distributedInfo` / `deviceProperties` and what the
//! scan saw. Out: a `RankIdentity` (and a note to report, if any), or a
//! [`Problem`] when rank and world size are inconsistent. Overrides win over
//! `distributedInfo`; without `distributedInfo` (what `torch.profiler`
//! writes for a job that is not distributed, and every on-demand daemon
//! trace) the trace is rank 0 of 1 with a note, or `--world-size` alone
//! places it as the file name's rank (rankscope-agent's
//! `<trace>-r<rank>-<pid>` naming, or `rank<N>`), else rank 0, of that
//! world; a named rank other than 0 needs `--world-size`, and so does a
//! `--rank`. Labels: `source`,
//! `trace_file`, `gpu`, `backend`, `nccl_version` and, for HTA's loading
//! rules, `hta_last_step_end_ns` ([`hta_last_step_end`]).

use std::collections::HashMap;
use std::path::Path;

use rankscope_proto::v1 as proto;

use super::format::Format;
use super::raw::TopMeta;
use super::scan::Scan;
use super::{ImportOptions, Problem};

/// The label that carries HTA 0.5.0's ProfilerStep window (see
/// [`hta_last_step_end`]).
pub const HTA_LAST_STEP_END_LABEL: &str = "hta_last_step_end_ns";

/// HTA 0.5.0's ProfilerStep window of a trace
/// (`Trace._filter_irrelevant_gpu_kernels`, `rankscope_analysis::hta_load`):
/// with at least two distinct `ProfilerStep#N` names, the latest end of
/// those annotations, CPU or GPU side (HTA counts both as CPU events), in
/// trace ns; `None` otherwise (HTA then keeps every event). The views drop
/// GPU activities launched after it, or with no launch in the trace.
pub(crate) fn hta_last_step_end(scan: &Scan) -> Option<u64> {
    let marks = || scan.cpu_steps.iter().chain(&scan.gpu_steps);
    let names: std::collections::HashSet<u64> = marks().map(|m| m.step).collect();
    (names.len() >= 2).then(|| marks().map(|m| m.end).max())?
}

/// The note reported for a trace without `distributedInfo` taken as a
/// single-process profile.
pub const SINGLE_PROCESS_NOTE: &str = "no distributedInfo in the trace (a single-process \
     profile): imported as rank 0 of 1; pass --rank and --world-size to place it in a larger job";

/// The labels that carry the PyTorch Profiler TensorBoard plugin's (0.4.3)
/// "all steps" span (see [`plugin_steps_span`]), trace ns + base.
pub const PLUGIN_STEPS_START_LABEL: &str = "tbp_steps_start_ns";
pub const PLUGIN_STEPS_END_LABEL: &str = "tbp_steps_end_ns";
/// How many steps that span holds (1 for the plugin's single step "0").
pub const PLUGIN_STEPS_LABEL: &str = "tbp_steps";

/// The span the plugin's GPU summary divides by (`torch_tb_profiler`
/// 0.4.3 `event_parser.StepParser`, `gpu_metrics_parser`): from the first
/// `ProfilerStep#N` start to the last one's end, counting `user_annotation`,
/// `cpu_op` and `gpu_user_annotation` ones (0.4.3 types both annotation
/// categories alike, so a GPU-side step range is a step too: the MI300
/// set's 3 steps are 6 to the plugin); without them, the span of the `cpu_op` events (the plugin's
/// single step "0" over Python / Operator events). Not reproduced: the
/// plugin's device adjustment of step ends, which 0.4.3 applies only to
/// runtime events of category `runtime`; current traces write
/// `cuda_runtime`, which 0.4.3 does not read, so it never applies there.
/// Also the number of steps.
pub(crate) fn plugin_steps_span(scan: &Scan) -> Option<(u64, u64, usize)> {
    let mut steps: Vec<&crate::scan::StepMark> = scan
        .cpu_steps
        .iter()
        .chain(&scan.op_steps)
        .chain(&scan.gpu_steps)
        .collect();
    steps.sort_by_key(|m| (m.start, m.ordinal));
    match (steps.first(), steps.last()) {
        (Some(first), Some(last)) => Some((first.start, last.end, steps.len())),
        _ => scan.op_bounds.map(|(s, e)| (s, e, 1)),
    }
}

/// The rank identity from `distributedInfo`, the options and the trace,
/// with the note to report when it was assumed (module doc).
pub(crate) fn identity(
    path: &Path,
    opts: &ImportOptions,
    meta: &TopMeta,
    scan: &Scan,
) -> Result<(proto::RankIdentity, Option<&'static str>), Problem> {
    let dist = meta.dist.as_ref();
    let format = meta.format.format();
    let mut note = None;
    let mut owned = opts.clone();
    if dist.is_none() && format != Format::Kineto {
        // Paddle and ORT files record no rank: the caller's, the file
        // name's `rank<N>`, or (ORT: one inference process) rank 0 of 1.
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(rank_in_name);
        let single = format == Format::OnnxRuntime;
        let rank = owned
            .rank_override
            .or(named)
            .or(single.then_some(0))
            .ok_or(Problem::NoRank(format.label()))?;
        let world = owned
            .world_size_override
            .or((single && rank == 0).then_some(1))
            .ok_or(Problem::NoRank(format.label()))?;
        owned.rank_override = Some(rank);
        owned.world_size_override = Some(world);
    } else if dist.is_none() {
        // A Kineto trace without distributedInfo: an on-demand (daemon)
        // trace, which the agent names with its rank, or a single-process
        // profile: the name's rank of --world-size, else rank 0 of 1 with
        // a note, or rank 0 of --world-size.
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| agent_rank_in_name(n).or_else(|| rank_in_name(n)));
        match (owned.rank_override, owned.world_size_override, named) {
            (Some(_), None, _) => return Err(Problem::MissingDistributedInfo),
            (None, None, Some(r)) if r > 0 => return Err(Problem::NamedRankNeedsWorldSize(r)),
            (None, None, _) => {
                owned.rank_override = Some(0);
                owned.world_size_override = Some(1);
                note = Some(SINGLE_PROCESS_NOTE);
            }
            (None, Some(_), named) => owned.rank_override = Some(named.unwrap_or(0)),
            (Some(_), Some(_), _) => {}
        }
    }
    let opts = &owned;
    let field = |name: &str, v: Option<u64>, over: Option<u32>| -> Result<u32, Problem> {
        over.or_else(|| v.and_then(|v| u32::try_from(v).ok()))
            .ok_or_else(|| {
                Problem::BadDistributedInfo(format!(
                    "{name} is missing or not a small non-negative integer"
                ))
            })
    };
    let rank = field(
        "rank",
        dist.and_then(|d| d.rank.as_u64()),
        opts.rank_override,
    )?;
    let world_size = field(
        "world_size",
        dist.and_then(|d| d.world_size.as_u64()),
        opts.world_size_override,
    )?;
    if world_size == 0 || rank >= world_size {
        return Err(Problem::BadDistributedInfo(format!(
            "rank {rank} is not below world_size {world_size}"
        )));
    }
    let mut labels = HashMap::from([("source".to_owned(), format.label().to_owned())]);
    let f = &meta.format;
    if let Some(peak) = f.peak_allocated {
        labels.insert("peak_allocated_bytes".into(), peak.to_string());
    }
    if !f.providers.is_empty() {
        let providers: Vec<&str> = f.providers.iter().map(String::as_str).collect();
        labels.insert("providers".into(), providers.join(","));
    }
    if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
        labels.insert("trace_file".into(), name.to_owned());
    }
    let device = scan.first_device;
    let gpu = meta
        .devices
        .iter()
        .find(|d| d.id.as_u64() == device)
        .or_else(|| (meta.devices.len() == 1).then(|| &meta.devices[0]))
        .and_then(|d| d.name.as_str());
    if let Some(gpu) = gpu {
        labels.insert("gpu".into(), gpu.to_owned());
    }
    if let Some((start, end, steps)) = plugin_steps_span(scan) {
        let base = meta.base_time_ns.unwrap_or(0);
        for (key, t) in [
            (PLUGIN_STEPS_START_LABEL, start),
            (PLUGIN_STEPS_END_LABEL, end),
        ] {
            labels.insert(key.into(), base.saturating_add(t).to_string());
        }
        labels.insert(PLUGIN_STEPS_LABEL.into(), steps.to_string());
    }
    if let Some(end) = hta_last_step_end(scan) {
        let base = meta.base_time_ns.unwrap_or(0);
        labels.insert(
            HTA_LAST_STEP_END_LABEL.into(),
            base.saturating_add(end).to_string(),
        );
    }
    for (key, value) in [
        ("backend", dist.and_then(|d| d.backend.as_str())),
        ("nccl_version", dist.and_then(|d| d.nccl_version.as_str())),
    ] {
        if let Some(v) = value {
            labels.insert(key.into(), v.to_owned());
        }
    }
    Ok((
        proto::RankIdentity {
            job_id: opts.job.clone(),
            rank,
            world_size,
            local_rank: device.and_then(|d| u32::try_from(d).ok()).unwrap_or(0),
            node: opts.node.clone(),
            pid: scan
                .host_pid
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
            run_id: opts.run_id.clone(),
            labels,
        },
        note,
    ))
}

/// `N` of the first `rank<N>` (also `rank_N`, `rank-N`, any case) in a
/// file name: PaddlePaddle names its files after the worker
/// (`export_chrome_tracing(dir, worker_name="rank3")` writes
/// `rank3_time_<date>.paddle_trace.json`).
/// The rank rankscope-agent puts into the name of a daemon-mode trace it
/// requested: `<trace id>-r<rank>-<pid>.json`, which libkineto writes as
/// `...-<pid>_<pid>.json` (agent/src/kineto/registry.rs); the last
/// `-r<digits>-<digit>` of the name.
pub(crate) fn agent_rank_in_name(name: &str) -> Option<u32> {
    name.rmatch_indices("-r").find_map(|(i, _)| {
        let rest = &name[i + 2..];
        let end = rest.find(|c: char| !c.is_ascii_digit())?;
        let after = &rest[end..];
        (end > 0 && after.starts_with('-') && after[1..].starts_with(|c: char| c.is_ascii_digit()))
            .then(|| rest[..end].parse().ok())?
    })
}

pub(crate) fn rank_in_name(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    lower.match_indices("rank").find_map(|(i, _)| {
        let rest = lower[i + 4..].trim_start_matches(['_', '-']);
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_in_file_names() {
        assert_eq!(rank_in_name("rank3_time_2026.paddle_trace.json"), Some(3));
        assert_eq!(rank_in_name("job_RANK-12.json"), Some(12));
        assert_eq!(rank_in_name("ranking_rank_1.json"), Some(1));
        assert_eq!(rank_in_name("host_xpid_42.paddle_trace.json"), None);
        assert_eq!(agent_rank_in_name("local-1-r3-630_630.json.gz"), Some(3));
        assert_eq!(agent_rank_in_name("t-9f2-r12-77.json"), Some(12));
        assert_eq!(agent_rank_in_name("run-r2-final.json"), None);
        assert_eq!(agent_rank_in_name("worker0_step_12.pt.trace.json"), None);
    }
    use crate::scan::StepMark;

    #[test]
    fn hta_window_needs_two_step_names_and_ends_with_the_latest() {
        let mark = |step, end| StepMark {
            step,
            start: 0,
            end,
            ordinal: 0,
        };
        let mut scan = Scan::default();
        assert_eq!(hta_last_step_end(&scan), None);
        scan.cpu_steps.push(mark(4, 100));
        // The same name on the GPU side is still one name.
        scan.gpu_steps.push(mark(4, 900));
        assert_eq!(hta_last_step_end(&scan), None);
        scan.cpu_steps.push(mark(5, 200));
        // GPU-side annotations count, as in HTA.
        assert_eq!(hta_last_step_end(&scan), Some(900));
    }
}
