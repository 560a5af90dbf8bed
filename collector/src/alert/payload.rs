//! Notification bodies: the generic webhook JSON, an Alertmanager
//! `POST /api/v2/alerts` body, and a Slack incoming-webhook message.
//!
//! In: a [`Transition`]. Out: the JSON body for the sink's format. Pure.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::engine::{AlertState, Transition};

/// Body format of a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `{"version": "1", "status", "repeat", "alert": {...}}`.
    #[default]
    Webhook,
    /// Alertmanager API v2: a JSON array of one alert with labels,
    /// annotations, `startsAt` and (when resolved) `endsAt`.
    Alertmanager,
    /// Slack incoming webhook: `{"text": "..."}`.
    Slack,
}

/// The body for `format`.
pub fn body(format: Format, t: &Transition, generator_url: &str) -> Value {
    let a = t.alert();
    let repeat = matches!(t, Transition::Renotify(_));
    match format {
        Format::Webhook => json!({
            "version": "1",
            "status": a.state.as_str(),
            "repeat": repeat,
            "alert": {
                "job": a.key.job,
                "rule": a.key.rule,
                "rank": (a.key.rank >= 0).then_some(a.key.rank),
                "node": a.evidence.node,
                "severity": a.severity,
                "state": a.state.as_str(),
                "started_at_ns": a.started_at_ns,
                "resolved_at_ns": (a.resolved_at_ns > 0).then_some(a.resolved_at_ns),
                "summary": a.evidence.summary,
                "evidence": a.evidence.fields,
            },
        }),
        Format::Alertmanager => {
            let mut labels = json!({
                "alertname": alert_name(a.key.rule),
                "job": a.key.job,
                "rule": a.key.rule,
                "severity": a.severity,
                "source": "rankscope",
            });
            if a.key.rank >= 0 {
                labels["rank"] = json!(a.key.rank.to_string());
            }
            if !a.evidence.node.is_empty() {
                labels["node"] = json!(a.evidence.node);
            }
            let mut alert = json!({
                "labels": labels,
                "annotations": {
                    "summary": a.evidence.summary,
                    "evidence": a.evidence.fields.to_string(),
                },
                "startsAt": rfc3339(a.started_at_ns),
                "generatorURL": generator_url,
            });
            if a.state == AlertState::Resolved {
                alert["endsAt"] = json!(rfc3339(a.resolved_at_ns));
            }
            json!([alert])
        }
        Format::Slack => {
            let icon = match (a.state, a.severity.as_str()) {
                (AlertState::Resolved, _) => ":white_check_mark:",
                (_, "critical") => ":rotating_light:",
                _ => ":warning:",
            };
            json!({
                "text": format!(
                    "{icon} [{}{}] {} / {}: {}",
                    a.state.as_str().to_uppercase(),
                    if repeat { ", repeat" } else { "" },
                    a.key.job,
                    a.key.rule,
                    a.evidence.summary
                )
            })
        }
    }
}

/// `straggler` -> `RankscopeStraggler`.
fn alert_name(rule: &str) -> String {
    let mut out = String::from("Rankscope");
    for part in rule.split('_') {
        let mut c = part.chars();
        if let Some(f) = c.next() {
            out.extend(f.to_uppercase());
            out.push_str(c.as_str());
        }
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for ns since the Unix epoch.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = crate::civil::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        (ns / 1_000_000) % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::engine::{Alert, AlertKey, Evidence};

    fn alert(state: AlertState) -> Alert {
        Alert {
            key: AlertKey {
                job: "llm".into(),
                rule: "low_gpu_utilization",
                rank: 5,
            },
            severity: "warning".into(),
            state,
            started_at_ns: 1_700_000_000_123_000_000,
            resolved_at_ns: if state == AlertState::Resolved {
                1_700_000_060_000_000_000
            } else {
                0
            },
            evidence: Evidence {
                node: "gpu-node-3".into(),
                summary: "low".into(),
                fields: json!({"mean_gpu_util_pct": 12.5}),
            },
        }
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(1_700_000_000_123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
    }

    #[test]
    fn webhook_body() {
        let b = body(
            Format::Webhook,
            &Transition::Firing(alert(AlertState::Firing)),
            "",
        );
        assert_eq!(b["status"], "firing");
        assert_eq!(b["alert"]["rank"], 5);
        assert_eq!(b["alert"]["resolved_at_ns"], Value::Null);
        assert_eq!(b["alert"]["evidence"]["mean_gpu_util_pct"], 12.5);
    }

    #[test]
    fn alertmanager_body() {
        let t = Transition::Resolved(alert(AlertState::Resolved));
        let b = body(Format::Alertmanager, &t, "http://c:7701/api/v1/alerts");
        let a = &b[0];
        assert_eq!(a["labels"]["alertname"], "RankscopeLowGpuUtilization");
        assert_eq!(a["labels"]["rank"], "5");
        assert_eq!(a["labels"]["node"], "gpu-node-3");
        assert_eq!(a["startsAt"], "2023-11-14T22:13:20.123Z");
        assert_eq!(a["endsAt"], "2023-11-14T22:14:20.000Z");
        let firing = body(
            Format::Alertmanager,
            &Transition::Firing(alert(AlertState::Firing)),
            "",
        );
        assert!(firing[0].get("endsAt").is_none());
    }

    #[test]
    fn slack_body() {
        let b = body(
            Format::Slack,
            &Transition::Renotify(alert(AlertState::Firing)),
            "",
        );
        assert_eq!(
            b["text"],
            ":warning: [FIRING, repeat] llm / low_gpu_utilization: low"
        );
    }
}
