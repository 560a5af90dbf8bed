//! `rankscope memory --events` on the real torch CPU set: the events'
//! operators and totals agree with the plugin-equal memory table and peaks.

use std::collections::BTreeMap;

use serde_json::Value;

use super::common::*;
use super::{get, status};

/// `memory?events=true` on the torch CPU set: per rank, Σ bytes of the
/// events attributed to an operator equals that operator's
/// `self_size_increase_bytes` in the plugin-equal table (`v`), the largest
/// Total Allocated after an event is the plugin's peak, pages concatenate,
/// and a `limit` out of range is 400. The CLI prints the same rows.
pub(super) async fn memory_events_agree_with_the_table(stack: &Stack, v: &Value, peak: &[f64; 2]) {
    for r in 0..2u32 {
        let e = stack
            .api_get(&format!(
                "/api/v1/jobs/torchmem/memory?events=true&rank={r}&limit=100000"
            ))
            .await;
        let events = e["events"].as_array().unwrap_or_else(|| panic!("{e}"));
        assert!(!events.is_empty(), "rank {r}: {e}");
        assert_eq!(e["events_total"].as_u64(), Some(events.len() as u64));
        let mut by_op: BTreeMap<String, i64> = BTreeMap::new();
        let mut max_alloc = 0i64;
        for ev in events {
            assert_eq!(
                (ev["rank"].as_u64(), ev["device"].as_str()),
                (Some(r as u64), Some("CPU"))
            );
            *by_op
                .entry(ev["operator"].as_str().unwrap().to_owned())
                .or_default() += ev["bytes"].as_i64().unwrap();
            max_alloc = max_alloc.max(ev["total_allocated_bytes"].as_i64().unwrap());
        }
        assert_eq!(max_alloc as f64, peak[r as usize], "rank {r}");
        let ops: Vec<&Value> = v["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["rank"] == r)
            .collect();
        let mut attributed = 0;
        for (name, sum) in by_op.iter().filter(|(n, _)| !n.is_empty()) {
            let row = ops.iter().find(|o| o["name"] == name.as_str());
            let want = row.map_or(0, |o| o["self_size_increase_bytes"].as_i64().unwrap());
            assert_eq!(*sum, want, "rank {r} operator {name}");
            attributed += 1;
        }
        assert!(
            attributed > 0,
            "rank {r}: no event has an operator: {by_op:?}"
        );
        // Pages.
        let page = |off: usize, n: usize| {
            format!("/api/v1/jobs/torchmem/memory?events=true&rank={r}&offset={off}&limit={n}")
        };
        let a = stack.api_get(&page(0, 10)).await;
        let b = stack.api_get(&page(10, 10)).await;
        let both: Vec<Value> = a["events"]
            .as_array()
            .unwrap()
            .iter()
            .chain(b["events"].as_array().unwrap())
            .cloned()
            .collect();
        assert_eq!(both.as_slice(), &events[..20], "rank {r}");
    }
    for bad in ["limit=0", "limit=100001"] {
        let (s, m) = status(
            get(
                stack,
                &format!("/api/v1/jobs/torchmem/memory?events=true&{bad}"),
            )
            .await,
        );
        assert_eq!(s, 400, "{bad}: {m}");
        assert!(m.contains("limit must be"), "{m}");
    }
    let bin = std::env::current_exe()
        .expect("test exe")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("rankscope");
    let out = std::process::Command::new(&bin)
        .args(["--collector", &format!("http://{}", stack.http_addr())])
        .args([
            "memory", "--job", "torchmem", "--rank", "1", "--events", "--top", "5", "--format",
            "csv",
        ])
        .output()
        .expect("rankscope memory --events");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "a header and 5 events: {text}");
    assert!(
        lines[0].contains("bytes") && lines[0].contains("operator"),
        "{text}"
    );
}
