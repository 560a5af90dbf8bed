//! Duplicate-batch detection: which (agent_id, agent_session, seq) batches
//! are stored, in flight, or new.
//!
//! In: the identity of each incoming batch, and its outcome once the writer
//! answered. Out: a [`Verdict`] per incoming batch.
//!
//! Delivery from agents is at-least-once (an agent retries every batch it has
//! no acknowledgement for), so a batch may arrive again after it was stored.
//! Invariants:
//! * a seq is reported `Duplicate` only if it was stored (or permanently
//!   rejected: a rejected seq is consumed, an agent never resends it);
//! * a seq being written is `InFlight` to a concurrent retry, which the agent
//!   then retries later;
//! * memory is bounded: per session, seqs at or below a contiguous watermark
//!   are one number, and the sparse set above it holds at most
//!   [`MAX_SPARSE`] entries (beyond that the oldest gap is given up, which
//!   only matters for a batch retried after more than that many later
//!   batches were stored); at most `max_sessions` sessions are tracked, the
//!   least recently seen are forgotten first.
//!
//! A session the tracker does not know is seeded from `ingest_batches` before
//! its first batch is classified (see `service`), so duplicates are also
//! caught across a collector restart and on a re-import of the same trace. With several collectors,
//! a job's batches go to its owner; a batch the agent sent to another
//! collector before (its job moved while it was unacknowledged) comes
//! marked, and the session is seeded again from `ingest_batches` (added to
//! what is tracked) before it is classified (see `service`).

use std::collections::{BTreeSet, HashMap, HashSet};

/// Most sparse (above-watermark) seqs remembered per session.
pub const MAX_SPARSE: usize = 4096;

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not seen before: write it, then call [`Dedupe::finish`].
    New,
    /// Already stored: acknowledge without writing.
    Duplicate,
    /// The same batch is being written right now: ask the agent to retry.
    InFlight,
}

#[derive(Debug, Default)]
struct Session {
    /// Every seq <= watermark is done.
    watermark: u64,
    /// Done seqs above the watermark.
    sparse: BTreeSet<u64>,
    /// Seqs being written.
    pending: HashSet<u64>,
    /// Logical time of the last use, for eviction.
    touched: u64,
}

impl Session {
    fn is_done(&self, seq: u64) -> bool {
        seq <= self.watermark || self.sparse.contains(&seq)
    }

    fn mark_done(&mut self, seq: u64) {
        if seq <= self.watermark {
            return;
        }
        self.sparse.insert(seq);
        while self.sparse.remove(&(self.watermark + 1)) {
            self.watermark += 1;
        }
        while self.sparse.len() > MAX_SPARSE {
            // Give up the oldest gap: everything below the smallest sparse
            // seq is treated as done.
            if let Some(first) = self.sparse.pop_first() {
                self.watermark = first;
                while self.sparse.remove(&(self.watermark + 1)) {
                    self.watermark += 1;
                }
            }
        }
    }
}

/// Tracks batch identities of all agent sessions.
#[derive(Debug)]
pub struct Dedupe {
    sessions: HashMap<(String, u64), Session>,
    max_sessions: usize,
    clock: u64,
}

