//! Validation rules for incoming events, shared by the agent and the collector.
//!
//! In: a rank identity, name definitions and events. Out: `Ok` or a
//! [`ValidationError`] that names the offending field and value, plus a short
//! `reason()` label for the `*_rejected_total{reason}` counters.
//!
//! Invariants checked:
//! * identity present, `job_id` non-empty, `world_size >= 1`, `rank < world_size`;
//! * every interval has `end_ns >= start_ns`;
//! * every referenced name id (`!= 0`) is defined, and ids are never redefined
//!   with a different name;
//! * required enums are not `*_UNSPECIFIED`; `group_size >= 1`;
//! * step numbers never go backwards within a stream and a `StepEnd` closes
//!   the step that is open, no earlier than it began.
//!
//! Validation is all-or-nothing: [`StepState`] is only advanced by the caller
//! after the whole message validated (see [`validate_events`]).

use crate::v1::{self as proto, event::Kind};

/// Why a message was rejected. The `Display` text names field and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("identity is missing: the first message of a stream (and every RankEvents) must carry `identity`")]
    MissingIdentity,
    #[error("identity.job_id is empty")]
    EmptyJobId,
    #[error("identity.world_size is 0; it must be >= 1")]
    ZeroWorldSize,
    #[error("identity.rank = {rank} is out of range: rank must be < world_size = {world_size}")]
    RankOutOfRange { rank: u32, world_size: u32 },
    #[error("identity changed within the stream: {field} was {was:?}, now {now:?}")]
    IdentityChanged {
        field: &'static str,
        was: String,
        now: String,
    },
    #[error("events[{index}] ({kind}): end_ns = {end_ns} is before start_ns = {start_ns}")]
    EndBeforeStart {
        index: usize,
        kind: &'static str,
        start_ns: u64,
        end_ns: u64,
    },
    #[error("events[{index}] ({kind}): {field} = {id} is not a defined name id")]
    UnknownNameId {
        index: usize,
        kind: &'static str,
        field: &'static str,
        id: u32,
    },
    #[error("names: id {id} is {problem}")]
    BadName { id: u32, problem: &'static str },
    #[error("events[{index}] ({kind}): {field} is missing or UNSPECIFIED")]
    MissingField {
        index: usize,
        kind: &'static str,
        field: &'static str,
    },
    #[error("events[{index}]: event has no kind set")]
    EmptyEvent { index: usize },
    #[error("events[{index}] ({kind}): step = {step} goes backwards (last step was {last})")]
    StepBackwards {
        index: usize,
        kind: &'static str,
        step: u64,
        last: u64,
    },
    #[error("events[{index}] (step_end): step = {step} does not match the open step {open:?}")]
    StepMismatch {
        index: usize,
        step: u64,
        open: Option<u64>,
    },
}

impl ValidationError {
    /// Short label for rejection counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingIdentity => "missing_identity",
            Self::EmptyJobId => "empty_job_id",
            Self::ZeroWorldSize => "zero_world_size",
            Self::RankOutOfRange { .. } => "rank_out_of_range",
            Self::IdentityChanged { .. } => "identity_changed",
            Self::EndBeforeStart { .. } => "end_before_start",
            Self::UnknownNameId { .. } => "unknown_name_id",
            Self::BadName { .. } => "bad_name",
            Self::MissingField { .. } => "missing_field",
            Self::EmptyEvent { .. } => "empty_event",
            Self::StepBackwards { .. } => "step_backwards",
            Self::StepMismatch { .. } => "step_mismatch",
        }
    }
}

/// Checks a rank identity and returns it.
pub fn validate_identity(
    identity: Option<&proto::RankIdentity>,
) -> Result<&proto::RankIdentity, ValidationError> {
    let id = identity.ok_or(ValidationError::MissingIdentity)?;
    if id.job_id.is_empty() {
        return Err(ValidationError::EmptyJobId);
    }
    if id.world_size == 0 {
        return Err(ValidationError::ZeroWorldSize);
    }
    if id.rank >= id.world_size {
        return Err(ValidationError::RankOutOfRange {
            rank: id.rank,
            world_size: id.world_size,
        });
    }
    Ok(id)
}

