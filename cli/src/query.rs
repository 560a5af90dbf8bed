//! Query commands (`rankscope jobs`, `rankscope steps`) over the collector's
//! HTTP JSON API.
//!
//! In: the collector's base URL (e.g. `http://127.0.0.1:7701`) and the
//! command's options. Out: the API's rows ([`JobInfo`], [`StepRow`]) and
//! their rendering as a table, JSON or CSV (module `format`, pure).
//!
//! API: `GET /api/v1/jobs` -> `{"jobs": [JobInfo]}`;
//! `GET /api/v1/jobs/{job}/steps?last=&from_step=&to_step=` ->
//! `{"job": J, "steps": [StepRow]}`. The job is percent-encoded in the path;
//! absent options are left out of the query string.

pub mod analytics;
pub mod clocks;
pub mod columns;
pub mod diff;
pub mod fleet;
pub mod format;
pub mod goodput;
pub mod gpu;
pub mod gpus;
pub mod http;
pub mod opsmem;
pub mod timeline;
pub mod traces;
pub mod views;

use http::{HttpClient, HttpError};
use serde::{Deserialize, Serialize};

/// How query results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// A JSON array of row objects.
    Json,
    /// A header line and one line per row.
    Csv,
}

/// One job the collector knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job: String,
    #[serde(default)]
    pub run_id: String,
    pub world_size: u32,
    pub ranks_seen: u32,
    pub nodes: u32,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    pub last_step: Option<u64>,
    /// What the collector found wrong with the job (e.g. its world split
    /// across job ids); absent from older collectors.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One step of one rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRow {
    pub step: u64,
    pub rank: u32,
    #[serde(default)]
    pub node: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub step_time_ns: u64,
}

#[derive(Debug, Deserialize)]
struct JobsResponse {
    jobs: Vec<JobInfo>,
}

/// Body of the steps endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepsResponse {
    pub job: String,
    pub steps: Vec<StepRow>,
}

/// Which steps to ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepsQuery {
    /// Only the last K steps.
    pub last: Option<u64>,
    /// First step (inclusive).
    pub from_step: Option<u64>,
    /// Last step (inclusive).
    pub to_step: Option<u64>,
}

/// URL of the jobs endpoint.
pub fn jobs_url(collector: &str) -> String {
    format!("{}/api/v1/jobs", collector.trim_end_matches('/'))
}

/// URL of the steps endpoint for `job`.
pub fn steps_url(collector: &str, job: &str, q: &StepsQuery) -> String {
    let mut url = format!(
        "{}/api/v1/jobs/{}/steps",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    let params = [
        ("last", q.last),
        ("from_step", q.from_step),
        ("to_step", q.to_step),
    ];
    let mut sep = '?';
    for (key, value) in params {
        if let Some(v) = value {
            url.push(sep);
            url.push_str(&format!("{key}={v}"));
            sep = '&';
        }
    }
    url
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Timeout of [`get_json`]'s request.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// GETs any collector URL and decodes its JSON body (a client with the
/// default timeout; for tests and scripts).
pub async fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> Result<T, HttpError> {
    HttpClient::new(std::time::Duration::from_millis(DEFAULT_TIMEOUT_MS))
        .get_json(url)
        .await
}

/// `GET /api/v1/jobs`.
pub async fn fetch_jobs(client: &HttpClient, collector: &str) -> Result<Vec<JobInfo>, HttpError> {
    let response: JobsResponse = client.get_json(&jobs_url(collector)).await?;
    Ok(response.jobs)
}

/// `GET /api/v1/jobs/{job}/steps`.
pub async fn fetch_steps(
    client: &HttpClient,
    collector: &str,
    job: &str,
    q: &StepsQuery,
) -> Result<StepsResponse, HttpError> {
    client.get_json(&steps_url(collector, job, q)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_url_encodes_the_job_and_skips_absent_options() {
        let q = StepsQuery::default();
        assert_eq!(
            steps_url("http://c:7701/", "sim 1/ä", &q),
            "http://c:7701/api/v1/jobs/sim%201%2F%C3%A4/steps"
        );
        let q = StepsQuery {
            last: Some(5),
            from_step: None,
            to_step: Some(9),
        };
        assert_eq!(
            steps_url("http://c", "j", &q),
            "http://c/api/v1/jobs/j/steps?last=5&to_step=9"
        );
        let q = StepsQuery {
            last: None,
            from_step: Some(1),
            to_step: Some(2),
        };
        assert_eq!(
            steps_url("http://c", "j", &q),
            "http://c/api/v1/jobs/j/steps?from_step=1&to_step=2"
        );
    }

    #[test]
    fn jobs_url_trims_the_slash() {
        assert_eq!(jobs_url("http://c:7701/"), "http://c:7701/api/v1/jobs");
    }

    #[test]
    fn job_info_accepts_null_last_step_and_missing_run_id() {
        let j: JobInfo = serde_json::from_str(
            r#"{"job":"j","world_size":8,"ranks_seen":8,"nodes":1,"first_seen_ns":1,"last_seen_ns":2,"last_step":null}"#,
        )
        .unwrap();
        assert_eq!(j.last_step, None);
        assert_eq!(j.run_id, "");
    }
}

/// Per (step, rank) work and collective wait of `job`'s steps `from..=to`
/// (the matrix route), for the steps table's `waited_for` columns. At most
/// the route's 1,000 steps; a wider range answers an error.
pub async fn fetch_step_waits(
    client: &HttpClient,
    collector: &str,
    job: &str,
    from: u64,
    to: u64,
) -> Result<Vec<format::StepWait>, HttpError> {
    let url = format!(
        "{}/api/v1/jobs/{}/matrix?from_step={from}&to_step={to}&fields=compute_ns,dataloader_ns,comm_wait_ns",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    let v: serde_json::Value = client.get_json(&url).await?;
    Ok(step_waits_of(&v))
}

/// The matrix answer (`values[field][rank_index * steps + step_index]`) as rows.
pub fn step_waits_of(v: &serde_json::Value) -> Vec<format::StepWait> {
    let list = |k: &str| -> Vec<u64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
            .unwrap_or_default()
    };
    let (steps, ranks) = (list("steps"), list("ranks"));
    let col = |f: &str, i: usize| v["values"][f][i].as_u64();
    let mut out = Vec::new();
    for (ri, rank) in ranks.iter().enumerate() {
        for (si, step) in steps.iter().enumerate() {
            let i = ri * steps.len() + si;
            let (Some(c), Some(w)) = (col("compute_ns", i), col("comm_wait_ns", i)) else {
                continue;
            };
            out.push(format::StepWait {
                step: *step,
                rank: u32::try_from(*rank).unwrap_or(u32::MAX),
                work_ns: c + col("dataloader_ns", i).unwrap_or(0),
                wait_ns: w,
            });
        }
    }
    out
}

#[cfg(test)]
mod step_wait_tests {
    use super::*;

    #[test]
    fn the_matrix_answer_becomes_rows_and_gaps_are_skipped() {
        let v = serde_json::json!({
            "steps": [4, 5], "ranks": [0, 7],
            "values": {
                "compute_ns": [10, 11, 20, null],
                "dataloader_ns": [1, 1, 2, null],
                "comm_wait_ns": [5, 6, 0, null]
            }
        });
        let rows = step_waits_of(&v);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[2],
            format::StepWait {
                step: 4,
                rank: 7,
                work_ns: 22,
                wait_ns: 0
            }
        );
    }
}