impl Dedupe {
    /// A tracker remembering at most `max_sessions` agent sessions.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            max_sessions: max_sessions.max(1),
            clock: 0,
        }
    }

    /// Whether the session is tracked (seeded or seen).
    pub fn knows(&self, agent_id: &str, session: u64) -> bool {
        self.sessions.contains_key(&(agent_id.to_owned(), session))
    }

    /// Stops tracking a session (its job moved to another collector, which
    /// stores its next batches): if it comes back it is seeded again from
    /// what ClickHouse holds.
    pub fn forget(&mut self, agent_id: &str, session: u64) {
        self.sessions.remove(&(agent_id.to_owned(), session));
    }

    /// Starts tracking a session with the seqs already stored for it (all of
    /// them, as read from `ingest_batches`). On a session already tracked it
    /// adds them (what another collector stored meanwhile), and seqs in
    /// flight here stay in flight.
    pub fn seed(&mut self, agent_id: &str, session: u64, stored: &[u64]) {
        let s = self.session((agent_id.to_owned(), session));
        for &seq in stored {
            s.mark_done(seq);
        }
    }

    /// Classifies an incoming batch; a `New` batch is marked in flight.
    pub fn begin(&mut self, agent_id: &str, session: u64, seq: u64) -> Verdict {
        let s = self.session((agent_id.to_owned(), session));
        if s.is_done(seq) {
            Verdict::Duplicate
        } else if !s.pending.insert(seq) {
            Verdict::InFlight
        } else {
            Verdict::New
        }
    }

    /// Records the outcome of a `New` batch: `done` when stored or
    /// permanently rejected, `false` when the agent is to retry it.
    pub fn finish(&mut self, agent_id: &str, session: u64, seq: u64, done: bool) {
        let s = self.session((agent_id.to_owned(), session));
        s.pending.remove(&seq);
        if done {
            s.mark_done(seq);
        }
    }

    /// The first seq of the session not stored yet (every lower one is):
    /// 1 for a session never seen.
    pub fn next_expected(&self, agent_id: &str, session: u64) -> u64 {
        self.sessions
            .get(&(agent_id.to_owned(), session))
            .map_or(1, |s| s.watermark + 1)
    }

    /// Number of sessions tracked.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    fn session(&mut self, key: (String, u64)) -> &mut Session {
        self.clock += 1;
        if !self.sessions.contains_key(&key) && self.sessions.len() >= self.max_sessions {
            let oldest = self
                .sessions
                .iter()
                .filter(|(_, s)| s.pending.is_empty())
                .min_by_key(|(_, s)| s.touched)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.sessions.remove(&k);
            }
        }
        let s = self.sessions.entry(key).or_default();
        s.touched = self.clock;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_inflight_duplicate() {
        let mut d = Dedupe::new(8);
        assert_eq!(d.begin("a", 1, 1), Verdict::New);
        assert_eq!(d.begin("a", 1, 1), Verdict::InFlight);
        d.finish("a", 1, 1, true);
        assert_eq!(d.begin("a", 1, 1), Verdict::Duplicate);
        // Another session of the same agent is independent.
        assert_eq!(d.begin("a", 2, 1), Verdict::New);
    }

    #[test]
    fn failed_write_can_be_retried() {
        let mut d = Dedupe::new(8);
        assert_eq!(d.begin("a", 1, 1), Verdict::New);
        d.finish("a", 1, 1, false);
        assert_eq!(d.begin("a", 1, 1), Verdict::New);
    }

    #[test]
    fn out_of_order_completion_keeps_gaps() {
        let mut d = Dedupe::new(8);
        for seq in [1, 2, 3] {
            assert_eq!(d.begin("a", 1, seq), Verdict::New);
        }
        d.finish("a", 1, 3, true);
        d.finish("a", 1, 1, true);
        d.finish("a", 1, 2, false);
        assert_eq!(
            d.begin("a", 1, 2),
            Verdict::New,
            "2 failed, must be writable"
        );
        assert_eq!(d.begin("a", 1, 3), Verdict::Duplicate);
        d.finish("a", 1, 2, true);
        let s = &d.sessions[&("a".to_string(), 1)];
        assert_eq!(s.watermark, 3);
        assert!(s.sparse.is_empty());
    }

    #[test]
    fn sparse_set_is_bounded() {
        let mut d = Dedupe::new(8);
        // seq 1 never completes; 2..=MAX_SPARSE+2 do.
        for seq in 2..=(MAX_SPARSE as u64 + 2) {
            assert_eq!(d.begin("a", 1, seq), Verdict::New);
            d.finish("a", 1, seq, true);
        }
        let s = &d.sessions[&("a".to_string(), 1)];
        assert!(s.sparse.len() <= MAX_SPARSE);
        assert_eq!(s.watermark, MAX_SPARSE as u64 + 2);
    }

    #[test]
    fn seed_marks_exactly_the_stored_batches() {
        let mut d = Dedupe::new(8);
        assert!(!d.knows("a", 7));
        d.seed("a", 7, &[1, 2, 4]);
        assert!(d.knows("a", 7));
        assert_eq!(d.begin("a", 7, 1), Verdict::Duplicate);
        assert_eq!(d.begin("a", 7, 2), Verdict::Duplicate);
        assert_eq!(d.begin("a", 7, 3), Verdict::New, "gap stays writable");
        assert_eq!(d.begin("a", 7, 4), Verdict::Duplicate);
        assert_eq!(d.begin("a", 7, 5), Verdict::New);
        d.seed("b", 1, &[]);
        assert!(d.knows("b", 1));
    }

    #[test]
    fn seeding_a_tracked_session_adds_what_another_collector_stored() {
        let mut d = Dedupe::new(8);
        d.seed("a", 7, &[1, 2]);
        assert_eq!(d.begin("a", 7, 3), Verdict::New);
        // Meanwhile another collector stored 4 and 5 (the job moved away
        // and back): this collector's watermark predates them.
        assert_eq!(d.begin("a", 7, 4), Verdict::New, "stale without a seed");
        d.finish("a", 7, 4, false);
        d.seed("a", 7, &[1, 2, 4, 5]);
        assert_eq!(d.begin("a", 7, 4), Verdict::Duplicate);
        assert_eq!(d.begin("a", 7, 5), Verdict::Duplicate);
        assert_eq!(
            d.begin("a", 7, 3),
            Verdict::InFlight,
            "3 is still written here"
        );
        d.finish("a", 7, 3, true);
        assert_eq!(d.next_expected("a", 7), 6);
    }

    #[test]
    fn sessions_are_bounded() {
        let mut d = Dedupe::new(2);
        for session in 1..=5 {
            assert_eq!(d.begin("a", session, 1), Verdict::New);
            d.finish("a", session, 1, true);
        }
        assert_eq!(d.sessions(), 2);
    }
}
