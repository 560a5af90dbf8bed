//! Rendering of query results: tables for people, JSON and CSV for scripts.
//!
//! In: rows from the API. Out: the text to print (pure functions).
//!
//! Steps table: one row per step. Up to [`MAX_RANK_COLUMNS`] ranks get one
//! column each (step time in ms, 3 decimals) followed by the median and the
//! max/median ratio; wider jobs get summary columns (ranks, min, median, max,
//! max/median). In a synchronous job every rank's step time is the same (the
//! others wait in collectives), so the slowest step time names no one: with
//! the steps' breakdowns the table shows the rank the others waited for
//! (`waited_for`: the least collective wait, most work on ties), its work
//! (compute + input) over the step's median work, and the others' median
//! wait; a footer names the rank waited for most often. JSON and CSV carry
//! the API's rows unchanged, with the API's field names.

use super::{JobInfo, OutputFormat, StepRow};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Most ranks shown as one column each in the steps table.
pub const MAX_RANK_COLUMNS: usize = 16;

/// Renders the jobs list.
pub fn render_jobs(jobs: &[JobInfo], format: OutputFormat) -> String {
    match format {
        OutputFormat::Table => jobs_table(jobs),
        OutputFormat::Json => json_array(jobs),
        OutputFormat::Csv => jobs_csv(jobs),
    }
}

/// One rank's figures in one step, from the step's breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepWait {
    pub step: u64,
    pub rank: u32,
    /// Compute + input (dataloader) time.
    pub work_ns: u64,
    /// Collective wait (PyTorch Profiler "synchronizing" time).
    pub wait_ns: u64,
}

/// Renders step rows; a table also names who the others waited for, from `waits`.
pub fn render_steps_with(rows: &[StepRow], waits: &[StepWait], format: OutputFormat) -> String {
    match format {
        OutputFormat::Table => steps_table_with(rows, waits),
        _ => render_steps(rows, format),
    }
}

/// Renders step rows.
pub fn render_steps(rows: &[StepRow], format: OutputFormat) -> String {
    match format {
        OutputFormat::Table => steps_table(rows),
        OutputFormat::Json => json_array(rows),
        OutputFormat::Csv => steps_csv(rows),
    }
}

fn json_array<T: serde::Serialize>(rows: &[T]) -> String {
    // Plain structs of strings and integers always serialise.
    serde_json::to_string_pretty(rows).unwrap_or_else(|_| "[]".to_string()) + "\n"
}

/// Jobs as aligned columns.
pub fn jobs_table(jobs: &[JobInfo]) -> String {
    if jobs.is_empty() {
        return "(no jobs)\n".to_string();
    }
    let header = [
        "job",
        "run_id",
        "world_size",
        "ranks_seen",
        "nodes",
        "first_seen_utc",
        "last_seen_utc",
        "last_step",
    ];
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.job.clone(),
                if j.run_id.is_empty() {
                    "-".into()
                } else {
                    j.run_id.clone()
                },
                j.world_size.to_string(),
                j.ranks_seen.to_string(),
                j.nodes.to_string(),
                utc(j.first_seen_ns),
                utc(j.last_seen_ns),
                j.last_step
                    .map_or_else(|| "-".to_string(), |s| s.to_string()),
            ]
        })
        .collect();
    let right = [false, false, true, true, true, false, false, true];
    let mut out = table(&header.map(String::from), &rows, &right);
    for j in jobs {
        for w in &j.warnings {
            let _ = writeln!(out, "warning: job {}: {w}", j.job);
        }
    }
    out
}

/// Jobs as CSV with the API's field names; a null last_step is empty,
/// warnings are joined by `; `.
pub fn jobs_csv(jobs: &[JobInfo]) -> String {
    let mut out = String::from(
        "job,run_id,world_size,ranks_seen,nodes,first_seen_ns,last_seen_ns,last_step,warnings\n",
    );
    for j in jobs {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            csv_field(&j.job),
            csv_field(&j.run_id),
            j.world_size,
            j.ranks_seen,
            j.nodes,
            j.first_seen_ns,
            j.last_seen_ns,
            j.last_step.map_or_else(String::new, |s| s.to_string()),
            csv_field(&j.warnings.join("; "))
        );
    }
    out
}

/// Step rows as CSV with the API's field names.
pub fn steps_csv(rows: &[StepRow]) -> String {
    let mut out = String::from("step,rank,node,start_ns,end_ns,step_time_ns\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{}",
            r.step,
            r.rank,
            csv_field(&r.node),
            r.start_ns,
            r.end_ns,
            r.step_time_ns
        );
    }
    out
}

/// Step times per step, for people (no breakdowns: nobody is named).
pub fn steps_table(rows: &[StepRow]) -> String {
    steps_table_with(rows, &[])
}

