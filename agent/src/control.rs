//! The control channel to the collector, and the node-side import of
//! captured Kineto traces.
//!
//! In: `ControlCommand`s on the `CollectorControl.Control` stream this
//! agent opens (trace requests, import orders), the Kineto daemon's state
//! changes and captured trace files. Out: `AgentReport`s (hello, the
//! libkineto processes polling this node, per-rank trace states), and the
//! events of each imported trace, queued for the batcher like a rank stream
//! and so delivered through the acknowledged uplink, tagged with the trace
//! id (its last group carries `trace_last`: once the collector stored it,
//! the rank is `imported`).
//!
//! The stream is opened on the same channel (TLS) and with the same bearer
//! token as ingest, and reopened with the uplink's backoff when it breaks.
//! Each new stream starts with a full report (every process, every trace
//! state this node knows), so nothing depends on the stream staying up.
//!
//! Archive: with `[traces] archive_url`, the captured file is first copied
//! to object storage (`archive`) on the same blocking thread; its URL goes
//! out in the rank's `captured` status.
//!
//! Import: a captured file is parsed on a blocking thread
//! (`rankscope_kineto::parse_trace_file`; a truncated or non-JSON file
//! fails that rank with the parser's message), its iteration end times go
//! to the collector, which answers with the step number of the first
//! iteration (see the collector's `traces` module). A rank that streams
//! through the SDK imports only the trace's GPU activities (its steps and
//! collectives come from the SDK). Bounded: at most [`MAX_PARSED`] parsed
//! traces wait for their number; the queue's permits are awaited (an
//! import never makes a rank's events drop; it waits instead).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rankscope_proto::v1 as proto;
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use crate::archive::{Archive, TraceName};
use crate::backoff::Backoff;
use crate::batch::builder::RankStream;
use crate::batch::Chunk;
use crate::ingest::Ingest;
use crate::kineto::{KinetoDaemon, RankTrace, TraceMode, TraceRequest, TraceState};

/// Most parsed traces waiting for the collector's import order.
pub(crate) const MAX_PARSED: usize = 16;
/// Events per queued chunk of an import.
const IMPORT_CHUNK: usize = 1024;
/// An empty report at least this often (keeps the stream's liveness known).
const KEEPALIVE: Duration = Duration::from_secs(5);

/// What the control task needs.
pub(crate) struct Control {
    pub(crate) client: watch::Receiver<Channel>,
    pub(crate) auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    pub(crate) hello: proto::AgentHello,
    pub(crate) daemon: Arc<KinetoDaemon>,
    pub(crate) ingest: Arc<Ingest>,
    pub(crate) node: String,
    pub(crate) max_trace_bytes: u64,
    /// `[traces] archive_url`: captured files are copied there first.
    pub(crate) archive: Option<Archive>,
    /// Counts archived traces and failed uploads.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) backoff: Backoff,
    pub(crate) rng: SmallRng,
}

/// A captured trace, parsed, waiting for its step numbers.
struct Parsed {
    trace: RankTrace,
    data: rankscope_kineto::ImportedRank,
    status: proto::TraceStatus,
    /// Operator summary per iteration (index into the trace's iterations).
    ops: Vec<rankscope_kineto::OpStat>,
    /// Host operators inside the iterations (at most [`MAX_HOST_OPS`]).
    host_ops: Vec<rankscope_kineto::HostOp>,
    /// The trace's own number of each iteration.
    numbers: Vec<u64>,
}

/// Most host operators of one traced rank sent to the collector (those of
/// most self time; ~40 bytes each on the wire): they name what fills an
/// `other` straggler's gap.
const MAX_HOST_OPS: usize = 16_384;

