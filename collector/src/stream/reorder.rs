//! Puts the stored batches of each agent session back in sequence order.
//!
//! In: `(agent session, seq, payload)` in the order the writer acknowledged
//! them, which can differ from the order the agent sent them (several batches
//! are in flight). Out: payloads in seq order per session, so every rank's
//! events reach step assembly in stream order.
//!
//! A seq that will never come (a batch the collector rejected) is released by
//! `skip`. A gap that stays open (a batch still being retried) is given up
//! after `max_wait_ns` or when more than `max_buffered` batches wait behind
//! it; the batch is then processed late, out of order, when it arrives. A
//! session starts at the `start` its first submission names (the first seq
//! not yet stored: 1 for a new agent session, later after a collector
//! restart). Memory: at most `max_buffered` payloads per session.
//!
//! Batches reach analytics when the writer accepts them, before ClickHouse
//! committed them (see `service`), so a batch whose flush failed comes again
//! when the agent retries it: a seq already released is dropped as a
//! duplicate (`duplicates`). Released seqs are remembered over the last
//! [`RELEASED_WINDOW`] seqs of each session; a seq below that window is taken
//! as late, as before.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How many seqs below the next expected one are remembered as released
/// (an agent has at most its backlog, 256 batches by default, unsettled).
pub const RELEASED_WINDOW: u64 = 4_096;

#[derive(Debug)]
struct Session<T> {
    next: u64,
    waiting: BTreeMap<u64, (u64, Option<T>)>,
    touched_ns: u64,
    /// Seqs below `next` released late (a given-up gap, or below `first`),
    /// within the window: those are duplicates when they come again.
    late_released: BTreeSet<u64>,
    /// Seqs below `next` that were never released (skipped gaps), within
    /// the window: only those are taken late.
    missing: BTreeSet<u64>,
    /// The first seq of the session as this collector saw it: below it,
    /// nothing is known (a restart joined mid-session), so a lower seq is late.
    first: u64,
}

/// Reorder buffers of all sessions.
#[derive(Debug)]
pub struct Reorder<T> {
    sessions: HashMap<(String, u64), Session<T>>,
    max_buffered: usize,
    max_wait_ns: u64,
    /// Gaps given up.
    pub gaps_skipped: u64,
    /// Batches released after their gap was given up.
    pub late: u64,
    /// Batches offered again after they were released (a retried batch).
    pub duplicates: u64,
}

impl<T> Reorder<T> {
    /// Buffers at most `max_buffered` batches per session for at most `max_wait_ns`.
    pub fn new(max_buffered: usize, max_wait_ns: u64) -> Self {
        Self {
            sessions: HashMap::new(),
            max_buffered: max_buffered.max(1),
            max_wait_ns,
            gaps_skipped: 0,
            late: 0,
            duplicates: 0,
        }
    }

    /// Forgets `session` (its job moved to another collector): when it
    /// comes back it starts where its first submission says, as a new one.
    pub fn forget(&mut self, session: &(String, u64)) {
        self.sessions.remove(session);
    }

    /// [`Reorder::push_from`] where a session not seen yet starts at `seq`
    /// (the tests' shorthand).
    #[cfg(test)]
    pub fn push(
        &mut self,
        session: (String, u64),
        seq: u64,
        payload: Option<T>,
        now_ns: u64,
        ready: &mut Vec<T>,
    ) {
        self.push_from(session, seq, seq, payload, now_ns, ready);
    }

    /// Offers batch `seq` of `session` (`None`: the seq carries nothing, e.g.
    /// it was rejected) and appends what became ready, in order, to `ready`.
    /// A session not seen yet starts at `start` (at most `seq`): the first
    /// seq its source has not stored (1 for a new agent session). Batches
    /// reach the buffer when the writer takes them, so a session's second
    /// batch may come before its first.
    pub fn push_from(
        &mut self,
        session: (String, u64),
        seq: u64,
        start: u64,
        payload: Option<T>,
        now_ns: u64,
        ready: &mut Vec<T>,
    ) {
        let start = start.min(seq);
        let s = self.sessions.entry(session).or_insert_with(|| Session {
            next: start,
            waiting: BTreeMap::new(),
            touched_ns: now_ns,
            late_released: BTreeSet::new(),
            missing: BTreeSet::new(),
            first: start,
        });
        s.touched_ns = now_ns;
        if seq < s.next {
            let floor = s.next.saturating_sub(RELEASED_WINDOW);
            let take = !s.late_released.contains(&seq)
                && (s.missing.remove(&seq) || seq < s.first || seq < floor);
            if take {
                self.late += 1;
                if seq >= floor {
                    s.late_released.insert(seq);
                }
                ready.extend(payload);
            } else {
                self.duplicates += 1;
            }
            return;
        }
        if s.waiting.contains_key(&seq) {
            self.duplicates += 1;
            return;
        }
        s.waiting.insert(seq, (now_ns, payload));
        Self::release(s, ready);
        if s.waiting.len() > self.max_buffered {
            self.gaps_skipped += 1;
            Self::skip_gap(s, ready);
        }
    }

