//! Expanding the paths a user gives into trace files.
//!
//! In: files and folders. Out: the files to import, sorted and without
//! duplicates. A file named on the command line is always taken (importing
//! it reports any problem); a folder contributes its `*.json` and
//! `*.json.gz` files (not recursively), except JSON objects that are
//! plainly not traces (see [`looks_like_trace`]), such as an
//! `expected-hta.json` results file next to the traces.
//!
//! Spans: the PyTorch profiler names a worker's files
//! `<worker>[.<span>].pt.trace.json[.gz]` (the TensorBoard plugin's
//! `WORKER_PATTERN`, `torch_tb_profiler/consts.py`), one file per profiling
//! span. A folder holding several spans of one worker would file them all as
//! the same rank of one job, so [`discover_spans`] takes the latest span of
//! each such worker (by span number, as the plugin orders them) and returns
//! a note naming the file taken and the ones left; naming a span's file on
//! the command line (with its own `--job`) imports it.

use std::path::{Path, PathBuf};

use super::source::looks_like_trace;
use super::{ImportError, Problem};

/// Whether `path` has a trace file name (`.json` or `.json.gz`).
fn is_trace_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".json") || name.ends_with(".json.gz")
}

/// `(worker, span)` of a file named as the PyTorch profiler names spans
/// (module doc); `None` for other names or a name without a span.
fn worker_span(path: &Path) -> Option<(String, u64)> {
    let name = path.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".pt.trace.json.gz")
        .or_else(|| name.strip_suffix(".pt.trace.json"))?;
    let (worker, span) = stem.rsplit_once('.')?;
    if span.is_empty() || !span.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((worker.to_owned(), span.parse().ok()?))
}

/// Of the files of one folder, the latest span of each worker that has
/// several, and a note for each such worker (module doc).
fn latest_spans(found: Vec<PathBuf>, notes: &mut Vec<String>) -> Vec<PathBuf> {
    let mut spans: std::collections::BTreeMap<String, Vec<(u64, PathBuf)>> = Default::default();
    let mut out = Vec::new();
    for f in found {
        match worker_span(&f) {
            Some((w, n)) => spans.entry(w).or_default().push((n, f)),
            None => out.push(f),
        }
    }
    for (worker, mut files) in spans {
        files.sort();
        let (_, last) = files.pop().expect("a worker has a file");
        if !files.is_empty() {
            let left: Vec<String> = files.iter().map(|(_, f)| f.display().to_string()).collect();
            notes.push(format!(
                "worker {worker:?} has {} profiling spans; imported the latest, {}; \
                 not imported: {} (name a file to import it, under another --job)",
                files.len() + 1,
                last.display(),
                left.join(", ")
            ));
        }
        out.push(last);
    }
    out
}

/// The trace files under `paths` (see the module doc).
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ImportError> {
    discover_spans(paths).map(|d| d.0)
}

/// The trace files under `paths` and the notes on the spans left out
/// (module doc).
pub fn discover_spans(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<String>), ImportError> {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| Problem::Io(e).at(path))?;
        if !meta.is_dir() {
            out.push(path.clone());
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|e| Problem::Io(e).at(path))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Problem::Io(e).at(path))?;
            let file = entry.path();
            if file.is_file() && is_trace_name(&file) && looks_like_trace(&file) {
                found.push(file);
            }
        }
        if found.is_empty() {
            return Err(Problem::NoTraceFiles.at(path));
        }
        out.extend(latest_spans(found, &mut notes));
    }
    out.sort();
    out.dedup();
    Ok((out, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_with_several_spans_of_a_worker_takes_the_latest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = br#"{"traceEvents": []}"#;
        for name in [
            "worker0.1700000000100.pt.trace.json",
            "worker0.1700000000200.pt.trace.json.gz",
            "worker0.99.pt.trace.json",
            "worker1.1700000000150.pt.trace.json",
            "rank2.json",
        ] {
            std::fs::write(dir.path().join(name), trace).expect("write");
        }
        assert_eq!(
            worker_span(Path::new("a/w.b.12.pt.trace.json.gz")),
            Some(("w.b".to_owned(), 12))
        );
        assert_eq!(worker_span(Path::new("w.pt.trace.json")), None);
        let (files, notes) = discover_spans(&[dir.path().to_owned()]).expect("discover");
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"worker1.1700000000150.pt.trace.json".to_owned()),
            "{names:?}"
        );
        assert!(names.contains(&"rank2.json".to_owned()), "{names:?}");
        assert!(
            !names.contains(&"worker0.99.pt.trace.json".to_owned()),
            "{names:?}"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("worker \"worker0\""), "{notes:?}");
        assert!(notes[0].contains("worker0.99.pt.trace.json"), "{notes:?}");
    }
}