/// Who the others waited for in one step: (rank, its work / median work,
/// the others' median wait in ns).
fn waited_for(waits: &[&StepWait]) -> Option<(u32, f64, f64)> {
    if waits.len() < 2 {
        return None;
    }
    let who = waits
        .iter()
        .min_by(|a, b| a.wait_ns.cmp(&b.wait_ns).then(b.work_ns.cmp(&a.work_ns)))?;
    let mut work: Vec<u64> = waits.iter().map(|w| w.work_ns).collect();
    work.sort_unstable();
    let median_work = work[work.len() / 2] as f64;
    let mut others: Vec<u64> = waits
        .iter()
        .filter(|w| w.rank != who.rank)
        .map(|w| w.wait_ns)
        .collect();
    others.sort_unstable();
    let others_wait = others[others.len() / 2] as f64;
    let ratio = if median_work > 0.0 {
        who.work_ns as f64 / median_work
    } else {
        1.0
    };
    Some((who.rank, ratio, others_wait))
}

/// Step times per step, with who the others waited for.
pub fn steps_table_with(rows: &[StepRow], waits: &[StepWait]) -> String {
    if rows.is_empty() {
        return "(no steps)\n".to_string();
    }
    let mut by_step: BTreeMap<u64, BTreeMap<u32, u64>> = BTreeMap::new();
    for r in rows {
        by_step
            .entry(r.step)
            .or_default()
            .insert(r.rank, r.step_time_ns);
    }
    let ranks: Vec<u32> = {
        let mut all: Vec<u32> = rows.iter().map(|r| r.rank).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let wide = ranks.len() > MAX_RANK_COLUMNS;
    let mut header = vec!["step".to_string()];
    if wide {
        header.extend(["ranks", "min_ms", "median_ms", "max_ms"].map(String::from));
    } else {
        header.extend(ranks.iter().map(|r| format!("r{r}_ms")));
        header.push("median_ms".into());
    }
    header.extend(
        [
            "max/median",
            "waited_for",
            "its_work/median",
            "others_wait_ms",
        ]
        .map(String::from),
    );

    let mut by_step_waits: BTreeMap<u64, Vec<&StepWait>> = BTreeMap::new();
    for w in waits {
        by_step_waits.entry(w.step).or_default().push(w);
    }
    let mut waited: BTreeMap<u32, (u64, f64, f64)> = BTreeMap::new();
    let mut table_rows = Vec::with_capacity(by_step.len());
    for (step, times) in &by_step {
        let stats = StepStats::of(times);
        let mut row = vec![step.to_string()];
        if wide {
            row.push(times.len().to_string());
            row.extend([ms(stats.min_ns), ms_f(stats.median_ns), ms(stats.max_ns)]);
        } else {
            row.extend(
                ranks
                    .iter()
                    .map(|r| times.get(r).map_or_else(|| "-".to_string(), |&t| ms(t))),
            );
            row.push(ms_f(stats.median_ns));
        }
        row.push(ratio(stats.max_ns, stats.median_ns));
        match by_step_waits.get(step).and_then(|w| waited_for(w)) {
            Some((rank, work, others)) => {
                let e = waited.entry(rank).or_default();
                e.0 += 1;
                e.1 += work;
                e.2 += others;
                row.extend([format!("r{rank}"), format!("{work:.3}"), ms_f(others)]);
            }
            None => row.extend(["-", "-", "-"].map(String::from)),
        }
        table_rows.push(row);
    }
    let right = vec![true; header.len()];
    let mut out = table(&header, &table_rows, &right);
    match waited
        .iter()
        .max_by_key(|(r, e)| (e.0, std::cmp::Reverse(**r)))
    {
        Some((rank, (n, work, others))) => {
            let k = *n as f64;
            let _ = writeln!(
                out,
                "the others waited for r{rank} in {n} of {} steps (its compute + input {:.2}x the median; the others' median wait {} ms per step)",
                by_step.len(),
                work / k,
                ms_f(others / k)
            );
        }
        None => out.push_str(
            "(no breakdowns for these steps yet: the rank the others wait for is named once the steps are analysed)\n",
        ),
    }
    out
}

/// Summary of one step across ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StepStats {
    min_ns: u64,
    max_ns: u64,
    median_ns: f64,
}

impl StepStats {
    /// `times` is non-empty (built from at least one row).
    fn of(times: &BTreeMap<u32, u64>) -> Self {
        let mut sorted: Vec<u64> = times.values().copied().collect();
        sorted.sort_unstable();
        let n = sorted.len();
        let median_ns = if n == 0 {
            0.0
        } else if n % 2 == 1 {
            sorted[n / 2] as f64
        } else {
            (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
        };
        Self {
            min_ns: sorted.first().copied().unwrap_or(0),
            max_ns: sorted.last().copied().unwrap_or(0),
            median_ns,
        }
    }
}

fn ms(ns: u64) -> String {
    ms_f(ns as f64)
}

fn ms_f(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

fn ratio(max_ns: u64, median_ns: f64) -> String {
    if median_ns > 0.0 {
        format!("{:.3}", max_ns as f64 / median_ns)
    } else {
        "-".to_string()
    }
}

/// Aligned columns separated by two spaces; `right[i]` right-aligns column i.
pub fn table(header: &[String], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = w - cell.chars().count();
            if right.get(i).copied().unwrap_or(false) {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Quotes a CSV field when it holds a comma, quote or line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in UTC for ns since the Unix epoch.
pub fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{millis:03}",
        rem / 3_600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm, non-negative days only).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
