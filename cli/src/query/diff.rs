//! `rankscope diff --job J --rank A (--vs-rank B | --vs-job K) [--steps A..B]`:
//! one rank's kernels against another's (`GET /api/v1/jobs/{job}/diff`).

use serde_json::Value;

use super::columns::{col, Column, Kind};
use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// Table and CSV columns.
pub const DIFF: &[Column] = &[
    col("category", "category", Kind::Plain),
    col("name", "name", Kind::Name),
    col("ns_per_step_a", "a_ms/step", Kind::NsAsMs),
    col("ns_per_step_b", "b_ms/step", Kind::NsAsMs),
    col("diff_ns_per_step", "diff_ms/step", Kind::NsAsMs),
    col("calls_per_step_a", "a_calls/step", Kind::Float2),
    col("calls_per_step_b", "b_calls/step", Kind::Float2),
    col("only_on", "only_on", Kind::Plain),
];

/// `A..B` (inclusive) as (A, B); an error names what is wrong.
pub fn parse_steps(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("--steps {s:?}: expected A..B (e.g. 10..20)"))?;
    let a: u64 = a
        .parse()
        .map_err(|_| format!("--steps {s:?}: {a:?} is not a step number"))?;
    let b: u64 = b
        .parse()
        .map_err(|_| format!("--steps {s:?}: {b:?} is not a step number"))?;
    if a > b {
        return Err(format!("--steps {s:?}: empty step range ({a} > {b})"));
    }
    Ok((a, b))
}

/// What to compare with.
#[derive(Debug, Clone, Default)]
pub struct DiffQuery {
    pub rank: u32,
    pub vs_rank: Option<u32>,
    pub vs_job: Option<String>,
    pub steps: Option<(u64, u64)>,
}

/// The whole answer.
pub async fn fetch(
    client: &HttpClient,
    collector: &str,
    job: &str,
    q: &DiffQuery,
) -> Result<Value, HttpError> {
    let mut url = format!(
        "{}/api/v1/jobs/{}/diff?rank={}",
        collector.trim_end_matches('/'),
        percent_encode(job),
        q.rank
    );
    if let Some(r) = q.vs_rank {
        url.push_str(&format!("&vs_rank={r}"));
    }
    if let Some(j) = &q.vs_job {
        url.push_str(&format!("&vs_job={}", percent_encode(j)));
    }
    if let Some((a, b)) = q.steps {
        url.push_str(&format!("&from_step={a}&to_step={b}"));
    }
    client.get_json(&url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ranges_parse_or_say_why_not() {
        assert_eq!(parse_steps("3..9"), Ok((3, 9)));
        assert_eq!(parse_steps("4..4"), Ok((4, 4)));
        assert!(parse_steps("9..3")
            .unwrap_err()
            .contains("empty step range"));
        assert!(parse_steps("x..3")
            .unwrap_err()
            .contains("not a step number"));
        assert!(parse_steps("3").unwrap_err().contains("expected A..B"));
    }
}