/// Checks that a repeated identity on a stream equals the first one.
pub fn check_same_identity(
    first: &proto::RankIdentity,
    now: &proto::RankIdentity,
) -> Result<(), ValidationError> {
    let fields: [(&'static str, String, String); 4] = [
        ("job_id", first.job_id.clone(), now.job_id.clone()),
        ("rank", first.rank.to_string(), now.rank.to_string()),
        (
            "world_size",
            first.world_size.to_string(),
            now.world_size.to_string(),
        ),
        ("run_id", first.run_id.clone(), now.run_id.clone()),
    ];
    for (field, was, now) in fields {
        if was != now {
            return Err(ValidationError::IdentityChanged { field, was, now });
        }
    }
    Ok(())
}

/// Lookup of interned names (stream-wide in the agent, per batch in the
/// collector).
pub trait Names {
    /// Whether `id` is defined.
    fn contains(&self, id: u32) -> bool;
    /// The name defined for `id`, if any.
    fn get(&self, id: u32) -> Option<&str>;
}

impl<S: std::hash::BuildHasher> Names for std::collections::HashMap<u32, String, S> {
    fn contains(&self, id: u32) -> bool {
        self.contains_key(&id)
    }
    fn get(&self, id: u32) -> Option<&str> {
        std::collections::HashMap::get(self, &id).map(String::as_str)
    }
}

/// Checks new name definitions against those already known: ids are >= 1,
/// names non-empty, and an id is never redefined with a different name.
pub fn validate_names(
    new: &[proto::InternedName],
    known: &impl Names,
) -> Result<(), ValidationError> {
    let mut seen = foldhash::HashMap::<u32, &str>::default();
    for n in new {
        if n.id == 0 {
            return Err(ValidationError::BadName {
                id: 0,
                problem: "reserved (0 means no name)",
            });
        }
        if n.name.is_empty() {
            return Err(ValidationError::BadName {
                id: n.id,
                problem: "defined with an empty name",
            });
        }
        let clash = known.get(n.id).is_some_and(|old| old != n.name)
            || seen.get(&n.id).is_some_and(|old| *old != n.name);
        if clash {
            return Err(ValidationError::BadName {
                id: n.id,
                problem: "redefined with a different name",
            });
        }
        seen.insert(n.id, &n.name);
    }
    Ok(())
}

/// Step bookkeeping of one stream: the last step begun and whether it is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepState {
    /// Last step number seen in a StepBegin or StepEnd.
    pub last_step: Option<u64>,
    /// The step begun and not yet ended, with its begin time.
    pub open: Option<(u64, u64)>,
}

/// Removes the step markers of `events` that the step rules of
/// [`validate_events`] would refuse after `state` (a StepBegin going
/// backwards or repeating the open step, a StepEnd going backwards, of a
/// step other than the open one, of a step already ended, or before its
/// begin) and returns how many; `state` becomes the state after the rest.
/// For a stream some of whose events were dropped on the way (an agent's
/// full queue): what is forwarded stays valid for the receiver, whose step
/// state only saw the forwarded events. Other events are kept as they are.
pub fn drop_unpaired_markers(events: &mut Vec<proto::Event>, state: &mut StepState) -> usize {
    drop_unpaired_markers_by(events, |e| e, state)
}

/// [`drop_unpaired_markers`] over items that each hold an event (the agent
/// keeps each event beside its wire bytes, `crate::wire`).
pub fn drop_unpaired_markers_by<T>(
    items: &mut Vec<T>,
    event: impl Fn(&T) -> &proto::Event,
    state: &mut StepState,
) -> usize {
    let before = items.len();
    let st = state;
    items.retain(|item| match &event(item).kind {
        Some(Kind::StepBegin(b)) => {
            let backwards = st
                .last_step
                .is_some_and(|last| b.step < last || (b.step == last && st.open.is_some()));
            if !backwards {
                st.last_step = Some(b.step);
                st.open = Some((b.step, b.ts_ns));
            }
            !backwards
        }
        Some(Kind::StepEnd(e)) => {
            let backwards = st.last_step.is_some_and(|last| e.step < last);
            let fits = match st.open {
                Some((open, begin_ns)) => open == e.step && e.ts_ns >= begin_ns,
                None => st.last_step != Some(e.step),
            };
            let keep = !backwards && fits;
            if keep {
                st.last_step = Some(e.step);
                st.open = None;
            }
            keep
        }
        _ => true,
    });
    before - items.len()
}

