//! [`Client`]: the caller-facing half of the SDK. Everything here runs on the
//! training process's own threads and only validates, builds an event and
//! enqueues it (see the crate docs for the policy).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rankscope_proto::attribution;
use rankscope_proto::v1::{self as proto, event::Kind};
use tokio::sync::mpsc;

use crate::connect::{Target, UrlError};
use crate::event::{CollectiveRecord, ParseError};
use crate::identity::{self, IdentityArgs, IdentityError};
use crate::sender::{self, Item};
use crate::{now_ns, MAX_NAMES};

mod memory;

/// How to start a [`Client`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Agent URL (`unix:/path`, `/path`, `http://host:port`); `None` =
    /// `RANKSCOPE_AGENT`, else the agent's default Unix socket.
    pub agent: Option<String>,
    /// Who this rank is; unset fields come from the environment.
    pub identity: IdentityArgs,
    /// Capacity of the event queue between the caller and the sender thread.
    pub queue_events: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            agent: None,
            identity: IdentityArgs::default(),
            queue_events: 65_536,
        }
    }
}

/// Why a client could not start.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("queue_events must be in 1..=16777216, got {0}")]
    QueueSize(usize),
    #[error("cannot start the sender thread: {0}")]
    Thread(String),
}

/// Why one call was not recorded. None of these stops the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The queue was full; the event was dropped and counted.
    #[error("the event queue is full; the event was dropped (counted in dropped_queue_full)")]
    Dropped,
    /// A call that does not fit the rank's step or span state.
    #[error("{0}")]
    OutOfOrder(String),
    /// A bad argument.
    #[error(transparent)]
    Invalid(#[from] ParseError),
    /// A bad value.
    #[error("{0}")]
    BadValue(String),
    /// The client was shut down.
    #[error("the client is shut down")]
    Closed,
}

/// Counters of one client. `dropped` = the sum of the four drop reasons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events the agent accepted.
    pub sent: u64,
    /// Events lost for any reason.
    pub dropped: u64,
    /// Dropped at the caller: the queue was full (agent away or too slow).
    pub dropped_queue_full: u64,
    /// Dropped by the agent (its queue was full).
    pub dropped_by_agent: u64,
    /// In flight when the stream broke (not resent, to avoid duplicates).
    pub dropped_disconnected: u64,
    /// Step markers left out because the queue dropped their partner
    /// (sending them would make the agent reject the whole message).
    pub dropped_unpaired: u64,
    /// Events in messages the agent rejected (INVALID_ARGUMENT).
    pub rejected: u64,
    /// The agent's reason for the last rejection.
    pub last_rejection: Option<String>,
    /// Calls refused at the caller (out of order, bad values).
    pub invalid_calls: u64,
    /// New names beyond [`MAX_NAMES`] sent as "no name".
    pub names_dropped: u64,
    /// A stream to the agent is open now.
    pub connected: bool,
    /// Streams opened after the first one.
    pub reconnects: u64,
    /// Why the last connection attempt or stream failed.
    pub last_error: Option<String>,
}

/// Counters and state shared with the sender thread.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) sent: AtomicU64,
    pub(crate) dropped_queue_full: AtomicU64,
    pub(crate) dropped_by_agent: AtomicU64,
    pub(crate) dropped_disconnected: AtomicU64,
    pub(crate) dropped_unpaired: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) invalid_calls: AtomicU64,
    pub(crate) names_dropped: AtomicU64,
    pub(crate) connected: AtomicBool,
    /// The last connection attempt failed and no stream is open.
    pub(crate) down: AtomicBool,
    pub(crate) reconnects: AtomicU64,
    pub(crate) last_rejection: Mutex<Option<String>>,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Interned names: index = id - 1.
    pub(crate) names: Mutex<Names>,
}

#[derive(Debug, Default)]
pub(crate) struct Names {
    ids: HashMap<Arc<str>, u32>,
    pub(crate) by_id: Vec<Arc<str>>,
}

impl Shared {
    pub(crate) fn set_text(slot: &Mutex<Option<String>>, text: String) {
        if let Ok(mut s) = slot.lock() {
            *s = Some(text);
        }
    }

