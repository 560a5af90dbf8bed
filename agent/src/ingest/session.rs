//! Per-stream validation state of one rank stream.
//!
//! In: the stream's `RankMessage`s, one at a time. Out: for a valid message,
//! its events plus the definitions of every name id they reference, ready to
//! be queued; for an invalid one, the [`ValidationError`] (naming field and
//! value) and no change of state.
//!
//! Invariants: the identity is set by the first valid message that carries
//! one and never changes afterwards; names and step state are committed only
//! when the whole message validated (all or nothing), so a rejected message
//! leaves the stream usable exactly as before it.
//!
//! Job attribution: before validation, an identity is completed from the
//! rank process's scheduler environment (`/proc/<pid>/environ`, and the pod
//! labels at `/proc/<pid>/root/etc/podinfo/labels`) where the rank left a
//! field unset (see `rankscope_proto::attribution`); what the rank set wins.

use std::sync::Arc;

use rankscope_proto::attribution::{self, Attribution};
use rankscope_proto::v1::{self as proto, event::Kind};
use rankscope_proto::validate::{
    check_same_identity, drop_unpaired_markers_by, validate_events, validate_identity,
    validate_names, Names, StepState, ValidationError,
};
use rankscope_proto::wire::{RankMessageIn, WireEvents};

use crate::batch::builder::RankStream;

/// Interned names of one stream, shared cheaply with queued chunks. Looked
/// up once per event (validation): foldhash, not SipHash.
#[derive(Debug, Default)]
struct NameTable(foldhash::HashMap<u32, Arc<str>>);

impl Names for NameTable {
    fn contains(&self, id: u32) -> bool {
        self.0.contains_key(&id)
    }
    fn get(&self, id: u32) -> Option<&str> {
        self.0.get(&id).map(|s| &**s)
    }
}

/// A validated message, ready for the queue: `events[i]` is the decoded
/// `raw[i]`, which is what is forwarded.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) stream: Arc<RankStream>,
    pub(crate) names: Vec<(u32, Arc<str>)>,
    pub(crate) events: Vec<proto::Event>,
    pub(crate) raw: WireEvents,
}

/// State of one rank stream.
#[derive(Debug)]
pub(crate) struct Session {
    id: u64,
    node: String,
    stream: Option<Arc<RankStream>>,
    names: NameTable,
    steps: StepState,
    /// Step state of the events actually queued for the collector: behind
    /// `steps` after a message was dropped (full queue or spool).
    forwarded: StepState,
    /// Some accepted events were dropped since `forwarded` last equalled
    /// `steps`: queued messages lose the step markers the collector would
    /// refuse (see [`Session::repair`]).
    gapped: bool,
    /// The rank process's scheduler environment, read once per stream.
    attribution: Option<Option<Attribution>>,
}

