//! `rankscope-sdk`: the rank-side client every binding wraps (the Python
//! package through pyo3, C/C++ frameworks through the C ABI in [`ffi`]).
//!
//! In: calls from a training process — step begin/end, host or device
//! spans, collectives — on any of its threads. Out: one
//! `RankIngest.StreamEvents` gRPC stream to the node's `rankscope-agent`
//! (Unix socket by default, TCP, or `RANKSCOPE_AGENT`).
//!
//! Flow and backpressure (a training step is never slowed):
//! * the caller's thread validates the call against the rank's step state,
//!   builds the event and `try_send`s it into a bounded queue
//!   ([`Options::queue_events`]); when the queue is full the event is
//!   dropped (drop newest) and counted in [`Stats::dropped_queue_full`].
//!   Nothing on the caller's path waits on the network or on another thread
//!   doing I/O; the only locks are short, uncontended ones (step state, name
//!   table);
//! * one background thread (a single-threaded tokio runtime) drains the
//!   queue every [`sender::DRAIN_INTERVAL`] without waiting on it (so a
//!   caller's enqueue wakes no thread) into messages of at most [`sender::MAX_EVENTS_PER_MESSAGE`]
//!   events or [`sender::MAX_DELAY`] old (a message holding a StepEnd goes
//!   out at once), keeps at most
//!   [`sender::WINDOW`] messages unacknowledged, and reconnects with
//!   jittered exponential backoff when the agent goes away. While it is
//!   away the queue fills and further events are dropped and counted;
//!   messages in flight when the stream broke are counted as
//!   [`Stats::dropped_disconnected`] (the agent may or may not have taken
//!   them; they are not resent, so nothing is duplicated);
//! * every public function returns errors as values and never panics into
//!   the caller (the C ABI also catches unwinding).
//!
//! Invariants: the first message of every stream carries the identity; a
//! name is defined in the first message of a stream that references it; a
//! message the agent rejects (INVALID_ARGUMENT) is counted in
//! [`Stats::rejected`] with the agent's reason, and the names it defined
//! are defined again later; memory is bounded by the queue capacity, the
//! window and [`MAX_NAMES`] interned names.

pub mod connect;
pub mod event;
pub mod ffi;
pub mod identity;
pub mod sender;

mod client;

pub use client::{CallError, Client, InitError, Options, Stats};
pub use event::{CollectiveRecord, ParseError};
pub use identity::IdentityError;

/// Most distinct names (spans, process groups) a client interns; later new
/// names are sent as "no name" and counted in [`Stats::names_dropped`].
pub const MAX_NAMES: usize = 1 << 16;

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME, the clock every
/// `*_ns` of the protocol uses).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
