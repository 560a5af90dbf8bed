//! Pacing of the rank streams: a shared event-rate throttle and the
//! real-time wait.
//!
//! In: a batch size in events (or a step end time). Out: a future that
//! completes when the batch may go. Invariant: a batch goes at the end of
//! its slot on one shared schedule, so by time t after the first batch the
//! ranks together have sent at most `rate * t` events.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Shared throttle: batches reserve consecutive slots of `events / rate`
/// seconds on one schedule.
#[derive(Debug)]
pub struct Pacer {
    rate_events_per_s: f64,
    next_slot: Mutex<Option<Instant>>,
}

impl Pacer {
    /// A throttle at `rate_events_per_s` (> 0) across all callers.
    pub fn new(rate_events_per_s: f64) -> Self {
        Self {
            rate_events_per_s,
            next_slot: Mutex::new(None),
        }
    }

    /// Reserves a slot for `events` and returns when it ends (the batch may
    /// go then).
    pub fn reserve(&self, events: usize, now: Instant) -> Instant {
        let cost = Duration::from_secs_f64(events as f64 / self.rate_events_per_s);
        let mut next = match self.next_slot.lock() {
            Ok(g) => g,
            // A panic elsewhere cannot leave the Option inconsistent.
            Err(poisoned) => poisoned.into_inner(),
        };
        let start = next.map_or(now, |n| n.max(now));
        let end = start + cost;
        *next = Some(end);
        end
    }

    /// Waits for a slot for `events`.
    pub async fn acquire(&self, events: usize) {
        let at = self.reserve(events, Instant::now());
        tokio::time::sleep_until(at.into()).await;
    }
}

/// Waits until the wall clock reaches `ts_ns` (ns since the Unix epoch).
pub async fn wait_until_wall_ns(ts_ns: u64) {
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    if ts_ns > now_ns {
        tokio::time::sleep(Duration::from_nanos(ts_ns - now_ns)).await;
    }
}

/// Events per message under a rate: what the rank SDK collects in its
/// [`MAX_DELAY`](rankscope_sdk::sender::MAX_DELAY) of each rank's share (a
/// rank at that rate sends about as many messages as the SDK would; a
/// step's end is sent at once, as the SDK does); never more than `max`.
pub fn events_per_message(max: usize, rate_events_per_s: Option<f64>, ranks: u32) -> usize {
    match rate_events_per_s {
        None => max.max(1),
        Some(rate) => {
            let window = rankscope_sdk::sender::MAX_DELAY.as_secs_f64();
            let share = rate * window / f64::from(ranks.max(1));
            (share as usize).clamp(1, max.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_shrink_under_a_rate() {
        assert_eq!(events_per_message(2_000, None, 8), 2_000);
        // A rank's share of 8,000 events/s in the SDK's 1 s window.
        assert_eq!(events_per_message(2_000, Some(8_000.0), 8), 1_000);
        assert_eq!(events_per_message(2_000, Some(1e9), 8), 2_000);
        assert_eq!(events_per_message(2_000, Some(1.0), 8), 1);
    }

    #[test]
    fn slots_follow_each_other_at_the_rate() {
        let p = Pacer::new(1_000.0);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(p.reserve(500, t0), t0 + ms(500));
        assert_eq!(p.reserve(500, t0), t0 + ms(1_000));
        assert_eq!(p.reserve(1, t0), t0 + ms(1_001));
        // After an idle period the schedule restarts at `now`.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(p.reserve(1, later), later + ms(1));
    }
}
