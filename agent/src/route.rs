//! Job routing: which collector owns each job (issue 36).
//!
//! In: the live collector set (`resolve` turns `collector_url`, one URL or a
//! comma-separated list, each host resolved to every A/AAAA address, into
//! `ip:port` targets) and, from the uplink, which targets stopped
//! answering. Out: [`RouteTable::owner`], the collector a job's batches go
//! to, read by the uplink, the spool's resend and `/metrics` / `/status`.
//!
//! Owner choice: rendezvous (highest-random-weight) hashing, Thaler and
//! Ravishankar, "Using name-based mappings to increase hit rates" (IEEE/ACM
//! ToN 6(1), 1998): every live target gets the weight [`weight`]`(job,
//! "ip:port")` and the heaviest owns the job. The weight is FNV-1a 64 of the
//! job id, a zero byte and the target's `ip:port`, finished with
//! splitmix64's mixer (Steele et al., OOPSLA 2014), a fixed function of its
//! input (never std's randomly keyed hasher), so every agent of a job picks
//! the same collector without talking to the others, and a change of the
//! set moves only the jobs of the collector that came or went.
//!
//! Invariants:
//! * a target is *evicted* after its calls failed for
//!   `collector_failover_after_ms` (the uplink decides); an evicted target
//!   owns nothing, so its jobs go to the next target of their order; the
//!   resolver readmits it once a TCP connection to it succeeds again, and
//!   its jobs move back (the owner is always the first live target of the
//!   order, whatever happened before, so agents converge);
//! * no target at all (nothing resolved, or all evicted): no owner; the
//!   uplink keeps every batch (backlog, spool) until one appears.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

pub(crate) mod resolve;

/// Jobs without a batch for this long leave `/metrics` and `/status`.
const OWNER_KEEP: Duration = Duration::from_secs(600);

/// The rendezvous weight of `collector` (`ip:port`) for `job`.
pub fn weight(job: &str, collector: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in job.bytes().chain([0u8]).chain(collector.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    // splitmix64's finaliser: FNV's low bits alone mix poorly.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// `collectors` in `job`'s rendezvous order: the owner first, then the
/// failover targets (ties, practically impossible, broken by name).
pub fn rendezvous_order<'a>(
    job: &str,
    collectors: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let mut v: Vec<(u64, &str)> = collectors
        .into_iter()
        .map(|c| (weight(job, c), c))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    v.into_iter().map(|(_, c)| c).collect()
}

/// The `agent_session` of `job`'s batches: each job's batches form their
/// own session whose `seq` grows by one, so the collector that owns the job
/// sees no gaps (its reorder buffer would wait for batches of other jobs
/// sent elsewhere). Samples-only batches of no job keep the agent's session.
pub fn job_session(session: u64, job: &str) -> u64 {
    if job.is_empty() {
        return session;
    }
    let s = weight(job, &format!("{session:016x}"));
    if s == 0 {
        1
    } else {
        s
    }
}

/// One resolved collector.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// A lazily connecting client for this address.
    pub(crate) channel: Channel,
    /// Calls failed for `collector_failover_after_ms`: owns nothing.
    pub(crate) evicted: bool,
    /// The last call to it failed (0 on `/metrics`).
    pub(crate) failing: bool,
}

/// The live collector set and the current owner of each job.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    /// `ip:port` -> target.
    pub(crate) targets: BTreeMap<String, Target>,
    /// job -> (owner `ip:port`, last batch routed).
    owners: HashMap<String, (String, Instant)>,
    /// URL -> why it does not resolve now.
    pub(crate) resolve_errors: BTreeMap<String, String>,
    /// Bumped on every change of the set (the uplink re-routes then).
    pub(crate) version: u64,
}

/// Shared by the resolver, the uplink, the spool resend and the HTTP endpoint.
pub(crate) type Routes = Arc<Mutex<RouteTable>>;

