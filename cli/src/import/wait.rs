//! After `rankscope import` sent its files: wait until the imported job's
//! analytics are final, so a query right after the command sees them.
//!
//! In: the collector's HTTP API, the job, and how many (step, rank) pairs
//! the import carried (each file's step ends). Out: `Ok` once
//! `GET /api/v1/jobs/{job}/progress` reports at least that many finalized
//! breakdowns, or an error naming how far it got when the timeout passed.
//!
//! A step finalizes when every rank of the job ended it, or
//! `stream.step_timeout_ms` (30 s by default) after the first did: importing
//! only some ranks of a job therefore waits for that timeout. Progress: an
//! indicatif bar on a terminal, else a plain line every 2 s.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::query::http::{HttpClient, HttpError};

/// How the wait ended badly.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("analytics of job {job:?} not final after {secs} s: {done} of {want} (step, rank) breakdowns (the collector finalizes a step when every rank of the job ended it, or stream.step_timeout_ms after the first did)")]
    Timeout {
        job: String,
        secs: u64,
        done: u64,
        want: u64,
    },
    #[error(transparent)]
    Http(#[from] HttpError),
}

/// The (step, rank) pairs an imported file carries: one per step end.
pub fn rank_steps(stats: &rankscope_kineto::ImportStats) -> u64 {
    stats.events_by_kind.step_end
}

/// Waits until `want` (step, rank) breakdowns of `job` are final.
pub async fn until_final(
    http: &HttpClient,
    collector: &str,
    job: &str,
    want: u64,
    timeout: Duration,
    bar: bool,
) -> Result<u64, WaitError> {
    let url = format!(
        "{}/api/v1/jobs/{}/progress",
        collector.trim_end_matches('/'),
        crate::query::percent_encode(job)
    );
    let started = Instant::now();
    let pb = bar.then(|| {
        let pb = ProgressBar::new(want);
        pb.set_style(
            ProgressStyle::with_template(
                "analytics {bar:30} {pos}/{len} (step, rank) final  {elapsed}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    });
    let mut printed = Instant::now();
    loop {
        let done = match http.get_json::<serde_json::Value>(&url).await {
            Ok(v) => v["rank_steps_final"].as_u64().unwrap_or(0),
            // 404 until the first rows of the job are stored.
            Err(HttpError::Status { status: 404, .. }) => 0,
            Err(e) => return Err(e.into()),
        };
        match &pb {
            Some(pb) => pb.set_position(done.min(want)),
            None if printed.elapsed() >= Duration::from_secs(2) => {
                printed = Instant::now();
                eprintln!("analytics: {done} of {want} (step, rank) breakdowns final");
            }
            None => {}
        }
        if done >= want {
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            return Ok(done);
        }
        if started.elapsed() >= timeout {
            if let Some(pb) = pb {
                pb.abandon();
            }
            return Err(WaitError::Timeout {
                job: job.to_owned(),
                secs: timeout.as_secs(),
                done,
                want,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
