//! Alert lifecycle: firing -> resolved, one alert per (job, rule, rank) while
//! active, re-notification and cooldown. Pure: the caller passes the time.
//!
//! In: `fire` / `resolve` requests from the rules and `tick`s. Out:
//! [`Transition`]s — `Firing` and `Resolved` are stored and notified,
//! `Renotify` is only notified.
//!
//! Invariants: at most one active alert per [`AlertKey`]; a firing request for
//! an active key only refreshes its evidence (re-notified at most every
//! `renotify_ns`); after a resolution the key is in cooldown for
//! `cooldown_ns`, during which firing requests are suppressed (counted), so a
//! flapping condition does not page repeatedly.

use std::collections::HashMap;

use serde::Serialize;

/// Identifies an alert: one per job, rule and rank (`rank = -1`: the job).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AlertKey {
    pub job: String,
    pub rule: &'static str,
    pub rank: i64,
}

/// What a rule reports with a firing request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Node of the rank ("" for job-wide alerts).
    pub node: String,
    /// One sentence for people.
    pub summary: String,
    /// Structured values (step range, measurements, thresholds, GPU, ...).
    pub fields: serde_json::Value,
}

/// One alert as stored and notified.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    #[serde(flatten)]
    pub key: AlertKey,
    pub severity: String,
    pub state: AlertState,
    pub started_at_ns: u64,
    /// 0 while firing.
    pub resolved_at_ns: u64,
    #[serde(flatten)]
    pub evidence: Evidence,
}

/// State of an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    /// `firing` / `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// A change to notify about.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// Newly firing (stored and notified).
    Firing(Alert),
    /// Still firing, notified again after `renotify_ns` (not stored).
    Renotify(Alert),
    /// Resolved (stored and notified).
    Resolved(Alert),
}

impl Transition {
    /// The alert.
    pub fn alert(&self) -> &Alert {
        match self {
            Transition::Firing(a) | Transition::Renotify(a) | Transition::Resolved(a) => a,
        }
    }

    /// Whether the transition is stored in the `alerts` table.
    pub fn stored(&self) -> bool {
        !matches!(self, Transition::Renotify(_))
    }
}

#[derive(Debug)]
struct Active {
    alert: Alert,
    last_notified_ns: u64,
}

/// The set of active alerts.
#[derive(Debug)]
pub struct Engine {
    renotify_ns: u64,
    cooldown_ns: u64,
    active: HashMap<AlertKey, Active>,
    cooldown_until: HashMap<AlertKey, u64>,
    /// Firing requests suppressed by a cooldown.
    pub suppressed: u64,
}

impl Engine {
    /// An engine re-notifying every `renotify_ns` (0: never) with a cooldown
    /// of `cooldown_ns` after each resolution.
    pub fn new(renotify_ns: u64, cooldown_ns: u64) -> Self {
        Self {
            renotify_ns,
            cooldown_ns,
            active: HashMap::new(),
            cooldown_until: HashMap::new(),
            suppressed: 0,
        }
    }

    /// Takes back an alert that was firing when the collector stopped (read
    /// from the `alerts` table at start-up): it is active again without a new
    /// transition, so a condition that still holds does not notify twice.
    pub fn restore(&mut self, alert: Alert, now_ns: u64) {
        self.active.insert(
            alert.key.clone(),
            Active {
                alert,
                last_notified_ns: now_ns,
            },
        );
    }

    /// Whether `key` is firing.
    pub fn is_active(&self, key: &AlertKey) -> bool {
        self.active.contains_key(key)
    }

