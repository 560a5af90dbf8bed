//! What a simulation run sent and how the agent answered, and its rendering.
//!
//! In: counters from the rank streams. Out: a table for people or one JSON
//! object for scripts (pure functions, no I/O).

use super::EventCounts;
use serde::Serialize;
use std::fmt::Write as _;

/// Output format of the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SummaryFormat {
    /// Aligned key/value lines.
    #[default]
    Table,
    /// One JSON object.
    Json,
}

/// Outcome of `rankscope simulate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimSummary {
    /// Job id the ranks reported.
    pub job: String,
    /// Agent the streams went to.
    pub agent: String,
    /// World size.
    pub ranks: u32,
    /// Nodes the ranks span.
    pub nodes: u32,
    /// Steps per rank.
    pub steps: u64,
    /// Events sent, by kind.
    pub sent_by_kind: EventCounts,
    /// Events sent, all kinds.
    pub events_sent: u64,
    /// Events the agent accepted into its queue.
    pub accepted: u64,
    /// Events the agent dropped (queue full).
    pub dropped: u64,
    /// Events in messages in flight when a stream to the agent broke (the
    /// agent restarted or went away); never resent.
    pub lost_disconnected: u64,
    /// Streams that broke and were opened again.
    pub disconnects: u64,
    /// RankMessages sent.
    pub messages_sent: u64,
    /// RankMessages the agent rejected.
    pub messages_rejected: u64,
    /// The first rejection's code and message.
    pub first_rejection: Option<String>,
    /// Wall time from the first connection to the last ack, seconds.
    pub elapsed_s: f64,
    /// events_sent / elapsed_s.
    pub events_per_s: f64,
}

impl SimSummary {
    /// Renders the summary.
    pub fn render(&self, format: SummaryFormat) -> String {
        match format {
            SummaryFormat::Json => {
                // Serialising plain numbers and strings cannot fail.
                serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
            }
            SummaryFormat::Table => self.table(),
        }
    }

    fn table(&self) -> String {
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        let rows: Vec<(&str, String)> = vec![
            ("job", self.job.clone()),
            ("agent", self.agent.clone()),
            (
                "ranks",
                format!(
                    "{} on {} node{}",
                    self.ranks,
                    self.nodes,
                    plural(self.nodes)
                ),
            ),
            ("steps", self.steps.to_string()),
            (
                "events sent",
                format!(
                    "{} (steps {}, spans {}, collectives {}, kernels {})",
                    self.events_sent,
                    self.sent_by_kind.steps,
                    self.sent_by_kind.spans,
                    self.sent_by_kind.collectives,
                    self.sent_by_kind.kernels
                ),
            ),
            ("accepted", self.accepted.to_string()),
            ("dropped", self.dropped.to_string()),
            (
                "lost",
                format!(
                    "{} in flight over {} broken stream(s)",
                    self.lost_disconnected, self.disconnects
                ),
            ),
            (
                "messages",
                format!(
                    "{} sent, {} rejected",
                    self.messages_sent, self.messages_rejected
                ),
            ),
            (
                "elapsed",
                format!(
                    "{:.3} s ({:.0} events/s)",
                    self.elapsed_s, self.events_per_s
                ),
            ),
        ];
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "{k:<12} {v}");
        }
        if let Some(first) = &self.first_rejection {
            let _ = writeln!(out, "{:<12} {first}", "rejection");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SimSummary {
        SimSummary {
            job: "j".into(),
            agent: "http://127.0.0.1:7710".into(),
            ranks: 8,
            nodes: 1,
            steps: 2,
            sent_by_kind: EventCounts {
                steps: 32,
                spans: 64,
                collectives: 40,
                kernels: 64,
            },
            events_sent: 200,
            accepted: 190,
            dropped: 10,
            lost_disconnected: 0,
            disconnects: 0,
            messages_sent: 8,
            messages_rejected: 1,
            first_rejection: Some("code 3: bad".into()),
            elapsed_s: 0.5,
            events_per_s: 400.0,
        }
    }

    #[test]
    fn table_lists_counts_and_rejection() {
        let t = sample().render(SummaryFormat::Table);
        let expected = "\
job          j
agent        http://127.0.0.1:7710
ranks        8 on 1 node
steps        2
events sent  200 (steps 32, spans 64, collectives 40, kernels 64)
accepted     190
dropped      10
lost         0 in flight over 0 broken stream(s)
messages     8 sent, 1 rejected
elapsed      0.500 s (400 events/s)
rejection    code 3: bad
";
        assert_eq!(t, expected);
    }

    #[test]
    fn json_has_flat_counters() {
        let v: serde_json::Value =
            serde_json::from_str(&sample().render(SummaryFormat::Json)).unwrap();
        assert_eq!(v["events_sent"], 200);
        assert_eq!(v["messages_rejected"], 1);
        assert_eq!(v["sent_by_kind"]["collectives"], 40);
        assert_eq!(v["first_rejection"], "code 3: bad");
    }
}