/// Returns once `changed` is notified or at `deadline`.
async fn changed_or(changed: &tokio::sync::Notify, deadline: tokio::time::Instant) {
    tokio::select! {
        () = changed.notified() => {}
        () = tokio::time::sleep_until(deadline) => {}
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Control {
    /// Runs until `stop` turns true.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut parsed: HashMap<(String, u32), Parsed> = HashMap::new();
        let (parse_tx, mut parse_rx) = mpsc::channel::<(RankTrace, Result<Parsed, String>)>(64);
        let mut failures = 0u32;
        let mut logged = String::new();
        loop {
            if *stop.borrow() {
                return;
            }
            let (out_tx, out_rx) = mpsc::channel::<proto::AgentReport>(64);
            let first = self.full_report(&parsed);
            // What the collector will know once the stream opens: a process
            // that starts polling while the stream is being opened must be
            // reported at the first tick, so compare against this snapshot,
            // not against the processes at the moment the open completes.
            let mut last_processes = first.processes.clone();
            let _ = out_tx.try_send(first);
            let outbound = futures_stream(out_rx);
            let mut request = tonic::Request::new(outbound);
            if let Some(v) = &self.auth {
                request.metadata_mut().insert("authorization", v.clone());
            }
            let channel = self.client.borrow().clone();
            let mut client = proto::collector_control_client::CollectorControlClient::new(channel);
            let opened = tokio::select! {
                r = client.control(request) => r,
                _ = stop.changed() => return,
            };
            let mut inbound = match opened {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    let msg = format!("{:?}: {}", status.code(), status.message());
                    if msg != logged {
                        tracing::warn!(error = %msg, "control stream to the collector not open; retrying with backoff");
                        logged = msg;
                    }
                    failures = failures.saturating_add(1);
                    let delay = self.backoff.delay(failures, &mut self.rng);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => continue,
                        _ = stop.changed() => return,
                    }
                }
            };
            if !logged.is_empty() || failures > 0 {
                tracing::info!("control stream to the collector open");
            }
            failures = 0;
            logged.clear();
            // The daemon's state is looked at when it changed (its
            // registry's wake-up; a change made meanwhile keeps a permit)
            // or when a keepalive is due: an idle agent's control stream
            // no longer wakes 5 times a second to find nothing.
            let changed = self.daemon.changed();
            let mut last_sent = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    msg = inbound.message() => match msg {
                        Ok(Some(cmd)) => {
                            if let Some(r) = self.command(cmd, &mut parsed) {
                                if out_tx.send(r).await.is_err() { break; }
                                last_sent = tokio::time::Instant::now();
                            }
                        }
                        Ok(None) | Err(_) => break,
                    },
                    Some((trace, result)) = parse_rx.recv() => {
                        let report = self.parsed(trace, result, &mut parsed);
                        if let Some(r) = report {
                            if out_tx.send(r).await.is_err() { break; }
                            last_sent = tokio::time::Instant::now();
                        }
                    }
                    _ = changed_or(&changed, last_sent + KEEPALIVE) => {
                        for t in self.daemon.take_captured() {
                            self.parse(t, &parse_tx, parsed.len());
                        }
                        let mut report = proto::AgentReport {
                            traces: self.daemon.take_updates().into_iter().filter_map(status_of_update).collect(),
                            ..Default::default()
                        };
                        let processes = self.processes();
                        if processes != last_processes {
                            report.processes = processes.clone();
                            report.processes_snapshot = true;
                            last_processes = processes;
                        }
                        let due = last_sent.elapsed() >= KEEPALIVE;
                        if !report.traces.is_empty() || report.processes_snapshot || due {
                            if out_tx.send(report).await.is_err() { break; }
                            last_sent = tokio::time::Instant::now();
                        }
                    }
                }
            }
            tracing::info!("control stream to the collector closed; reopening");
        }
    }

    /// Processes polling now, as the collector wants them.
    fn processes(&self) -> Vec<proto::KinetoProcess> {
        self.daemon
            .processes()
            .into_iter()
            .map(|(pid, id)| proto::KinetoProcess {
                job_id: id.job_id,
                rank: id.rank,
                world_size: id.world_size,
                pid,
                sdk: id.sdk,
            })
            .collect()
    }

    /// The first report of a stream: hello, processes, every trace state.
    fn full_report(&self, parsed: &HashMap<(String, u32), Parsed>) -> proto::AgentReport {
        let mut traces: Vec<proto::TraceStatus> = self
            .daemon
            .traces()
            .into_iter()
            .filter(|t| !matches!(t.state, TraceState::Captured | TraceState::Imported))
            .map(|t| status_of_trace(&t))
            .collect();
        traces.extend(parsed.values().map(|p| p.status.clone()));
        // Updates already covered by this snapshot.
        let _ = self.daemon.take_updates();
        proto::AgentReport {
            hello: Some(proto::AgentHello {
                kineto_listening: self.daemon.is_listening(),
                ..self.hello.clone()
            }),
            traces,
            processes: self.processes(),
            processes_snapshot: true,
            trace_ops: Vec::new(),
        }
    }

    /// Acts on a command; an import answers with the trace's operator summary.
    fn command(
        &self,
        cmd: proto::ControlCommand,
        parsed: &mut HashMap<(String, u32), Parsed>,
    ) -> Option<proto::AgentReport> {
        match cmd.command {
            Some(proto::control_command::Command::Trace(t)) => {
                let mode = if t.iterations > 0 {
                    TraceMode::Iterations {
                        iterations: t.iterations,
                        roundup: t.iteration_roundup.max(1),
                    }
                } else {
                    TraceMode::DurationMs(t.duration_ms)
                };
                self.daemon.request(TraceRequest {
                    trace_id: t.trace_id,
                    job_id: t.job_id,
                    ranks: t.ranks,
                    mode,
                    // This node's clock: the request lives trace_request_ttl_ms from now.
                    requested_at_ns: now_ns(),
                });
                None
            }
            Some(proto::control_command::Command::Import(i)) => {
                let Some(mut p) = parsed.remove(&(i.trace_id.clone(), i.rank)) else {
                    tracing::debug!(trace = %i.trace_id, rank = i.rank, "import order for a trace this node does not hold");
                    return None;
                };
                let ops = trace_ops(&mut p, i.first_step, (i.keep_from, i.keep_steps));
                self.import(p, i.first_step, (i.keep_from, i.keep_steps));
                Some(proto::AgentReport {
                    trace_ops: vec![ops],
                    ..Default::default()
                })
            }
            None => None,
        }
    }

    /// Parses a captured trace on a blocking thread.
    fn parse(
        &self,
        t: RankTrace,
        tx: &mpsc::Sender<(RankTrace, Result<Parsed, String>)>,
        waiting: usize,
    ) {
        if waiting >= MAX_PARSED {
            self.daemon.finish(
                &t,
                Err(format!(
                    "{MAX_PARSED} traces already wait for import on node {:?}",
                    self.node
                )),
            );
            return;
        }
        let identity = proto::RankIdentity {
            job_id: t.job_id.clone(),
            rank: t.rank,
            world_size: t.world_size,
            node: self.node.clone(),
            pid: u32::try_from(t.pid).unwrap_or(0),
            labels: [
                ("source".to_owned(), "kineto-daemon".to_owned()),
                ("trace_id".to_owned(), t.trace_id.clone()),
            ]
            .into(),
            ..Default::default()
        };
        let (cap, tx) = (self.max_trace_bytes, tx.clone());
        let (archive, node) = (self.archive.clone(), self.node.clone());
        let metrics = Arc::clone(&self.metrics);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            // Archived first, whether or not the file parses: the archive
            // keeps what the profiler wrote.
            let archive_url = archive.map_or_else(String::new, |a| {
                let name = TraceName {
                    job: &t.job_id,
                    trace_id: &t.trace_id,
                    rank: t.rank,
                    node: &node,
                };
                match a.store(&handle, &name, &t.path) {
                    Ok(url) => {
                        crate::metrics::Metrics::inc(&metrics.traces_archived);
                        url
                    }
                    Err(e) => {
                        crate::metrics::Metrics::inc(&metrics.trace_archive_failures);
                        tracing::warn!(trace = %t.trace_id, rank = t.rank, error = %e, "trace not archived");
                        String::new()
                    }
                }
            });
            let result = rankscope_kineto::parse_trace_file(&t.path, &identity, cap)
                .map_err(|e| e.to_string())
                .map(|data| {
                    let (ends, numbered) = iteration_ends(&data);
                    let (windows, numbers) = iterations(&data);
                    let (ops, host_ops) =
                        rankscope_kineto::op_summary_with_host_ops(&t.path, &windows, MAX_HOST_OPS)
                            .unwrap_or_else(|e| {
                                tracing::warn!(error = %e, "no operator summary for the trace");
                                (Vec::new(), Vec::new())
                            });
                    let status = proto::TraceStatus {
                        trace_id: t.trace_id.clone(),
                        job_id: t.job_id.clone(),
                        rank: t.rank,
                        state: "captured".into(),
                        at_ns: now_ns(),
                        pid: t.pid,
                        iteration_end_ns: ends,
                        sdk: t.sdk,
                        events: data.events.len() as u64,
                        numbered,
                        archive_url,
                        ..Default::default()
                    };
                    Parsed {
                        trace: t.clone(),
                        data,
                        status,
                        ops,
                        host_ops,
                        numbers,
                    }
                });
            let _ = tx.blocking_send((t, result));
        });
    }

    fn parsed(
        &self,
        trace: RankTrace,
        result: Result<Parsed, String>,
        parsed: &mut HashMap<(String, u32), Parsed>,
    ) -> Option<proto::AgentReport> {
        match result {
            Ok(p) => {
                let status = p.status.clone();
                parsed.insert((trace.trace_id.clone(), trace.rank), p);
                Some(proto::AgentReport {
                    traces: vec![status],
                    ..Default::default()
                })
            }
            Err(reason) => {
                tracing::warn!(trace = %trace.trace_id, rank = trace.rank, %reason, "captured trace not importable");
                self.daemon.finish(&trace, Err(reason));
                None // the failure goes out with the next tick's updates
            }
        }
    }

    /// Queues the trace's events for the batcher (on a task of its own).
    fn import(&self, p: Parsed, first_step: i64, keep: (i64, u64)) {
        let events = select_events(
            p.data.events,
            p.trace.sdk,
            p.status.numbered,
            first_step,
            keep,
        );
        let names: Vec<(u32, Arc<str>)> = p
            .data
            .names
            .into_iter()
            .map(|n| (n.id, Arc::from(n.name)))
            .collect();
        let stream = Arc::new(RankStream {
            id: self
                .ingest
                .next_stream
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            identity: p.data.identity,
            trace: Some((p.trace.trace_id.clone(), events.len() as u64)),
        });
        let (ingest, daemon, trace) = (Arc::clone(&self.ingest), Arc::clone(&self.daemon), p.trace);
        tokio::spawn(async move {
            let total = events.len();
            let mut iter = events.into_iter().peekable();
            let mut sent = 0usize;
            loop {
                let part: Vec<proto::Event> = iter.by_ref().take(IMPORT_CHUNK).collect();
                let last = iter.peek().is_none();
                let n = u32::try_from(part.len()).unwrap_or(u32::MAX);
                let Ok(permit) = Arc::clone(&ingest.queue).acquire_many_owned(n).await else {
                    return; // the agent is shutting down
                };
                sent += part.len();
                let chunk = Chunk {
                    stream: Arc::clone(&stream),
                    names: names.clone(),
                    step_end: crate::batch::steps::last_step_end(&part),
                    events: rankscope_proto::wire::WireEvents::encode(&part),
                    permit,
                    closed: last,
                    spooled: None,
                };
                if ingest.chunks.send(chunk).is_err() {
                    return;
                }
                if last {
                    break;
                }
            }
            tracing::info!(trace = %trace.trace_id, rank = trace.rank, events = sent, of = total, "captured trace queued for the collector");
            daemon.finish(&trace, Ok(()));
        });
    }
}