/// Reads the scheduler environment of process `pid` (None: unknown or unreadable).
fn process_attribution(pid: u32) -> Option<Attribution> {
    if pid == 0 {
        return None;
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let env = attribution::parse_environ(&environ);
    let labels =
        std::fs::read_to_string(format!("/proc/{pid}/root{}", attribution::POD_LABELS_PATH)).ok();
    Some(attribution::from_env(
        |k| env.get(k).cloned(),
        labels.as_deref(),
    ))
}

impl Session {
    /// A new stream with process-unique `id`; `node` fills empty identity nodes.
    pub(crate) fn new(id: u64, node: String) -> Self {
        Self {
            id,
            node,
            stream: None,
            names: NameTable::default(),
            steps: StepState::default(),
            forwarded: StepState::default(),
            gapped: false,
            attribution: None,
        }
    }

    /// After a gap (events of this stream dropped, not forwarded): removes
    /// from `events`, a message just accepted, the step markers that would
    /// not pair up with what was forwarded (the collector validates every
    /// batch's step markers and would refuse the whole batch, every rank's
    /// events in it). Returns how many were removed and the forwarded step
    /// state once `events` are queued (commit it with
    /// [`Session::forwarded`]).
    pub(crate) fn repair(&self, accepted: &mut Accepted) -> (usize, StepState) {
        if !self.gapped {
            return (0, self.steps);
        }
        let mut state = self.forwarded;
        let mut indexed: Vec<(proto::Event, usize)> = std::mem::take(&mut accepted.events)
            .into_iter()
            .zip(0..)
            .collect();
        let removed = drop_unpaired_markers_by(&mut indexed, |p| &p.0, &mut state);
        let kept: Vec<usize> = indexed.iter().map(|p| p.1).collect();
        accepted.raw.keep(&kept);
        accepted.events = indexed.into_iter().map(|p| p.0).collect();
        (removed, state)
    }

    /// The events of the last accepted message were queued; `state` is from
    /// [`Session::repair`].
    pub(crate) fn forwarded(&mut self, state: StepState) {
        self.forwarded = state;
        if state == self.steps {
            self.gapped = false;
        }
    }

    /// The events of the last accepted message were dropped.
    pub(crate) fn dropped(&mut self) {
        self.gapped = true;
    }

    /// Completes `identity` from the rank process's environment.
    fn attribute(&mut self, identity: Option<proto::RankIdentity>) -> Option<proto::RankIdentity> {
        let mut identity = identity?;
        let a = self
            .attribution
            .get_or_insert_with(|| process_attribution(identity.pid));
        if let Some(a) = a {
            attribution::fill_identity(&mut identity, a);
        }
        Some(identity)
    }

    /// The stream's identity, once established.
    /// The stream as the batcher knows it, once an identity was accepted.
    pub(crate) fn stream(&self) -> Option<&Arc<RankStream>> {
        self.stream.as_ref()
    }

    pub(crate) fn identity(&self) -> Option<&proto::RankIdentity> {
        self.stream.as_ref().map(|s| &s.identity)
    }

    /// Validates `msg` against the stream state and commits it on success.
    pub(crate) fn accept(&mut self, msg: RankMessageIn) -> Result<Accepted, ValidationError> {
        let incoming = self.attribute(msg.identity);
        let new_identity = match (&self.stream, incoming) {
            (None, identity) => {
                let mut identity = validate_identity(identity.as_ref())?.clone();
                if identity.node.is_empty() {
                    identity.node.clone_from(&self.node);
                }
                Some(identity)
            }
            (Some(stream), Some(identity)) => {
                validate_identity(Some(&identity))?;
                check_same_identity(&stream.identity, &identity)?;
                None
            }
            (Some(_), None) => None,
        };
        let new_names = msg.names.map(|t| t.names).unwrap_or_default();
        validate_names(&new_names, &self.names)?;
        let steps = validate_events(&msg.events, &new_names, &self.names, self.steps)?;

        // Valid: commit.
        if let Some(identity) = new_identity {
            self.stream = Some(Arc::new(RankStream {
                id: self.id,
                identity,
                trace: None,
            }));
        }
        for n in new_names {
            self.names
                .0
                .entry(n.id)
                .or_insert_with(|| Arc::from(n.name));
        }
        self.steps = steps;
        let stream = match &self.stream {
            Some(s) => Arc::clone(s),
            // Unreachable: the identity was validated above.
            None => return Err(ValidationError::MissingIdentity),
        };
        let names = referenced_ids(&msg.events)
            .into_iter()
            .filter_map(|id| self.names.0.get(&id).map(|n| (id, Arc::clone(n))))
            .collect();
        Ok(Accepted {
            stream,
            names,
            events: msg.events,
            raw: msg.raw,
        })
    }
}

/// Distinct non-zero name ids referenced by `events`, ascending.
fn referenced_ids(events: &[proto::Event]) -> Vec<u32> {
    let mut ids: Vec<u32> = events
        .iter()
        .filter_map(|e| match e.kind.as_ref()? {
            Kind::Span(s) => Some(s.name_id),
            Kind::Collective(c) => Some(c.process_group_id),
            Kind::Kernel(k) => Some(k.name_id),
            Kind::OperatorStat(o) => Some(o.name_id),
            Kind::MemoryOpStat(m) => Some(m.name_id),
            Kind::MemorySample(m) => Some(m.name_id),
            Kind::StepBegin(_) | Kind::StepEnd(_) | Kind::MemoryPeak(_) => None,
        })
        .filter(|id| *id != 0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
