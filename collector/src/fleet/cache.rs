//! The answers of `GET /api/v1/fleet`, kept per (window, grouping,
//! `min_jobs`) for at most one `repeat_offender` tick.
//!
//! In: requests' [`Key`]s, the store, the tick (`alerts.rules.
//! repeat_offender.evaluate_interval_ms`, kept even when the rule is off),
//! the fleet watch's facts of its own window. Out: the answer's JSON body,
//! computed at `as_of_ns` (carried in the answer: its `since_ns` is
//! `as_of_ns` minus the window).
//!
//! Why: at fleet scale (10,000 nodes x 90 days) one answer costs about a
//! second of ClickHouse and collector time (bench/RESULTS-fleet.md), while
//! its inputs change on the scale of the tick the `repeat_offender` rule
//! already accepts (a score moves with every verdict and every job anywhere,
//! see [`super::watch`]). So the answer is computed at most about once per
//! tick per key and served from memory in between.
//!
//! Staleness: an answer is served while `now - as_of_ns <= tick`; older ones
//! are recomputed on request. A refresher runs every half tick and
//! recomputes the entries older than half a tick that were asked for in the
//! last [`KEEP_TICKS`] ticks (dropping the others), so a view that is in use
//! stays warm and never older than the tick. A window given as an absolute
//! `since` is keyed by that time; a relative one (`7d`) by its length.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rankscope_analysis::fleet::FleetPolicy;
use serde::Serialize;

use super::{assemble, By, FleetRow};
use crate::service::now_ns;
use crate::store::{Store, StoreError};

/// An entry not asked for in this many ticks is dropped by the refresher.
pub const KEEP_TICKS: u64 = 10;

/// The window of a fleet answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// The last `n` ns before the answer's time.
    Last(u64),
    /// From this time on (ns since the Unix epoch).
    Since(u64),
}

impl Window {
    /// The window's start for an answer computed at `at_ns`.
    pub fn since_ns(self, at_ns: u64) -> u64 {
        match self {
            Window::Last(n) => at_ns.saturating_sub(n),
            Window::Since(s) => s,
        }
    }
}

/// What an answer depends on besides the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub window: Window,
    pub by: By,
    pub min_jobs: u64,
}

/// The fleet route's answer.
#[derive(Debug, Serialize)]
pub struct FleetOut {
    /// When the answer was computed (ns since the Unix epoch).
    pub as_of_ns: u64,
    pub since_ns: u64,
    pub by: By,
    pub min_jobs: u64,
    /// Flagged placements per placement over the window's units.
    pub base_rate: f64,
    pub rows: Vec<FleetRow>,
}

/// The answer of `key` over the window's assembled `rows`, computed at
/// `as_of_ns`.
pub fn answer(rows: Vec<FleetRow>, key: Key, as_of_ns: u64) -> FleetOut {
    let (n, k) = rows.iter().fold((0u64, 0u64), |(n, k), r| {
        (n + r.placements, k + r.flagged_placements)
    });
    FleetOut {
        as_of_ns,
        since_ns: key.window.since_ns(as_of_ns),
        by: key.by,
        min_jobs: key.min_jobs,
        base_rate: if n == 0 { 0.0 } else { k as f64 / n as f64 },
        rows,
    }
}

struct Entry {
    as_of_ns: u64,
    body: Bytes,
    used_ns: u64,
}