/// Locks `routes` (a panicked holder left plain data: take it).
pub(crate) fn lock(routes: &Routes) -> MutexGuard<'_, RouteTable> {
    routes.lock().unwrap_or_else(|e| e.into_inner())
}

impl RouteTable {
    /// The owner of `job`: the first target of its order not evicted.
    pub(crate) fn owner(&self, job: &str) -> Option<(&str, &Target)> {
        let live = self.targets.iter().filter(|(_, t)| !t.evicted);
        let order = rendezvous_order(job, live.map(|(k, _)| k.as_str()));
        let key = order.first()?;
        self.targets
            .get_key_value(*key)
            .map(|(k, t)| (k.as_str(), t))
    }

    /// Records that a batch of `job` went to `target` now.
    pub(crate) fn routed(&mut self, job: &str, target: &str) {
        let now = Instant::now();
        match self.owners.get_mut(job) {
            Some(e) if e.0 == target => e.1 = now,
            _ => {
                tracing::info!(job, collector = target, "job routed to its owner collector");
                self.owners.insert(job.to_owned(), (target.to_owned(), now));
            }
        }
        if self.owners.len() > 64 {
            self.owners.retain(|_, (_, at)| at.elapsed() < OWNER_KEEP);
        }
    }

    /// Marks `target` failing or answering.
    pub(crate) fn set_failing(&mut self, target: &str, failing: bool) {
        if let Some(t) = self.targets.get_mut(target) {
            t.failing = failing;
        }
    }

    /// Takes `target` out of every job's choice (its jobs fail over).
    pub(crate) fn evict(&mut self, target: &str) {
        if let Some(t) = self.targets.get_mut(target) {
            if !t.evicted {
                t.evicted = true;
                self.version += 1;
            }
        }
    }

    /// Replaces the set with `resolved` (`ip:port` -> client), keeping the
    /// state of targets that stay.
    pub(crate) fn set_targets(&mut self, resolved: BTreeMap<String, Channel>) {
        let before: Vec<String> = self.targets.keys().cloned().collect();
        let mut next = BTreeMap::new();
        for (key, channel) in resolved {
            let t = match self.targets.remove(&key) {
                Some(t) => t,
                None => Target {
                    channel,
                    evicted: false,
                    failing: false,
                },
            };
            next.insert(key, t);
        }
        self.targets = next;
        if before != self.targets.keys().cloned().collect::<Vec<_>>() {
            tracing::info!(collectors = ?self.targets.keys().collect::<Vec<_>>(), "collector set changed");
            self.version += 1;
        }
    }

