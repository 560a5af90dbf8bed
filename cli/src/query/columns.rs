//! Generic rendering of analytics rows (`breakdown`, `ranks`, `collectives`,
//! `stragglers`): the API's JSON objects are passed through for JSON, and a
//! declared column list picks and formats fields for tables and CSV.
//!
//! In: JSON row objects and a `&[Column]`. Out: text. Pure. Missing or null
//! fields print as `-` in tables and empty in CSV; CSV carries raw values
//! under the API's field names.

use serde_json::Value;

use super::format::{csv_field, table};
use super::OutputFormat;

/// How a column's value is shown in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string or an integer as is.
    Plain,
    /// Nanoseconds shown as milliseconds with 3 decimals.
    NsAsMs,
    /// A percentage with 2 decimals.
    Pct,
    /// A float with 2 decimals.
    Float2,
    /// A float with 3 decimals.
    Float3,
    /// Bytes in binary units (KiB, MiB, GiB).
    Bytes,
}

/// One column: API field, table header, format.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub field: &'static str,
    pub header: &'static str,
    pub kind: Kind,
}

/// Shorthand for a [`Column`].
pub const fn col(field: &'static str, header: &'static str, kind: Kind) -> Column {
    Column {
        field,
        header,
        kind,
    }
}

/// Renders `rows` in `format`.
pub fn render(rows: &[Value], columns: &[Column], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => serde_json::to_string_pretty(rows).unwrap_or_default() + "\n",
        OutputFormat::Csv => csv(rows, columns),
        OutputFormat::Table => {
            if rows.is_empty() {
                return "(no rows)\n".to_string();
            }
            let header: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| columns.iter().map(|c| cell(&r[c.field], c.kind)).collect())
                .collect();
            let right: Vec<bool> = columns
                .iter()
                .map(|c| c.kind != Kind::Plain || rows.iter().any(|r| r[c.field].is_number()))
                .collect();
            table(&header, &cells, &right)
        }
    }
}

fn csv(rows: &[Value], columns: &[Column]) -> String {
    let mut out = columns
        .iter()
        .map(|c| c.field)
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for r in rows {
        let line: Vec<String> = columns
            .iter()
            .map(|c| match &r[c.field] {
                Value::Null => String::new(),
                Value::String(s) => csv_field(s),
                v => v.to_string(),
            })
            .collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// One table cell.
pub fn cell(v: &Value, kind: Kind) -> String {
    let f = v.as_f64();
    match (kind, v) {
        (_, Value::Null) => "-".to_string(),
        (Kind::Plain, Value::String(s)) => s.clone(),
        (Kind::Plain, v) => v.to_string(),
        (Kind::NsAsMs, _) => f.map_or("-".into(), |ns| format!("{:.3}", ns / 1e6)),
        (Kind::Pct | Kind::Float2, _) => f.map_or("-".into(), |x| format!("{x:.2}")),
        (Kind::Float3, _) => f.map_or("-".into(), |x| format!("{x:.3}")),
        (Kind::Bytes, _) => f.map_or("-".into(), bytes),
    }
}

fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{x:.0} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const COLS: [Column; 4] = [
        col("rank", "rank", Kind::Plain),
        col("compute_ns", "compute_ms", Kind::NsAsMs),
        col("overlap_pct", "overlap_%", Kind::Pct),
        col("bytes", "bytes", Kind::Bytes),
    ];

    fn rows() -> Vec<Value> {
        vec![
            json!({"rank": 0, "compute_ns": 1_500_000, "overlap_pct": 12.345, "bytes": 3 * 1024 * 1024}),
            json!({"rank": 1, "compute_ns": 2_000_000, "overlap_pct": null, "bytes": 10}),
        ]
    }

    #[test]
    fn table_formats_units_and_nulls() {
        let t = render(&rows(), &COLS, OutputFormat::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "rank  compute_ms  overlap_%    bytes");
        assert_eq!(lines[1], "   0       1.500      12.35  3.0 MiB");
        assert_eq!(lines[2], "   1       2.000          -     10 B");
    }

    #[test]
    fn csv_has_raw_values_under_api_names() {
        let c = render(&rows(), &COLS, OutputFormat::Csv);
        assert_eq!(
            c,
            "rank,compute_ns,overlap_pct,bytes\n0,1500000,12.345,3145728\n1,2000000,,10\n"
        );
    }

    #[test]
    fn json_passes_rows_through() {
        let j = render(&rows(), &COLS, OutputFormat::Json);
        let back: Vec<Value> = serde_json::from_str(&j).unwrap();
        assert_eq!(back, rows());
    }

    #[test]
    fn empty_table_says_so() {
        assert_eq!(render(&[], &COLS, OutputFormat::Table), "(no rows)\n");
    }
}