/// The events to import: an SDK rank's GPU activities only; others with
/// their iterations renumbered from `first_step`. Step markers of negative
/// steps and of steps outside `keep` (first, count; count 0 = all) are left
/// out; their events stay, outside any step.
fn select_events(
    events: Vec<proto::Event>,
    sdk: bool,
    numbered: bool,
    first_step: i64,
    keep: (i64, u64),
) -> Vec<proto::Event> {
    use proto::event::Kind;
    if sdk {
        return events
            .into_iter()
            .filter(|e| matches!(e.kind, Some(Kind::Kernel(_))))
            .collect();
    }
    if numbered {
        return events;
    }
    events
        .into_iter()
        .filter_map(|mut e| {
            let step = match &mut e.kind {
                Some(Kind::StepBegin(b)) => &mut b.step,
                Some(Kind::StepEnd(x)) => &mut x.step,
                _ => return Some(e),
            };
            let n = first_step.checked_add(i64::try_from(*step).ok()?)?;
            let kept = keep.1 == 0
                || (n >= keep.0 && n < keep.0.saturating_add(i64::try_from(keep.1).ok()?));
            *step = u64::try_from(n).ok()?;
            kept.then_some(e)
        })
        .collect()
}

/// Time window and own number of each iteration of a parsed trace.
fn iterations(data: &rankscope_kineto::ImportedRank) -> (Vec<(u64, u64)>, Vec<u64>) {
    let (mut windows, mut numbers) = (Vec::new(), Vec::new());
    let mut begin = None;
    for e in &data.events {
        match &e.kind {
            Some(proto::event::Kind::StepBegin(b)) => begin = Some(b.ts_ns),
            Some(proto::event::Kind::StepEnd(x)) => {
                if let Some(b) = begin.take() {
                    windows.push((b, x.ts_ns.max(b)));
                    numbers.push(x.step);
                }
            }
            _ => {}
        }
    }
    (windows, numbers)
}