/// Validates `events` given the names visible to them (`known` plus `new`)
/// and the stream's step state. On success returns the step state after the
/// events; the caller commits it. On error nothing is to be committed.
pub fn validate_events(
    events: &[proto::Event],
    new: &[proto::InternedName],
    known: &impl Names,
    state: StepState,
) -> Result<StepState, ValidationError> {
    // Looked up once per event: foldhash, not SipHash.
    let new_ids: foldhash::HashSet<u32> = new.iter().map(|n| n.id).collect();
    let defined = |id: u32| id == 0 || known.contains(id) || new_ids.contains(&id);
    let mut st = state;
    for (index, ev) in events.iter().enumerate() {
        let kind = ev
            .kind
            .as_ref()
            .ok_or(ValidationError::EmptyEvent { index })?;
        match kind {
            Kind::StepBegin(b) => {
                if let Some(last) = st.last_step {
                    if b.step < last || (b.step == last && st.open.is_some()) {
                        return Err(ValidationError::StepBackwards {
                            index,
                            kind: "step_begin",
                            step: b.step,
                            last,
                        });
                    }
                }
                st.last_step = Some(b.step);
                st.open = Some((b.step, b.ts_ns));
            }
            Kind::StepEnd(e) => {
                if let Some(last) = st.last_step {
                    if e.step < last {
                        return Err(ValidationError::StepBackwards {
                            index,
                            kind: "step_end",
                            step: e.step,
                            last,
                        });
                    }
                }
                match st.open {
                    Some((open, begin_ns)) if open == e.step && e.ts_ns < begin_ns => {
                        return Err(ValidationError::EndBeforeStart {
                            index,
                            kind: "step_end",
                            start_ns: begin_ns,
                            end_ns: e.ts_ns,
                        });
                    }
                    Some((open, _)) if open == e.step => {}
                    // A different step is open: the stream skipped a StepEnd.
                    Some((open, _)) => {
                        return Err(ValidationError::StepMismatch {
                            index,
                            step: e.step,
                            open: Some(open),
                        })
                    }
                    // Ending a step that already ended.
                    None if st.last_step == Some(e.step) => {
                        return Err(ValidationError::StepMismatch {
                            index,
                            step: e.step,
                            open: None,
                        })
                    }
                    // The begin was not seen (stream joined mid-step, or the
                    // collector validating one batch without stream state).
                    None => {}
                }
                st.last_step = Some(e.step);
                st.open = None;
            }
            Kind::Span(s) => {
                if s.category == proto::SpanCategory::Unspecified as i32
                    || proto::SpanCategory::try_from(s.category).is_err()
                {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "span",
                        field: "category",
                    });
                }
                check_interval(index, "span", s.start_ns, s.end_ns)?;
                check_name(index, "span", "name_id", s.name_id, &defined)?;
            }
            Kind::Collective(c) => {
                if c.op == proto::CollectiveOp::Unspecified as i32
                    || proto::CollectiveOp::try_from(c.op).is_err()
                {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "collective",
                        field: "op",
                    });
                }
                if c.group_size == 0 {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "collective",
                        field: "group_size",
                    });
                }
                check_interval(index, "collective", c.start_ns, c.end_ns)?;
                check_name(
                    index,
                    "collective",
                    "process_group_id",
                    c.process_group_id,
                    &defined,
                )?;
            }
            Kind::Kernel(k) => {
                if k.kind == proto::KernelKind::Unspecified as i32
                    || proto::KernelKind::try_from(k.kind).is_err()
                {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "kernel",
                        field: "kind",
                    });
                }
                if k.name_id == 0 {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "kernel",
                        field: "name_id",
                    });
                }
                check_interval(index, "kernel", k.start_ns, k.end_ns)?;
                check_name(index, "kernel", "name_id", k.name_id, &defined)?;
                if k.launch_start_ns != 0 || k.launch_end_ns != 0 || k.launch_name_id != 0 {
                    check_interval(index, "kernel launch", k.launch_start_ns, k.launch_end_ns)?;
                    check_name(
                        index,
                        "kernel",
                        "launch_name_id",
                        k.launch_name_id,
                        &defined,
                    )?;
                }
            }
            Kind::OperatorStat(o) => {
                if o.calls == 0 {
                    return Err(ValidationError::MissingField {
                        index,
                        kind: "operator_stat",
                        field: "calls",
                    });
                }
                check_name(index, "operator_stat", "name_id", o.name_id, &defined)?;
                check_interval(
                    index,
                    "operator_stat device",
                    o.device_self_ns,
                    o.device_total_ns,
                )?;
            }
            Kind::MemoryOpStat(m) => {
                check_name(index, "memory_op_stat", "name_id", m.name_id, &defined)?;
            }
            Kind::MemorySample(m) => {
                check_name(index, "memory_sample", "name_id", m.name_id, &defined)?;
            }
            Kind::MemoryPeak(_) => {}
        }
    }
    Ok(st)
}

fn check_interval(
    index: usize,
    kind: &'static str,
    start_ns: u64,
    end_ns: u64,
) -> Result<(), ValidationError> {
    if end_ns < start_ns {
        return Err(ValidationError::EndBeforeStart {
            index,
            kind,
            start_ns,
            end_ns,
        });
    }
    Ok(())
}

fn check_name(
    index: usize,
    kind: &'static str,
    field: &'static str,
    id: u32,
    defined: &impl Fn(u32) -> bool,
) -> Result<(), ValidationError> {
    if defined(id) {
        Ok(())
    } else {
        Err(ValidationError::UnknownNameId {
            index,
            kind,
            field,
            id,
        })
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;

mod samples;
pub use samples::{validate_samples, SampleError};