    /// Active alerts, sorted by key.
    pub fn active(&self) -> Vec<&Alert> {
        let mut v: Vec<&Alert> = self.active.values().map(|a| &a.alert).collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// The condition of `key` holds.
    pub fn fire(
        &mut self,
        key: AlertKey,
        severity: &str,
        evidence: Evidence,
        now_ns: u64,
    ) -> Option<Transition> {
        if let Some(a) = self.active.get_mut(&key) {
            a.alert.evidence = evidence;
            return None;
        }
        if self.cooldown_until.get(&key).is_some_and(|&t| now_ns < t) {
            self.suppressed += 1;
            return None;
        }
        self.cooldown_until.remove(&key);
        let alert = Alert {
            key: key.clone(),
            severity: severity.to_owned(),
            state: AlertState::Firing,
            started_at_ns: now_ns,
            resolved_at_ns: 0,
            evidence,
        };
        self.active.insert(
            key,
            Active {
                alert: alert.clone(),
                last_notified_ns: now_ns,
            },
        );
        Some(Transition::Firing(alert))
    }

    /// The condition of `key` no longer holds.
    pub fn resolve(&mut self, key: &AlertKey, now_ns: u64) -> Option<Transition> {
        let mut a = self.active.remove(key)?.alert;
        a.state = AlertState::Resolved;
        a.resolved_at_ns = now_ns;
        self.cooldown_until
            .insert(key.clone(), now_ns.saturating_add(self.cooldown_ns));
        Some(Transition::Resolved(a))
    }

    /// Resolves every active alert of `job` (e.g. the job is forgotten).
    pub fn resolve_job(&mut self, job: &str, now_ns: u64) -> Vec<Transition> {
        let mut keys: Vec<AlertKey> = self
            .active
            .keys()
            .filter(|k| k.job == job)
            .cloned()
            .collect();
        keys.sort();
        keys.iter()
            .filter_map(|k| self.resolve(k, now_ns))
            .collect()
    }

    /// Re-notifications due at `now_ns`; forgets expired cooldowns.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Transition> {
        self.cooldown_until.retain(|_, &mut t| now_ns < t);
        if self.renotify_ns == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for a in self.active.values_mut() {
            if now_ns.saturating_sub(a.last_notified_ns) >= self.renotify_ns {
                a.last_notified_ns = now_ns;
                out.push(Transition::Renotify(a.alert.clone()));
            }
        }
        out.sort_by(|a, b| a.alert().key.cmp(&b.alert().key));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(rank: i64) -> AlertKey {
        AlertKey {
            job: "j".into(),
            rule: "straggler",
            rank,
        }
    }

    fn ev(s: &str) -> Evidence {
        Evidence {
            node: "n1".into(),
            summary: s.into(),
            fields: serde_json::json!({}),
        }
    }

    #[test]
    fn fires_once_then_resolves() {
        let mut e = Engine::new(0, 0);
        let t = e.fire(key(3), "warning", ev("a"), 10).unwrap();
        assert!(matches!(t, Transition::Firing(_)));
        assert!(
            e.fire(key(3), "warning", ev("b"), 11).is_none(),
            "deduplicated"
        );
        assert_eq!(e.active()[0].evidence.summary, "b", "evidence refreshed");
        let r = e.resolve(&key(3), 20).unwrap();
        let a = r.alert();
        assert_eq!(
            (a.state, a.started_at_ns, a.resolved_at_ns),
            (AlertState::Resolved, 10, 20)
        );
        assert!(e.resolve(&key(3), 21).is_none());
    }

    #[test]
    fn cooldown_suppresses_flapping() {
        let mut e = Engine::new(0, 100);
        e.fire(key(1), "warning", ev("a"), 0);
        e.resolve(&key(1), 10);
        assert!(e.fire(key(1), "warning", ev("a"), 50).is_none());
        assert_eq!(e.suppressed, 1);
        assert!(
            e.fire(key(2), "warning", ev("a"), 50).is_some(),
            "other keys unaffected"
        );
        assert!(e.fire(key(1), "warning", ev("a"), 110).is_some());
    }

    #[test]
    fn renotifies_after_interval() {
        let mut e = Engine::new(100, 0);
        e.fire(key(1), "warning", ev("a"), 0);
        assert!(e.tick(50).is_empty());
        let t = e.tick(100);
        assert_eq!(t.len(), 1);
        assert!(matches!(t[0], Transition::Renotify(_)) && !t[0].stored());
        assert!(e.tick(150).is_empty());
        assert_eq!(e.tick(200).len(), 1);
    }

    #[test]
    fn resolve_job_resolves_all_of_it() {
        let mut e = Engine::new(0, 0);
        e.fire(key(1), "warning", ev("a"), 0);
        e.fire(key(2), "warning", ev("a"), 0);
        e.fire(
            AlertKey {
                job: "other".into(),
                rule: "hang",
                rank: -1,
            },
            "critical",
            ev("a"),
            0,
        );
        assert_eq!(e.resolve_job("j", 5).len(), 2);
        assert_eq!(e.active().len(), 1);
    }
}
