//! `rankscope timeline --job J [--steps A..B] [--rank R]... -o FILE[.json|.json.gz]`:
//! the job's events as a Chrome Trace Event file for Perfetto or
//! chrome://tracing (`GET /api/v1/jobs/{job}/timeline`); `.gz` is gzipped.

use std::io::Write;
use std::path::Path;

use super::http::{HttpClient, HttpError};
use super::percent_encode;

/// URL of the timeline route.
pub fn timeline_url(
    collector: &str,
    job: &str,
    steps: Option<(u64, u64)>,
    ranks: &[u32],
) -> String {
    let mut url = format!(
        "{}/api/v1/jobs/{}/timeline",
        collector.trim_end_matches('/'),
        percent_encode(job)
    );
    let mut params = Vec::new();
    if let Some((a, b)) = steps {
        params.push(format!("from_step={a}&to_step={b}"));
    }
    if !ranks.is_empty() {
        let r: Vec<String> = ranks.iter().map(u32::to_string).collect();
        params.push(format!("ranks={}", r.join(",")));
    }
    if !params.is_empty() {
        url.push('?');
        url.push_str(&params.join("&"));
    }
    url
}

/// Fetches the timeline and writes it to `out` (gzip when it ends in
/// `.gz`); returns the number of trace events.
pub async fn export(
    client: &HttpClient,
    collector: &str,
    job: &str,
    steps: Option<(u64, u64)>,
    ranks: &[u32],
    out: &Path,
) -> Result<usize, ExportError> {
    let v: serde_json::Value = client
        .get_json(&timeline_url(collector, job, steps, ranks))
        .await?;
    let n = v["traceEvents"].as_array().map_or(0, Vec::len);
    let bytes = serde_json::to_vec(&v).map_err(|e| ExportError::Write(e.to_string()))?;
    let write = |p: &Path| -> std::io::Result<()> {
        let f = std::fs::File::create(p)?;
        if p.extension().is_some_and(|e| e == "gz") {
            let mut g = flate2::write::GzEncoder::new(f, flate2::Compression::default());
            g.write_all(&bytes)?;
            g.finish()?;
        } else {
            let mut f = std::io::BufWriter::new(f);
            f.write_all(&bytes)?;
            f.flush()?;
        }
        Ok(())
    };
    write(out).map_err(|e| ExportError::Write(format!("{}: {e}", out.display())))?;
    Ok(n)
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("cannot write the timeline: {0}")]
    Write(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_carries_steps_and_ranks() {
        assert_eq!(
            timeline_url("http://c/", "j", Some((3, 9)), &[0, 5]),
            "http://c/api/v1/jobs/j/timeline?from_step=3&to_step=9&ranks=0,5"
        );
        assert_eq!(
            timeline_url("http://c", "a b", None, &[]),
            "http://c/api/v1/jobs/a%20b/timeline"
        );
    }
}