    /// The id of `name` (0 for the empty name, or when the table is full).
    fn intern(&self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let Ok(mut n) = self.names.lock() else {
            return 0;
        };
        if let Some(&id) = n.ids.get(name) {
            return id;
        }
        if n.by_id.len() >= MAX_NAMES {
            self.names_dropped.fetch_add(1, Relaxed);
            return 0;
        }
        let name: Arc<str> = Arc::from(name);
        n.by_id.push(Arc::clone(&name));
        let id = n.by_id.len() as u32;
        n.ids.insert(name, id);
        id
    }
}

/// The rank's step state as the caller reported it.
#[derive(Debug, Default)]
struct Steps {
    last: Option<u64>,
    open: Option<(u64, u64)>,
}

thread_local! {
    /// Open spans of `span_begin` on this thread: (client id, category, name id, start).
    static SPANS: RefCell<Vec<(u64, proto::SpanCategory, u32, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Deepest `span_begin` nesting per thread (bounds the stack).
const MAX_SPAN_DEPTH: usize = 256;

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// A connection-owning client of one rank. Cheap to share (`&Client` from
/// any thread); all calls are non-blocking except [`Client::flush`] and
/// [`Client::shutdown`].
#[derive(Debug)]
pub struct Client {
    id: u64,
    tx: mpsc::Sender<Item>,
    shared: Arc<Shared>,
    steps: Mutex<Steps>,
    identity: proto::RankIdentity,
    agent: String,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

impl Client {
    /// Resolves the identity and the agent address and starts the sender
    /// thread. Connecting happens in the background: a missing agent is not
    /// an error here (events are queued, then dropped and counted).
    pub fn start(opts: Options) -> Result<Client, InitError> {
        Self::start_with_env(opts, |k| std::env::var(k).ok())
    }

    /// [`Client::start`] with an explicit environment (tests, embedding).
    pub fn start_with_env(
        opts: Options,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Client, InitError> {
        if opts.queue_events == 0 || opts.queue_events > 1 << 24 {
            return Err(InitError::QueueSize(opts.queue_events));
        }
        let pod_labels = std::fs::read_to_string(attribution::POD_LABELS_PATH).ok();
        let identity = identity::resolve_in_pod(
            &opts.identity,
            &env,
            pod_labels.as_deref(),
            std::process::id(),
        )?;
        let agent = opts
            .agent
            .clone()
            .filter(|a| !a.is_empty())
            .or_else(|| env("RANKSCOPE_AGENT").filter(|a| !a.is_empty()))
            .unwrap_or_else(|| {
                format!(
                    "unix:{}",
                    rankscope_proto::default_agent_socket_path().display()
                )
            });
        let target = Target::parse(&agent)?;
        let (tx, rx) = mpsc::channel(opts.queue_events);
        let shared = Arc::new(Shared::default());
        let thread = sender::spawn(target, identity.clone(), rx, Arc::clone(&shared))
            .map_err(|e| InitError::Thread(e.to_string()))?;
        Ok(Client {
            id: NEXT_CLIENT.fetch_add(1, Relaxed),
            tx,
            shared,
            steps: Mutex::new(Steps::default()),
            identity,
            agent,
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
        })
    }

    /// The identity this client sends.
    pub fn identity(&self) -> &proto::RankIdentity {
        &self.identity
    }

    /// The agent URL in use.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The rank starts step `step` at `ts_ns` (now when `None`).
    pub fn step_begin(&self, step: u64, ts_ns: Option<u64>) -> Result<(), CallError> {
        let ts_ns = ts_ns.unwrap_or_else(now_ns);
        {
            let mut s = self.lock_steps()?;
            if let Some((open, _)) = s.open {
                return self.invalid(CallError::OutOfOrder(format!(
                    "step_begin({step}) while step {open} is still open; end it first"
                )));
            }
            if let Some(last) = s.last.filter(|&l| step <= l) {
                return self.invalid(CallError::OutOfOrder(format!(
                    "step_begin({step}) after step {last}: step numbers must increase"
                )));
            }
            s.open = Some((step, ts_ns));
            s.last = Some(step);
        }
        self.enqueue(Kind::StepBegin(proto::StepBegin { step, ts_ns }))
    }

    /// The rank ends step `step` at `ts_ns` (now when `None`).
    pub fn step_end(&self, step: u64, ts_ns: Option<u64>) -> Result<(), CallError> {
        let ts_ns = ts_ns.unwrap_or_else(now_ns);
        {
            let mut s = self.lock_steps()?;
            match s.open {
                Some((open, begin)) if open == step => {
                    if ts_ns < begin {
                        return self.invalid(CallError::BadValue(format!(
                            "step_end({step}) at {ts_ns} ns is before its begin at {begin} ns"
                        )));
                    }
                    s.open = None;
                }
                Some((open, _)) => {
                    return self.invalid(CallError::OutOfOrder(format!(
                        "step_end({step}) while step {open} is open"
                    )))
                }
                None => {
                    return self.invalid(CallError::OutOfOrder(format!(
                        "step_end({step}) without step_begin({step})"
                    )))
                }
            }
        }
        self.enqueue(Kind::StepEnd(proto::StepEnd { step, ts_ns }))
    }

    /// The step open now, if any.
    pub fn open_step(&self) -> Option<u64> {
        self.steps.lock().ok().and_then(|s| s.open.map(|o| o.0))
    }

    /// Records a finished span `[start_ns, end_ns)`; `device` -1 and
    /// `stream` 0 for host-side spans.
    pub fn span(
        &self,
        category: proto::SpanCategory,
        name: &str,
        start_ns: u64,
        end_ns: u64,
        device: i32,
        stream: u32,
    ) -> Result<(), CallError> {
        if end_ns < start_ns {
            return self.invalid(CallError::BadValue(format!(
                "span {name:?}: end_ns = {end_ns} is before start_ns = {start_ns}"
            )));
        }
        let name_id = self.shared.intern(name);
        self.enqueue(Kind::Span(proto::Span {
            category: category as i32,
            name_id,
            start_ns,
            end_ns,
            stream,
            device,
        }))
    }

    /// Opens a host-side span on the calling thread (closed by
    /// [`Client::span_end`] on the same thread, innermost first).
    pub fn span_begin(&self, category: proto::SpanCategory, name: &str) -> Result<(), CallError> {
        let name_id = self.shared.intern(name);
        let start = now_ns();
        let pushed = SPANS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() >= MAX_SPAN_DEPTH {
                return false;
            }
            s.push((self.id, category, name_id, start));
            true
        });
        if pushed {
            Ok(())
        } else {
            self.invalid(CallError::OutOfOrder(format!(
                "span_begin: more than {MAX_SPAN_DEPTH} spans open on this thread"
            )))
        }
    }

    /// Closes the innermost span this thread opened with [`Client::span_begin`].
    pub fn span_end(&self) -> Result<(), CallError> {
        let open = SPANS.with(|s| {
            let mut s = s.borrow_mut();
            let i = s.iter().rposition(|o| o.0 == self.id)?;
            Some(s.remove(i))
        });
        let Some((_, category, name_id, start_ns)) = open else {
            return self.invalid(CallError::OutOfOrder(
                "span_end without span_begin on this thread".into(),
            ));
        };
        self.enqueue(Kind::Span(proto::Span {
            category: category as i32,
            name_id,
            start_ns,
            end_ns: now_ns().max(start_ns),
            stream: 0,
            device: -1,
        }))
    }

    /// Records one collective or point-to-point operation.
    pub fn collective(&self, c: &CollectiveRecord) -> Result<(), CallError> {
        if c.end_ns < c.start_ns {
            return self.invalid(CallError::BadValue(format!(
                "collective {:?} seq {}: end_ns = {} is before start_ns = {}",
                c.op, c.seq, c.end_ns, c.start_ns
            )));
        }
        if c.group_size == 0 {
            return self.invalid(CallError::BadValue(format!(
                "collective {:?} seq {}: group_size is 0; it must be >= 1",
                c.op, c.seq
            )));
        }
        if c.op == proto::CollectiveOp::Unspecified {
            return self.invalid(CallError::BadValue("collective op is unspecified".into()));
        }
        let process_group_id = self.shared.intern(&c.process_group);
        self.enqueue(Kind::Collective(proto::Collective {
            op: c.op as i32,
            process_group_id,
            group_ranks: rankscope_proto::group_ranks_or_world(
                &c.group_ranks,
                c.group_size,
                self.identity.world_size,
            ),
            group_size: c.group_size,
            dtype: c.dtype as i32,
            count: c.count,
            bytes: c.bytes,
            seq: c.seq,
            stream: c.stream,
            device: c.device,
            start_ns: c.start_ns,
            end_ns: c.end_ns,
            peer: c.peer,
        }))
    }

    /// Sends what is queued and waits until the agent acknowledged it, at
    /// most `timeout`. False when the agent is not connected, the queue is
    /// full or the time ran out. Blocks the calling thread: use it at the
    /// end of training, not inside a step.
    pub fn flush(&self, timeout: Duration) -> bool {
        if self.closed.load(Relaxed) || self.shared.down.load(Relaxed) {
            return false;
        }
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        if self.tx.try_send(Item::Flush(done_tx)).is_err() {
            return false;
        }
        // Wait for the answer, but give up as soon as the agent is found
        // to be away (the flush item then waits in the queue, unread).
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            match done_rx.recv_timeout(left.min(Duration::from_millis(20))) {
                Ok(ok) => return ok,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.shared.down.load(Relaxed) {
                        return false;
                    }
                }
            }
        }
    }

    /// Flushes (at most `timeout`), closes the stream so the agent records
    /// that this rank ended, and stops the sender thread. Later calls return
    /// [`CallError::Closed`]. Idempotent.
    pub fn shutdown(&self, timeout: Duration) {
        if self.closed.swap(true, Relaxed) {
            return;
        }
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        // A full queue drains once the agent takes it; wait for room (this
        // runs at exit, not in a step), but not past the timeout.
        let deadline = std::time::Instant::now() + timeout;
        let mut item = Item::Close(done_tx);
        loop {
            match self.tx.try_send(item) {
                Ok(()) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let _ = done_rx.recv_timeout(left);
                    break;
                }
                Err(mpsc::error::TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline || self.shared.down.load(Relaxed) {
                        break;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let text = |m: &Mutex<Option<String>>| m.lock().ok().and_then(|t| t.clone());
        let q = s.dropped_queue_full.load(Relaxed);
        let a = s.dropped_by_agent.load(Relaxed);
        let d = s.dropped_disconnected.load(Relaxed);
        let u = s.dropped_unpaired.load(Relaxed);
        Stats {
            sent: s.sent.load(Relaxed),
            dropped: q + a + d + u,
            dropped_queue_full: q,
            dropped_by_agent: a,
            dropped_disconnected: d,
            dropped_unpaired: u,
            rejected: s.rejected.load(Relaxed),
            last_rejection: text(&s.last_rejection),
            invalid_calls: s.invalid_calls.load(Relaxed),
            names_dropped: s.names_dropped.load(Relaxed),
            connected: s.connected.load(Relaxed),
            reconnects: s.reconnects.load(Relaxed),
            last_error: text(&s.last_error),
        }
    }

    fn lock_steps(&self) -> Result<std::sync::MutexGuard<'_, Steps>, CallError> {
        if self.closed.load(Relaxed) {
            return Err(CallError::Closed);
        }
        self.steps
            .lock()
            .map_err(|_| CallError::BadValue("step state poisoned".into()))
    }

    fn invalid<T>(&self, e: CallError) -> Result<T, CallError> {
        self.shared.invalid_calls.fetch_add(1, Relaxed);
        Err(e)
    }

    fn enqueue(&self, kind: Kind) -> Result<(), CallError> {
        if self.closed.load(Relaxed) {
            return Err(CallError::Closed);
        }
        match self
            .tx
            .try_send(Item::Event(proto::Event { kind: Some(kind) }))
        {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.dropped_queue_full.fetch_add(1, Relaxed);
                Err(CallError::Dropped)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(CallError::Closed),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Best effort, short: a dropped client still tells the agent it ended.
        self.shutdown(Duration::from_millis(200));
    }
}
