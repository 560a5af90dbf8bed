//! Expanding the paths a user gives into trace files.
//!
//! In: files and folders. Out: the files to import, sorted and without
//! duplicates. A file named on the command line is always taken (importing
//! it reports any problem); a folder contributes its `*.json` and
//! `*.json.gz` files (not recursively), except JSON objects that are
//! plainly not traces (see [`looks_like_trace`]), such as an
//! `expected-hta.json` results file next to the traces.

use std::path::{Path, PathBuf};

use super::source::looks_like_trace;
use super::{ImportError, Problem};

/// Whether `path` has a trace file name (`.json` or `.json.gz`).
fn is_trace_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".json") || name.ends_with(".json.gz")
}

/// The trace files under `paths` (see the module doc).
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ImportError> {
    let mut out = Vec::new();
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
        out.extend(found);
    }
    out.sort();
    out.dedup();
    Ok(out)
}