    /// `/metrics` lines: owner per live job, up per collector, resolution
    /// errors with their reason.
    pub(crate) fn prometheus(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP rankscope_agent_job_owner The collector each live job's batches go to (1)."
        );
        let _ = writeln!(out, "# TYPE rankscope_agent_job_owner gauge");
        let mut jobs: Vec<_> = self
            .owners
            .iter()
            .filter(|(_, (_, at))| at.elapsed() < OWNER_KEEP)
            .collect();
        jobs.sort();
        for (job, (target, _)) in jobs {
            let _ = writeln!(
                out,
                "rankscope_agent_job_owner{{job=\"{}\",collector=\"{}\"}} 1",
                escape(job),
                escape(target)
            );
        }
        let _ = writeln!(out, "# HELP rankscope_agent_collector_up Whether a resolved collector answers (0: failing or evicted).");
        let _ = writeln!(out, "# TYPE rankscope_agent_collector_up gauge");
        for (key, t) in &self.targets {
            let up = u8::from(!t.failing && !t.evicted);
            let _ = writeln!(
                out,
                "rankscope_agent_collector_up{{collector=\"{}\"}} {up}",
                escape(key)
            );
        }
        let _ = writeln!(out, "# HELP rankscope_agent_collector_resolve_error A collector_url that does not resolve now, and why (1).");
        let _ = writeln!(out, "# TYPE rankscope_agent_collector_resolve_error gauge");
        for (url, reason) in &self.resolve_errors {
            let _ = writeln!(
                out,
                "rankscope_agent_collector_resolve_error{{url=\"{}\",reason=\"{}\"}} 1",
                escape(url),
                escape(reason)
            );
        }
        out
    }

    /// The agent status (`GET /status`): collectors and job owners.
    pub(crate) fn status(&self) -> String {
        use std::fmt::Write;
        let mut out = String::from("collectors:\n");
        for (key, t) in &self.targets {
            let state = match (t.evicted, t.failing) {
                (true, _) => "evicted (its jobs failed over)",
                (false, true) => "failing",
                (false, false) => "up",
            };
            let _ = writeln!(out, "  {key} {state}");
        }
        for (url, reason) in &self.resolve_errors {
            let _ = writeln!(out, "  {url} unresolved: {reason}");
        }
        out.push_str("jobs:\n");
        let mut jobs: Vec<_> = self.owners.iter().collect();
        jobs.sort();
        for (job, (target, at)) in jobs {
            let _ = writeln!(
                out,
                "  {job} -> {target} (last batch {} ms ago)",
                at.elapsed().as_millis()
            );
        }
        out
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_fixed_values_of_their_input() {
        // Pinned: every agent, of every build, must compute these.
        assert_eq!(
            weight("job", "10.0.0.1:7700"),
            weight("job", "10.0.0.1:7700")
        );
        assert_ne!(
            weight("job", "10.0.0.1:7700"),
            weight("job", "10.0.0.2:7700")
        );
        assert_ne!(weight("a", "bc"), weight("ab", "c"), "the separator counts");
    }

    #[test]
    fn removing_a_collector_moves_only_its_jobs_and_to_the_runner_up() {
        let all = ["10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"];
        for i in 0..200 {
            let job = format!("job-{i}");
            let order = rendezvous_order(&job, all);
            let without: Vec<&str> = all.iter().copied().filter(|c| *c != all[1]).collect();
            let owner_after = rendezvous_order(&job, without)[0];
            if order[0] == all[1] {
                assert_eq!(owner_after, order[1], "{job}: the runner-up takes over");
            } else {
                assert_eq!(
                    owner_after, order[0],
                    "{job}: a job of another collector stays"
                );
            }
        }
    }

    #[test]
    fn jobs_spread_over_the_collectors() {
        let all = ["10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"];
        let mut load = HashMap::new();
        for i in 0..3000 {
            *load
                .entry(rendezvous_order(&format!("j{i}"), all)[0])
                .or_insert(0u32) += 1;
        }
        for c in all {
            let n = load.get(c).copied().unwrap_or(0);
            assert!((850..=1150).contains(&n), "{c} owns {n} of 3000 jobs");
        }
    }

    #[test]
    fn job_sessions_differ_per_job_and_keep_the_agent_session_for_no_job() {
        assert_eq!(job_session(7, ""), 7);
        assert_ne!(job_session(7, "a"), job_session(7, "b"));
        assert_ne!(job_session(7, "a"), job_session(8, "a"));
        assert_ne!(job_session(7, "a"), 0);
    }

    #[tokio::test]
    async fn an_evicted_owner_hands_its_jobs_to_the_next_of_their_order() {
        let mut t = RouteTable::default();
        let ch = || Channel::from_static("http://127.0.0.1:1").connect_lazy();
        t.set_targets(
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
                .into_iter()
                .map(|k| (k.to_owned(), ch()))
                .collect(),
        );
        let order = rendezvous_order("j", ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        assert_eq!(t.owner("j").map(|o| o.0), Some(order[0]));
        t.evict(order[0]);
        assert_eq!(t.owner("j").map(|o| o.0), Some(order[1]));
        t.evict(order[1]);
        t.evict(order[2]);
        assert!(t.owner("j").is_none(), "no live collector: no owner");
    }
}