    /// Gives up gaps older than `max_wait_ns` and forgets idle sessions.
    pub fn tick(&mut self, now_ns: u64, ready: &mut Vec<T>) {
        let max_wait = self.max_wait_ns;
        for s in self.sessions.values_mut() {
            while s
                .waiting
                .first_key_value()
                .is_some_and(|(_, (since, _))| now_ns.saturating_sub(*since) >= max_wait)
            {
                self.gaps_skipped += 1;
                Self::skip_gap(s, ready);
            }
        }
        self.sessions.retain(|_, s| {
            !s.waiting.is_empty() || now_ns.saturating_sub(s.touched_ns) < 3_600 * 1_000_000_000
        });
    }

    /// Batches waiting behind gaps, over all sessions.
    pub fn buffered(&self) -> usize {
        self.sessions.values().map(|s| s.waiting.len()).sum()
    }

    fn release(s: &mut Session<T>, ready: &mut Vec<T>) {
        while let Some((_, payload)) = s.waiting.remove(&s.next) {
            ready.extend(payload);
            s.next += 1;
        }
    }

    fn skip_gap(s: &mut Session<T>, ready: &mut Vec<T>) {
        if let Some((&first, _)) = s.waiting.first_key_value() {
            let floor = first.saturating_sub(RELEASED_WINDOW);
            s.missing.extend(s.next.max(floor)..first);
            s.next = first;
            Self::release(s, ready);
            let floor = s.next.saturating_sub(RELEASED_WINDOW);
            s.missing = s.missing.split_off(&floor);
            s.late_released = s.late_released.split_off(&floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (String, u64) {
        ("a".to_string(), 1)
    }

    #[test]
    fn releases_in_order() {
        let mut r = Reorder::new(8, 1_000);
        let mut out = Vec::new();
        r.push(key(), 5, Some(5), 0, &mut out);
        r.push(key(), 7, Some(7), 0, &mut out);
        assert_eq!(out, vec![5]);
        r.push(key(), 6, Some(6), 0, &mut out);
        assert_eq!(out, vec![5, 6, 7]);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn skipped_seq_releases_the_rest() {
        let mut r = Reorder::new(8, 1_000);
        let mut out = Vec::new();
        r.push(key(), 1, Some(1), 0, &mut out);
        r.push(key(), 3, Some(3), 0, &mut out);
        r.push(key(), 2, None, 0, &mut out);
        assert_eq!(out, vec![1, 3]);
    }

    #[test]
    fn stale_gap_is_given_up_and_late_batch_still_delivered() {
        let mut r = Reorder::new(8, 1_000);
        let mut out = Vec::new();
        r.push(key(), 1, Some(1), 0, &mut out);
        r.push(key(), 3, Some(3), 10, &mut out);
        r.tick(500, &mut out);
        assert_eq!(out, vec![1]);
        r.tick(1_010, &mut out);
        assert_eq!(out, vec![1, 3]);
        assert_eq!(r.gaps_skipped, 1);
        r.push(key(), 2, Some(2), 1_100, &mut out);
        assert_eq!(out, vec![1, 3, 2]);
        assert_eq!(r.late, 1);
    }

    #[test]
    fn a_released_batch_offered_again_is_dropped() {
        let mut r = Reorder::new(8, 1_000);
        let mut out = Vec::new();
        for seq in [4, 5, 5, 4, 7, 7] {
            r.push(key(), seq, Some(seq), 0, &mut out);
        }
        assert_eq!(out, vec![4, 5]);
        assert_eq!(r.duplicates, 3);
        // A skipped seq comes once, late; again, it is a duplicate.
        r.tick(2_000, &mut out);
        r.push(key(), 6, Some(6), 2_000, &mut out);
        r.push(key(), 6, Some(6), 2_000, &mut out);
        assert_eq!(out, vec![4, 5, 7, 6]);
        assert_eq!((r.late, r.duplicates), (1, 4));
        // Below the first seq seen (the collector joined mid-session):
        // unknown, so late, once.
        r.push(key(), 2, Some(2), 2_000, &mut out);
        r.push(key(), 2, Some(2), 2_000, &mut out);
        assert_eq!(out, vec![4, 5, 7, 6, 2]);
        assert_eq!((r.late, r.duplicates), (2, 5));
    }

    #[test]
    fn a_new_session_waits_for_its_start() {
        let mut r = Reorder::new(8, 1_000);
        let mut out = Vec::new();
        // Seq 2 is taken before seq 1 of a new session (start 1).
        r.push_from(key(), 2, 1, Some(2), 0, &mut out);
        assert!(out.is_empty());
        r.push_from(key(), 1, 1, Some(1), 0, &mut out);
        assert_eq!(out, vec![1, 2]);
        assert_eq!((r.late, r.duplicates), (0, 0));
    }

    #[test]
    fn buffer_is_bounded() {
        let mut r = Reorder::new(2, u64::MAX);
        let mut out = Vec::new();
        r.push(key(), 1, Some(1), 0, &mut out);
        for seq in 3..=5 {
            r.push(key(), seq, Some(seq), 0, &mut out);
        }
        assert_eq!(out, vec![1, 3, 4, 5]);
        assert!(r.buffered() <= 2);
    }
}
