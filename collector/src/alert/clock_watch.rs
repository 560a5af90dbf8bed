//! The `clock_skew` evaluator: one task that, on a tick, computes the node
//! clock estimate (`Store::clock_estimate`) of every job with a step marker
//! in the rule's window and hands each to the alert task
//! (`AlertInput::ClockRound`, through the alert queue's `try_send`: a full
//! queue drops it, counted; the next tick sends it again).
//!
//! A tick rather than per batch: the estimate is a query over the job's
//! stored collectives, and a clock drifts over minutes, not steps.

use std::future::Future;
use std::time::Duration;

use super::rules::{ClockSkewRule, NodeClock};
use super::{AlertHandle, AlertInput};
use crate::service::now_ns;
use crate::store::Store;

/// Starts the evaluator (nothing when the rule is disabled).
pub fn spawn(
    store: Store,
    rule: ClockSkewRule,
    alerts: AlertHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    if !rule.enabled {
        return None;
    }
    let period = Duration::from_millis(rule.evaluate_interval_ms);
    Some(crate::tick::spawn_every(
        period,
        (store, rule, alerts),
        shutdown,
        |s| async move {
            let (store, rule, alerts) = &*s;
            round(store, rule, alerts).await;
        },
    ))
}

async fn round(store: &Store, rule: &ClockSkewRule, alerts: &AlertHandle) {
    let since = now_ns().saturating_sub(rule.window_secs.saturating_mul(1_000_000_000));
    let jobs = match store.recover_jobs(since).await {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(error = %e, "job list for clock_skew failed");
            return;
        }
    };
    for j in jobs {
        let e = match store.clock_estimate(&j.job_id).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(job = %j.job_id, error = %e, "clock estimate for clock_skew failed");
                continue;
            }
        };
        if e.nodes.len() < 2 {
            continue;
        }
        let nodes = e
            .nodes
            .into_iter()
            .filter_map(|n| {
                Some(NodeClock {
                    offset_ns: n.offset_ns?,
                    node: n.node,
                    uncertainty_ns: n.uncertainty_ns,
                    samples: n.samples,
                })
            })
            .collect();
        alerts.submit(AlertInput::ClockRound {
            job: j.job_id,
            reference: e.reference_node,
            nodes,
        });
    }
}