/// The kept answers (cheap to clone: one shared map).
#[derive(Clone)]
pub struct FleetCache {
    tick_ns: u64,
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl FleetCache {
    /// A cache whose answers live one `tick`.
    pub fn new(tick: Duration) -> Self {
        Self {
            tick_ns: u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1),
            entries: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // A panic while holding the lock leaves a consistent map (each
        // operation is one insert or lookup), so a poisoned lock is used.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept answer of `key` when it is at most one tick old at `now`.
    pub fn get(&self, key: Key, now: u64) -> Option<Bytes> {
        let mut map = self.lock();
        let e = map.get_mut(&key)?;
        if now.saturating_sub(e.as_of_ns) > self.tick_ns || e.as_of_ns > now {
            return None;
        }
        e.used_ns = now;
        Some(e.body.clone())
    }

    /// Keeps `body`, computed at `as_of_ns`, unless a newer one is kept.
    pub fn put(&self, key: Key, as_of_ns: u64, body: Bytes, used: bool) {
        let mut map = self.lock();
        let used_ns = map.get(&key).map_or(0, |e| e.used_ns);
        if map.get(&key).is_some_and(|e| e.as_of_ns >= as_of_ns) {
            return;
        }
        let used_ns = if used { as_of_ns.max(used_ns) } else { used_ns };
        map.insert(
            key,
            Entry {
                as_of_ns,
                body,
                used_ns,
            },
        );
    }

    /// The answer of `key` at `now`: the kept one, else computed and kept.
    pub async fn answer(&self, store: &Store, key: Key, now: u64) -> Result<Bytes, StoreError> {
        if let Some(b) = self.get(key, now) {
            return Ok(b);
        }
        let body = compute(store, key, now).await?;
        self.put(key, now, body.clone(), true);
        Ok(body)
    }

    /// Keys to recompute at `now` (older than half a tick, asked for in
    /// the last [`KEEP_TICKS`] ticks); drops the entries not asked for.
    fn due(&self, now: u64) -> Vec<Key> {
        let keep_ns = self.tick_ns.saturating_mul(KEEP_TICKS);
        let mut map = self.lock();
        map.retain(|_, e| now.saturating_sub(e.used_ns) <= keep_ns);
        map.iter()
            .filter(|(_, e)| now.saturating_sub(e.as_of_ns) >= self.tick_ns / 2)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Starts the refresher (module doc).
    pub fn spawn_refresher(
        &self,
        store: Store,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let period = Duration::from_nanos(self.tick_ns / 2).max(Duration::from_millis(5));
        crate::tick::spawn_every(period, (self.clone(), store), shutdown, |s| async move {
            let (cache, store) = &*s;
            cache.refresh(store).await;
        })
    }

    async fn refresh(&self, store: &Store) {
        for key in self.due(now_ns()) {
            let at = now_ns();
            match compute(store, key, at).await {
                Ok(body) => self.put(key, at, body, false),
                Err(e) => tracing::warn!(error = %e, ?key, "refreshing a fleet answer failed"),
            }
        }
    }
}

/// Reads the window's facts (and its GPUs' error counts: evidence on nodes
/// and GPUs, not on links), assembles and serializes the answer.
async fn compute(store: &Store, key: Key, at: u64) -> Result<Bytes, StoreError> {
    let since_ns = key.window.since_ns(at);
    let errors = async {
        match key.by {
            By::Link => Ok(Vec::new()),
            By::Node | By::Gpu => store.fleet_gpu_counters(since_ns).await,
        }
    };
    let t = std::time::Instant::now();
    let (facts, errors) = tokio::try_join!(store.fleet_facts_by(since_ns, key.by), errors)?;
    let read_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut rows = assemble(
        &facts,
        key.by,
        FleetPolicy {
            min_jobs: key.min_jobs,
        },
    );
    super::counters::attach(&mut rows, &errors, key.by);
    let assembled_ms = t.elapsed().as_secs_f64() * 1e3 - read_ms;
    let out = body(&answer(rows, key, at));
    // The cold answer's profile (reads: `store::fleet`'s debug lines).
    tracing::debug!(
        ?key,
        read_ms,
        assembled_ms,
        json_ms = t.elapsed().as_secs_f64() * 1e3 - read_ms - assembled_ms,
        bytes = out.len(),
        "fleet answer computed"
    );
    Ok(out)
}

/// The JSON of an answer.
pub fn body(out: &FleetOut) -> Bytes {
    // Serializing plain structs of strings and numbers cannot fail.
    Bytes::from(serde_json::to_vec(out).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            window: Window::Last(100),
            by: By::Node,
            min_jobs: 3,
        }
    }

    #[test]
    fn an_answer_lives_one_tick_and_a_newer_one_wins() {
        let c = FleetCache::new(Duration::from_nanos(1_000));
        assert!(c.get(key(), 0).is_none());
        c.put(key(), 10_000, Bytes::from_static(b"a"), true);
        assert_eq!(c.get(key(), 11_000).as_deref(), Some(&b"a"[..]));
        assert!(c.get(key(), 11_001).is_none(), "older than the tick");
        c.put(key(), 9_000, Bytes::from_static(b"old"), true);
        assert_eq!(c.get(key(), 10_500).as_deref(), Some(&b"a"[..]));
        c.put(key(), 10_600, Bytes::from_static(b"b"), true);
        assert_eq!(c.get(key(), 10_700).as_deref(), Some(&b"b"[..]));
        let other = Key {
            by: By::Gpu,
            ..key()
        };
        assert!(c.get(other, 10_700).is_none());
    }

    #[test]
    fn the_refresher_takes_used_entries_past_half_a_tick_and_drops_unused_ones() {
        let c = FleetCache::new(Duration::from_nanos(1_000));
        c.put(key(), 10_000, Bytes::from_static(b"a"), true);
        assert!(c.due(10_400).is_empty(), "younger than half a tick");
        assert_eq!(c.due(10_500), vec![key()]);
        // Refreshed answers do not count as asked for: unused for more
        // than KEEP_TICKS ticks, the entry goes.
        c.put(key(), 12_000, Bytes::from_static(b"b"), false);
        let last_use = 10_000 + 1_000 * KEEP_TICKS;
        assert_eq!(c.due(last_use), vec![key()]);
        assert!(c.due(last_use + 1).is_empty());
        assert!(c.lock().is_empty(), "dropped");
    }

    #[test]
    fn windows_start_back_from_the_answer_time_or_at_their_time() {
        assert_eq!(Window::Last(100).since_ns(1_000), 900);
        assert_eq!(Window::Since(42).since_ns(1_000), 42);
        assert_eq!(Window::Last(2_000).since_ns(1_000), 0);
    }
}