/// The operator summary of an imported trace, by the steps it was stored
/// under: iteration k is step `first_step + k` (a plain rank; only the
/// kept steps), the trace's own number (ProfilerStep#N) or k (an SDK rank,
/// whose trace steps are not stored).
fn trace_ops(p: &mut Parsed, first_step: i64, keep: (i64, u64)) -> proto::TraceOps {
    let (sdk, numbered) = (p.trace.sdk, p.status.numbered);
    let ops = std::mem::take(&mut p.ops)
        .into_iter()
        .filter_map(|o| {
            let k = i64::try_from(o.iteration).ok()?;
            let step = if sdk {
                k
            } else if numbered {
                i64::try_from(*p.numbers.get(o.iteration)?).ok()?
            } else {
                let s = first_step.checked_add(k)?;
                let kept = s >= 0
                    && (keep.1 == 0 || (s >= keep.0 && s < keep.0 + i64::try_from(keep.1).ok()?));
                if !kept {
                    return None;
                }
                s
            };
            Some(proto::OpStat {
                step,
                category: o.category.to_owned(),
                name: o.name,
                calls: o.calls,
                self_ns: o.self_ns,
            })
        })
        .collect();
    proto::TraceOps {
        trace_id: p.trace.trace_id.clone(),
        job_id: p.trace.job_id.clone(),
        rank: p.trace.rank,
        ops,
        host_ops: std::mem::take(&mut p.host_ops)
            .into_iter()
            .map(|o| proto::HostOp {
                name: o.name,
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                self_ns: o.self_ns,
            })
            .collect(),
    }
}

