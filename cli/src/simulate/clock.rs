//! `rankscope simulate --node-clock-offset NODE:+3ms`: a node whose clock is
//! off. Every timestamp of the node's ranks is shifted by the offset, as a
//! node whose clock runs ahead (+) or behind (-) would stamp its events;
//! the model itself (who waits for whom) is unchanged, so the true offset
//! is what `rankscope clocks` must find.
//!
//! In: `NODE:OFFSET` strings; NODE is a node index (node `i` holds ranks
//! `i * ranks_per_node ..`, named `sim-node-i`) or a node name of
//! `--placement`; OFFSET has a required sign and a unit `ns`, `us` or `ms`
//! (`+3ms`, `-250us`, `+1.5ms`). Out: per rank, the shift in ns.

use std::str::FromStr;

use rankscope_proto::v1 as proto;

use super::{ConfigError, SimConfig};

/// One node's clock offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClockOffset {
    /// Node index (digits) or node name.
    pub node: String,
    /// Offset added to every timestamp of the node, ns.
    pub offset_ns: i64,
}

impl FromStr for NodeClockOffset {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            ConfigError::ClockOffset(format!(
                "--node-clock-offset {s:?}: {why} (e.g. 2:+3ms, node-07:-250us)"
            ))
        };
        let (node, off) = s.rsplit_once(':').ok_or_else(|| bad("not NODE:OFFSET"))?;
        let node = node.trim();
        if node.is_empty() {
            return Err(bad("the node is empty"));
        }
        let off = off.trim();
        let sign = match off.chars().next() {
            Some('+') => 1.0,
            Some('-') => -1.0,
            _ => return Err(bad("the offset needs a sign, + or -")),
        };
        let body = &off[1..];
        let (num, scale) = if let Some(n) = body.strip_suffix("ns") {
            (n, 1.0)
        } else if let Some(n) = body.strip_suffix("us") {
            (n, 1e3)
        } else if let Some(n) = body.strip_suffix("ms") {
            (n, 1e6)
        } else {
            return Err(bad("the offset needs a unit: ns, us or ms"));
        };
        let v: f64 = num.parse().map_err(|_| bad("the offset is not a number"))?;
        let ns = sign * v * scale;
        if !ns.is_finite() || ns.abs() > 3.6e12 {
            return Err(bad("the offset must be finite and at most an hour"));
        }
        Ok(Self {
            node: node.to_string(),
            offset_ns: ns.round() as i64,
        })
    }
}

/// The node name rank `rank` reports.
pub fn node_of(cfg: &SimConfig, rank: u32) -> String {
    match cfg.placed(rank) {
        Some(p) => p.node.clone(),
        None => format!("sim-node-{}", rank / cfg.ranks_per_node.max(1)),
    }
}

/// The node name an offset's NODE means.
fn resolve(node: &str) -> String {
    if node.bytes().all(|b| b.is_ascii_digit()) {
        format!("sim-node-{node}")
    } else {
        node.to_string()
    }
}

