//! Alerts: rules over live analytics, a firing -> resolved lifecycle, the
//! `alerts` table and notification sinks.
//!
//! In: [`AlertInput`]s from live analytics (`stream`), submitted with
//! `try_send` (a full queue drops and counts: analytics never wait for
//! alerting). Out: every stored transition as an `alerts` row (through the
//! writer), and notifications to the sinks (the log, the default webhook
//! `webhook_url` — flag `--alert-webhook-url`, env
//! `RANKSCOPE_ALERT_WEBHOOK_URL` — and any `[[alerts.sinks]]`).
//!
//! One task owns the rules and the engine (`run`: one `select!` over input, an
//! evaluation tick for re-notifications, shutdown).

pub mod clock_watch;
pub mod engine;
pub mod payload;
pub mod rules;
pub mod sink;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use engine::{Alert, AlertKey, AlertState, Engine, Evidence, Transition};
pub use payload::Format;
pub use rules::{AlertInput, Rules, RulesConfig};
pub use sink::{SinkConfig, SinkHandle, SinkKind};

use crate::service::now_ns;
use crate::store::{AlertRow, RowSet, WriterHandle};

/// Alerting configuration (`[alerts]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// How often re-notifications are checked.
    pub evaluation_interval_ms: u64,
    /// An alert still firing is notified again this often (0: never).
    pub renotify_interval_secs: u64,
    /// After a resolution the same alert cannot fire again for this long.
    pub cooldown_secs: u64,
    /// Analytics events waiting for the rules; beyond it they are dropped.
    pub queue_capacity: usize,
    /// Default webhook sink (empty: none).
    pub webhook_url: String,
    /// Body format of the default webhook.
    pub webhook_format: Format,
    /// Link put into Alertmanager's `generatorURL`.
    pub generator_url: String,
    /// Also log every notification.
    pub log: bool,
    /// The rules and their thresholds.
    pub rules: RulesConfig,
    /// More sinks.
    pub sinks: Vec<SinkConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            evaluation_interval_ms: 1_000,
            renotify_interval_secs: 3_600,
            cooldown_secs: 300,
            queue_capacity: 4_096,
            webhook_url: String::new(),
            webhook_format: Format::Webhook,
            generator_url: String::new(),
            log: true,
            rules: RulesConfig::default(),
            sinks: Vec::new(),
        }
    }
}

impl AlertsConfig {
    /// Checks the rules and sinks.
    pub fn validate(&self) -> Result<(), String> {
        self.rules.validate()?;
        for s in self.sinks.iter().filter(|s| s.kind == SinkKind::Webhook) {
            if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                return Err(format!(
                    "alerts.sinks: url {:?} must be an http(s) URL",
                    s.url
                ));
            }
            if !s.ca_path.is_empty() && !s.url.starts_with("https://") {
                return Err(format!(
                    "alerts.sinks: ca_path is set but url {:?} is not https://",
                    s.url
                ));
            }
        }
        Ok(())
    }

    /// Every sink: the log, the default webhook, the configured ones.
    fn all_sinks(&self) -> Vec<(String, SinkConfig)> {
        let mut out = Vec::new();
        if self.log {
            out.push((
                "log".to_owned(),
                SinkConfig {
                    kind: SinkKind::Log,
                    ..Default::default()
                },
            ));
        }
        if !self.webhook_url.is_empty() {
            out.push((
                "webhook".to_owned(),
                SinkConfig {
                    url: self.webhook_url.clone(),
                    format: self.webhook_format,
                    ..Default::default()
                },
            ));
        }
        for (i, s) in self.sinks.iter().enumerate() {
            out.push((format!("sink{i}"), s.clone()));
        }
        out
    }
}

/// Counters of the alert task.
#[derive(Debug, Default)]
pub struct AlertMetrics {
    /// Inputs dropped because the queue was full.
    pub inputs_dropped: AtomicU64,
    /// Transitions to firing.
    pub fired: AtomicU64,
    /// Transitions to resolved.
    pub resolved: AtomicU64,
    /// Failed writes of alert rows.
    pub write_failures: AtomicU64,
    /// Firing alerts read back at start-up whose rule is unknown.
    pub restore_skipped: AtomicU64,
    /// Fleet rounds (`repeat_offender`) the rules have applied.
    pub fleet_rounds: AtomicU64,
    /// Fleet rounds whose query failed.
    pub fleet_round_failures: AtomicU64,
}

/// Submits analytics events to the alert task. Cheap to clone.
#[derive(Clone)]
pub struct AlertHandle {
    tx: mpsc::Sender<AlertInput>,
    metrics: Arc<AlertMetrics>,
    sinks: Vec<SinkHandle>,
}

impl AlertHandle {
    /// Queues `input`; never waits.
    pub fn submit(&self, input: AlertInput) {
        if self.tx.try_send(input).is_err() {
            self.metrics.inputs_dropped.fetch_add(1, Relaxed);
        }
    }