/// End time of each iteration of a parsed trace, and whether the trace
/// numbered them itself (`ProfilerStep#N`).
fn iteration_ends(data: &rankscope_kineto::ImportedRank) -> (Vec<u64>, bool) {
    let numbered = data.stats.steps_from == rankscope_kineto::StepSource::ProfilerStep;
    let ends = data
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(proto::event::Kind::StepEnd(x)) => Some(x.ts_ns),
            _ => None,
        })
        .collect();
    (ends, numbered)
}

fn status_of_trace(t: &RankTrace) -> proto::TraceStatus {
    let (state, reason) = match &t.state {
        TraceState::Failed(r) => ("failed", r.clone()),
        s => (s.name(), String::new()),
    };
    proto::TraceStatus {
        trace_id: t.trace_id.clone(),
        job_id: t.job_id.clone(),
        rank: t.rank,
        state: state.into(),
        reason,
        at_ns: t.delivered_at_ns,
        pid: t.pid,
        sdk: t.sdk,
        ..Default::default()
    }
}

/// Delivered and failed changes go to the collector as they happen;
/// captured ones after parsing, imported ones are the collector's to say.
fn status_of_update(u: crate::kineto::TraceUpdate) -> Option<proto::TraceStatus> {
    let (state, reason) = match u.state {
        TraceState::Delivered => ("delivered", String::new()),
        TraceState::Failed(r) => ("failed", r),
        TraceState::Captured | TraceState::Imported => return None,
    };
    Some(proto::TraceStatus {
        trace_id: u.trace_id,
        job_id: u.job_id,
        rank: u.rank,
        state: state.into(),
        reason,
        at_ns: u.at_ns,
        ..Default::default()
    })
}

fn futures_stream(
    rx: mpsc::Receiver<proto::AgentReport>,
) -> impl tokio_stream::Stream<Item = proto::AgentReport> + Send + 'static {
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::event::Kind;

    fn step(b: bool, n: u64) -> proto::Event {
        proto::Event {
            kind: Some(if b {
                Kind::StepBegin(proto::StepBegin {
                    step: n,
                    ..Default::default()
                })
            } else {
                Kind::StepEnd(proto::StepEnd {
                    step: n,
                    ..Default::default()
                })
            }),
        }
    }

    fn kernel() -> proto::Event {
        proto::Event {
            kind: Some(Kind::Kernel(proto::Kernel::default())),
        }
    }

    fn steps(v: &[proto::Event]) -> Vec<u64> {
        v.iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::StepBegin(b)) => Some(b.step),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn iterations_are_renumbered_and_negative_ones_lose_their_markers() {
        let ev = vec![
            step(true, 0),
            kernel(),
            step(false, 0),
            step(true, 1),
            kernel(),
            step(false, 1),
        ];
        let all = (0, 0);
        assert_eq!(
            steps(&select_events(ev.clone(), false, false, 7, all)),
            [7, 8]
        );
        let shifted = select_events(ev.clone(), false, false, -1, all);
        assert_eq!(steps(&shifted), [0]);
        assert_eq!(shifted.len(), 4, "both kernels stay");
        let one = select_events(ev.clone(), false, false, 7, (8, 1));
        assert_eq!(steps(&one), [8]);
        assert_eq!(one.len(), 4, "step 7's kernel stays, outside any step");
        assert_eq!(
            steps(&select_events(ev.clone(), false, true, 7, all)),
            [0, 1]
        );
        let sdk = select_events(ev, true, false, 7, all);
        assert_eq!(sdk.len(), 2);
        assert!(sdk.iter().all(|e| matches!(e.kind, Some(Kind::Kernel(_)))));
    }
}