/// Checks that every offset names a node of the job, once.
pub fn check(cfg: &SimConfig) -> Result<(), ConfigError> {
    let nodes: std::collections::BTreeSet<String> =
        (0..cfg.ranks).map(|r| node_of(cfg, r)).collect();
    for (i, o) in cfg.node_clock_offsets.iter().enumerate() {
        let name = resolve(&o.node);
        if !nodes.contains(&name) {
            return Err(ConfigError::ClockOffset(format!(
                "--node-clock-offset: node {} ({name}) is not a node of the job (it has {}: {})",
                o.node,
                nodes.len(),
                nodes.iter().take(4).cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        if cfg.node_clock_offsets[..i]
            .iter()
            .any(|p| resolve(&p.node) == name)
        {
            return Err(ConfigError::ClockOffset(format!(
                "--node-clock-offset: node {name} is given more than once"
            )));
        }
    }
    Ok(())
}

/// Per rank, the shift of its timestamps, ns (empty when no node is off).
pub fn shifts(cfg: &SimConfig) -> Vec<i64> {
    if cfg.node_clock_offsets.is_empty() {
        return Vec::new();
    }
    (0..cfg.ranks)
        .map(|r| {
            let node = node_of(cfg, r);
            cfg.node_clock_offsets
                .iter()
                .find(|o| resolve(&o.node) == node)
                .map_or(0, |o| o.offset_ns)
        })
        .collect()
}

fn shift(ts_ns: u64, d: i64) -> u64 {
    ts_ns.saturating_add_signed(d)
}

/// Shifts every timestamp of `event` by `d` ns.
pub fn shift_event(event: &mut proto::Event, d: i64) {
    use proto::event::Kind;
    match &mut event.kind {
        Some(Kind::StepBegin(b)) => b.ts_ns = shift(b.ts_ns, d),
        Some(Kind::StepEnd(e)) => e.ts_ns = shift(e.ts_ns, d),
        Some(Kind::Span(s)) => (s.start_ns, s.end_ns) = (shift(s.start_ns, d), shift(s.end_ns, d)),
        Some(Kind::Collective(c)) => {
            (c.start_ns, c.end_ns) = (shift(c.start_ns, d), shift(c.end_ns, d));
        }
        Some(Kind::Kernel(k)) => {
            (k.start_ns, k.end_ns) = (shift(k.start_ns, d), shift(k.end_ns, d));
            if k.launch_start_ns != 0 || k.launch_end_ns != 0 {
                k.launch_start_ns = shift(k.launch_start_ns, d);
                k.launch_end_ns = shift(k.launch_end_ns, d);
            }
        }
        Some(Kind::MemorySample(m)) => m.ts_ns = shift(m.ts_ns, d),
        Some(_) | None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_with_sign_and_unit() {
        let p = |s: &str| s.parse::<NodeClockOffset>();
        assert_eq!(p("2:+3ms").unwrap().offset_ns, 3_000_000);
        assert_eq!(p("2:+3ms").unwrap().node, "2");
        assert_eq!(p("node-07:-250us").unwrap().offset_ns, -250_000);
        assert_eq!(p("x:+1.5ms").unwrap().offset_ns, 1_500_000);
        assert_eq!(p("x:-40ns").unwrap().offset_ns, -40);
        for (bad, why) in [
            ("2:3ms", "needs a sign"),
            ("2:+3", "needs a unit"),
            ("2:+3s", "needs a unit"),
            ("+3ms", "not NODE:OFFSET"),
            (":+3ms", "node is empty"),
            ("2:+xms", "not a number"),
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn an_offset_names_a_node_of_the_job_once() {
        let mut cfg = SimConfig {
            ranks: 16,
            ranks_per_node: 4,
            node_clock_offsets: vec!["2:+3ms".parse().unwrap()],
            ..SimConfig::default()
        };
        cfg.validate().unwrap();
        let s = shifts(&cfg);
        assert_eq!(s[7], 0);
        assert!(s[8..12].iter().all(|d| *d == 3_000_000));
        assert_eq!(s[12], 0);
        cfg.node_clock_offsets = vec!["4:+3ms".parse().unwrap()];
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("sim-node-4") && e.contains("not a node"), "{e}");
        cfg.node_clock_offsets = vec![
            "1:+3ms".parse().unwrap(),
            "sim-node-1:-1ms".parse().unwrap(),
        ];
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("more than once"));
    }

    #[test]
    fn only_the_nodes_ranks_move_and_their_steps_keep_their_shape() {
        let base = SimConfig {
            ranks: 4,
            ranks_per_node: 2,
            steps: 3,
            layers: 2,
            ..SimConfig::default()
        };
        let off = SimConfig {
            node_clock_offsets: vec!["1:-250us".parse().unwrap()],
            ..base.clone()
        };
        let (a, b) = (super::super::plan(&base), super::super::plan(&off));
        for (sa, sb) in a.steps.iter().zip(&b.steps) {
            for (ra, rb) in sa.ranks.iter().zip(&sb.ranks) {
                let d = if ra.rank >= 2 { -250_000 } else { 0 };
                assert_eq!(rb.start_ns as i64 - ra.start_ns as i64, d);
                assert_eq!(rb.end_ns as i64 - ra.end_ns as i64, d);
                for (ea, eb) in ra.events.iter().zip(&rb.events) {
                    let (sa, sb) = (
                        super::super::model::event_start_ns(ea),
                        super::super::model::event_start_ns(eb),
                    );
                    assert_eq!(sb as i64 - sa as i64, d, "{eb:?}");
                }
            }
        }
    }
}