    /// Counters.
    pub fn metrics(&self) -> &AlertMetrics {
        &self.metrics
    }

    /// The sinks (for their counters).
    pub fn sinks(&self) -> &[SinkHandle] {
        &self.sinks
    }
}

/// Starts the alert task and its sinks.
pub fn spawn_alerts(
    cfg: AlertsConfig,
    writer: WriterHandle,
    firing: Vec<crate::store::analytics::AlertReadRow>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(AlertHandle, tokio::task::JoinHandle<()>), rankscope_proto::tls::TlsError> {
    let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
    let metrics = Arc::new(AlertMetrics::default());
    let sinks: Vec<SinkHandle> = cfg
        .all_sinks()
        .into_iter()
        .map(|(name, s)| Ok(sink::spawn_sink(name, s, cfg.generator_url.clone())?.0))
        .collect::<Result<_, rankscope_proto::tls::TlsError>>()?;
    let mut engine = Engine::new(
        cfg.renotify_interval_secs.saturating_mul(1_000_000_000),
        cfg.cooldown_secs.saturating_mul(1_000_000_000),
    );
    let now = now_ns();
    for row in firing {
        match restored_alert(row) {
            Some(a) => engine.restore(a, now),
            None => {
                metrics.restore_skipped.fetch_add(1, Relaxed);
            }
        }
    }
    let task = AlertTask {
        engine,
        rules: Rules::new(cfg.rules.clone()),
        writer,
        sinks: sinks.clone(),
        metrics: metrics.clone(),
        tick: Duration::from_millis(cfg.evaluation_interval_ms.max(1)),
    };
    let handle = tokio::spawn(task.run(rx, shutdown));
    Ok((AlertHandle { tx, metrics, sinks }, handle))
}

struct AlertTask {
    engine: Engine,
    rules: Rules,
    writer: WriterHandle,
    sinks: Vec<SinkHandle>,
    metrics: Arc<AlertMetrics>,
    tick: Duration,
}

impl AlertTask {
    async fn run(mut self, mut rx: mpsc::Receiver<AlertInput>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                input = rx.recv() => match input {
                    Some(input) => {
                        let round = matches!(input, AlertInput::FleetRound { .. });
                        let out = self.rules.apply(input, &mut self.engine, now_ns());
                        self.emit(out);
                        if round {
                            self.metrics.fleet_rounds.fetch_add(1, Relaxed);
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    let out = self.engine.tick(now_ns());
                    self.emit(out);
                }
            }
        }
    }

    fn emit(&self, transitions: Vec<Transition>) {
        if transitions.is_empty() {
            return;
        }
        let now = now_ns();
        let mut rows = RowSet::default();
        for t in &transitions {
            match t {
                Transition::Firing(_) => self.metrics.fired.fetch_add(1, Relaxed),
                Transition::Resolved(_) => self.metrics.resolved.fetch_add(1, Relaxed),
                Transition::Renotify(_) => 0,
            };
            if t.stored() {
                rows.alerts.push(alert_row(t.alert(), now));
            }
            for s in &self.sinks {
                s.notify(t);
            }
        }
        if rows.is_empty() {
            return;
        }
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        tokio::spawn(async move {
            if let Err(e) = writer.write(rows).await {
                metrics.write_failures.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "storing alert transitions failed");
            }
        });
    }
}

/// A firing alert read back from the `alerts` table; `None` for a rule this
/// collector does not know (the table outlives a downgrade).
fn restored_alert(row: crate::store::analytics::AlertReadRow) -> Option<Alert> {
    let rule = rules::RULE_NAMES.iter().find(|r| **r == row.rule)?;
    Some(Alert {
        key: AlertKey {
            job: row.job_id,
            rule,
            rank: row.rank,
        },
        severity: row.severity,
        state: AlertState::Firing,
        started_at_ns: row.started_at_ns,
        resolved_at_ns: 0,
        evidence: Evidence {
            node: row.node,
            summary: row.summary,
            fields: serde_json::from_str(&row.evidence).unwrap_or(serde_json::Value::Null),
        },
    })
}

/// The `alerts` row of a transition.
fn alert_row(a: &Alert, now: u64) -> AlertRow {
    AlertRow {
        job_id: a.key.job.clone(),
        rule: a.key.rule.to_owned(),
        rank: a.key.rank,
        node: a.evidence.node.clone(),
        severity: a.severity.clone(),
        state: match a.state {
            AlertState::Firing => 1,
            AlertState::Resolved => 2,
        },
        started_at_ns: a.started_at_ns,
        resolved_at_ns: a.resolved_at_ns,
        transition_ns: now,
        summary: a.evidence.summary.clone(),
        evidence: a.evidence.fields.to_string(),
    }
}
