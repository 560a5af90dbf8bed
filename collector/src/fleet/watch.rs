//! The `repeat_offender` evaluator: one task that runs the fleet query on a
//! tick and hands each round's offenders to the alert task.
//!
//! In: the store, `alerts.rules.repeat_offender` (window, interval,
//! threshold, `min_jobs`). Out: one `AlertInput::FleetRound` per tick
//! (through the alert queue's `try_send`: a full queue drops the round,
//! counted; the next tick sends a complete one again).
//!
//! Why a tick and not "when a verdict is stored": a unit's score depends on
//! the fleet's base rate, which every verdict anywhere moves, and on its
//! exposure, which jobs *without* verdicts raise, so a score can cross the
//! threshold (both ways) when no verdict of that unit changed. One query per
//! `evaluate_interval_ms` (default a minute) over verdict and rank tables is
//! cheap (bench/RESULTS.md), and a round is a complete snapshot, so a dropped
//! round or a restarted collector heals on the next tick.
//!
//! A round groups by node and by GPU (one read of the facts, assembled
//! twice): a node offends when the node or one of its GPUs does. The
//! round's scores also go to the gauges (`rankscope_fleet_score` on
//! `/metrics`, the Grafana fleet panel; `JobGauges::fleet`), and its answers
//! (its window, by node and by GPU, its `min_jobs`) to the route's
//! [`super::cache`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use rankscope_analysis::fleet::FleetPolicy;

use super::cache::{self, FleetCache, Key, Window};
use super::{assemble, By, FleetRow};
use crate::alert::rules::{Offender, RepeatOffenderRule};
use crate::alert::{AlertHandle, AlertInput};
use crate::gauges::JobGauges;
use crate::service::now_ns;
use crate::store::Store;

/// The offenders of one round: per node, its units (node or GPUs) with
/// enough exposure and a score of at least `min_score` (the watch passes
/// the rule's clear level, `min_score / 2`: the rule fires at `min_score`
/// and holds an active alert down to the clear level).
pub fn offenders(by_node: &[FleetRow], by_gpu: &[FleetRow], min_score: f64) -> Vec<Offender> {
    let mut out: BTreeMap<String, Offender> = BTreeMap::new();
    for row in by_node.iter().chain(by_gpu) {
        if row.low_exposure || row.score < min_score {
            continue;
        }
        let o = out.entry(row.node.clone()).or_insert_with(|| Offender {
            node: row.node.clone(),
            gpu_uuids: Vec::new(),
            score: f64::NEG_INFINITY,
            jobs: Vec::new(),
            verdicts: 0,
            placements: 0,
            cost_gpu_hours: 0.0,
        });
        if let Some(g) = &row.gpu_uuid {
            o.gpu_uuids.push(g.clone());
        }
        for j in &row.verdict_jobs {
            if !o.jobs.contains(j) {
                o.jobs.push(j.clone());
            }
        }
        if row.score > o.score {
            o.score = row.score;
            o.verdicts = row.flagged_placements;
            o.placements = row.placements;
            o.cost_gpu_hours = row.cost_gpu_hours;
        }
    }
    out.into_values()
        .map(|mut o| {
            o.jobs.sort();
            o
        })
        .collect()
}

/// Starts the evaluator (nothing when the rule is disabled).
pub fn spawn(
    store: Store,
    rule: RepeatOffenderRule,
    alerts: AlertHandle,
    gauges: std::sync::Arc<JobGauges>,
    answers: FleetCache,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    if !rule.enabled {
        return None;
    }
    let period = Duration::from_millis(rule.evaluate_interval_ms);
    let state = (store, rule, alerts, gauges, answers);
    Some(crate::tick::spawn_every(
        period,
        state,
        shutdown,
        |s| async move {
            let (store, rule, alerts, gauges, answers) = &*s;
            round(store, rule, alerts, gauges, answers).await;
        },
    ))
}

async fn round(
    store: &Store,
    rule: &RepeatOffenderRule,
    alerts: &AlertHandle,
    gauges: &JobGauges,
    answers: &FleetCache,
) {
    let at = now_ns();
    let window_ns = rule.window_secs.saturating_mul(1_000_000_000);
    let since = at.saturating_sub(window_ns);
    let (node_facts, gpu_facts, errors) = match tokio::try_join!(
        store.fleet_facts_by(since, By::Node),
        store.fleet_facts_by(since, By::Gpu),
        store.fleet_gpu_counters(since)
    ) {
        Ok(f) => f,
        Err(e) => {
            alerts.metrics().fleet_round_failures.fetch_add(1, Relaxed);
            tracing::warn!(error = %e, "fleet query for repeat_offender failed");
            return;
        }
    };
    let policy = FleetPolicy {
        min_jobs: rule.min_jobs,
    };
    let mut by_node = assemble(&node_facts, By::Node, policy);
    let mut by_gpu = assemble(&gpu_facts, By::Gpu, policy);
    super::counters::attach(&mut by_node, &errors, By::Node);
    super::counters::attach(&mut by_gpu, &errors, By::Gpu);
    for (by, rows) in [(By::Node, &by_node), (By::Gpu, &by_gpu)] {
        let key = Key {
            window: Window::Last(window_ns),
            by,
            min_jobs: rule.min_jobs,
        };
        answers.put(
            key,
            at,
            cache::body(&cache::answer(rows.clone(), key, at)),
            false,
        );
    }
    gauges.fleet(&by_node, &by_gpu);
    let offenders = offenders(&by_node, &by_gpu, rule.min_score / 2.0);
    alerts.submit(AlertInput::FleetRound { offenders });
}
