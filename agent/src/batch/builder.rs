//! Accumulates queued events into the `RankEvents` groups of one batch.
//!
//! In: events of validated rank messages, each with its stream and the
//! definitions of the name ids its events reference; telemetry sample sets.
//! Out: the `RankEvents` groups (events as their wire bytes,
//! `rankscope_proto::wire`) and the samples of one `AgentBatch`.
//!
//! Invariants: one `RankEvents` per rank stream per batch, in the order the
//! streams first appeared in the batch; events keep the order they were
//! pushed in; every name id referenced by a group's events is defined in that
//! group's `names` exactly once (the batch is self-contained, whenever the
//! rank defined the name).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rankscope_proto::v1 as proto;
use rankscope_proto::wire::{RankEventsWire, WireEvents};

use crate::sample::SampleSet;

/// A rank stream as the batcher sees it: a process-unique id and the identity
/// the stream opened with (node filled in).
#[derive(Debug)]
pub(crate) struct RankStream {
    pub(crate) id: u64,
    pub(crate) identity: proto::RankIdentity,
    /// A captured Kineto trace being imported: its id and event count. Its
    /// groups carry the id; its end is `trace_last`, not `stream_closed`
    /// (the rank itself may stream on).
    pub(crate) trace: Option<(String, u64)>,
}

/// The empty group of `stream`.
fn empty_group(stream: &RankStream) -> RankEventsWire {
    RankEventsWire {
        identity: Some(stream.identity.clone()),
        trace_id: stream
            .trace
            .as_ref()
            .map(|t| t.0.clone())
            .unwrap_or_default(),
        ..Default::default()
    }
}

/// The batch under construction.
#[derive(Debug, Default)]
pub(crate) struct BatchBuilder {
    ranks: Vec<RankEventsWire>,
    /// stream id -> (index into `ranks`, name ids already defined there).
    by_stream: HashMap<u64, (usize, HashSet<u32>)>,
    events: usize,
    /// Stream-closed markers in the batch.
    closed: usize,
    gpu_samples: Vec<proto::GpuSample>,
    host_samples: Vec<proto::HostSample>,
}

impl BatchBuilder {
    /// Events in the batch so far.
    pub(crate) fn events(&self) -> usize {
        self.events
    }

    /// Telemetry samples in the batch so far.
    pub(crate) fn samples(&self) -> usize {
        self.gpu_samples.len() + self.host_samples.len()
    }

    /// Events plus samples plus stream-closed markers: what
    /// `batch_max_events` bounds.
    pub(crate) fn units(&self) -> usize {
        self.events + self.samples() + self.closed
    }

    /// Marks `stream` as ended in this batch (after its events, if any).
    pub(crate) fn close(&mut self, stream: &RankStream) {
        let index = self.group(stream);
        match &stream.trace {
            Some((_, events)) => {
                self.ranks[index].trace_last = true;
                self.ranks[index].trace_events = *events;
            }
            None => self.ranks[index].stream_closed = true,
        }
        self.closed += 1;
    }

    /// Index of the group of `stream`, created when missing.
    fn group(&mut self, stream: &RankStream) -> usize {
        self.by_stream
            .entry(stream.id)
            .or_insert_with(|| {
                self.ranks.push(empty_group(stream));
                (self.ranks.len() - 1, HashSet::new())
            })
            .0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.units() == 0
    }

    /// Appends the samples of one handoff.
    pub(crate) fn push_samples(&mut self, set: SampleSet) {
        self.gpu_samples.extend(set.gpu);
        self.host_samples.extend(set.host);
    }

    /// Takes the samples out.
    pub(crate) fn take_samples(&mut self) -> (Vec<proto::GpuSample>, Vec<proto::HostSample>) {
        (
            std::mem::take(&mut self.gpu_samples),
            std::mem::take(&mut self.host_samples),
        )
    }

    /// Appends `events` of `stream`; `names` must define (at least) every
    /// name id they reference.
    pub(crate) fn push(
        &mut self,
        stream: &RankStream,
        names: &[(u32, Arc<str>)],
        events: WireEvents,
    ) {
        if events.is_empty() {
            return;
        }
        self.events += events.len();
        let (index, defined) = self.by_stream.entry(stream.id).or_insert_with(|| {
            self.ranks.push(empty_group(stream));
            (self.ranks.len() - 1, HashSet::new())
        });
        let group = &mut self.ranks[*index];
        for (id, name) in names {
            if defined.insert(*id) {
                group.names.push(proto::InternedName {
                    id: *id,
                    name: name.to_string(),
                });
            }
        }
        group.events.push(events);
    }

    /// Takes the groups out, leaving an empty builder.
    pub(crate) fn take(&mut self) -> Vec<RankEventsWire> {
        self.by_stream.clear();
        self.events = 0;
        self.closed = 0;
        std::mem::take(&mut self.ranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(id: u64, rank: u32) -> RankStream {
        RankStream {
            id,
            identity: proto::RankIdentity {
                job_id: "j".into(),
                rank,
                world_size: 8,
                ..Default::default()
            },
            trace: None,
        }
    }

    fn kernel(name_id: u32, t: u64) -> proto::Event {
        proto::Event {
            kind: Some(proto::event::Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id,
                start_ns: t,
                end_ns: t + 1,
                ..Default::default()
            })),
        }
    }

    fn wire(events: &[proto::Event]) -> WireEvents {
        WireEvents::encode(events)
    }

    #[test]
    fn groups_by_stream_keeps_order_and_defines_names_once() {
        let (a, b) = (stream(1, 0), stream(2, 1));
        let n1: Arc<str> = Arc::from("gemm");
        let mut bb = BatchBuilder::default();
        bb.push(&a, &[(1, n1.clone())], wire(&[kernel(1, 10)]));
        bb.push(&b, &[(1, Arc::from("other"))], wire(&[kernel(1, 20)]));
        bb.push(&a, &[(1, n1)], wire(&[kernel(1, 30), kernel(1, 40)]));
        assert_eq!(bb.events(), 4);
        let ranks = bb.take();
        assert!(bb.is_empty());
        assert_eq!(ranks.len(), 2);
        assert_eq!(ranks[0].identity.as_ref().unwrap().rank, 0);
        assert_eq!(ranks[0].names.len(), 1);
        assert_eq!(ranks[0].names[0].name, "gemm");
        assert_eq!(ranks[1].names[0].name, "other");
        let ts: Vec<u64> = ranks[0]
            .events
            .iter()
            .flat_map(WireEvents::iter)
            .map(|b| {
                match rankscope_proto::prost::Message::decode(b).map(|e: proto::Event| e.kind) {
                    Ok(Some(proto::event::Kind::Kernel(k))) => k.start_ns,
                    _ => 0,
                }
            })
            .collect();
        assert_eq!(ts, [10, 30, 40]);
        // After take, names are defined again in the next batch.
        bb.push(&a, &[(1, Arc::from("gemm"))], wire(&[kernel(1, 50)]));
        assert_eq!(bb.take()[0].names.len(), 1);
    }
}
