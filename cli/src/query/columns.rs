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
    /// A kernel or operator name: shortened in tables ([`shorten_name`],
    /// then cut in the middle so the table fits [`TABLE_MAX_WIDTH`]);
    /// JSON and CSV keep it whole.
    Name,
}

/// The widest a table with [`Kind::Name`] columns is made (columns of a
/// terminal): its name columns are cut to fit, down to [`NAME_MIN_WIDTH`].
pub const TABLE_MAX_WIDTH: usize = 200;

/// Name columns are never cut below this many characters.
pub const NAME_MIN_WIDTH: usize = 24;

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
            let mut cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| columns.iter().map(|c| cell(&r[c.field], c.kind)).collect())
                .collect();
            fit_names(&header, &mut cells, columns);
            let right: Vec<bool> = columns
                .iter()
                .map(|c| {
                    !matches!(c.kind, Kind::Plain | Kind::Name)
                        || rows.iter().any(|r| r[c.field].is_number())
                })
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
        (Kind::Name, Value::String(s)) => shorten_name(s),
        (Kind::Name, v) => v.to_string(),
        (Kind::Plain, v) => v.to_string(),
        (Kind::NsAsMs, _) => f.map_or("-".into(), |ns| format!("{:.3}", ns / 1e6)),
        (Kind::Pct | Kind::Float2, _) => f.map_or("-".into(), |x| format!("{x:.2}")),
        (Kind::Float3, _) => f.map_or("-".into(), |x| format!("{x:.3}")),
        (Kind::Bytes, _) => f.map_or("-".into(), bytes),
    }
}

/// A kernel or operator name without its template arguments, parameter
/// list and return type, as Holistic Trace Analysis shortens names for its
/// tables (`hta.utils.utils.shorten_name`): `->` is dropped, every `<...>`
/// and `(...)` (nested) is removed, and the last space-separated word is
/// kept. A name that would become empty (HTA's rule leaves nothing of
/// `Memcpy HtoD (Pinned -> Device)`) is kept whole.
pub fn shorten_name(name: &str) -> String {
    let mut stack: Vec<char> = Vec::with_capacity(name.len());
    for c in name.replace("->", "").chars() {
        let open = match c {
            '>' => '<',
            ')' => '(',
            _ => {
                stack.push(c);
                continue;
            }
        };
        while stack.last().is_some_and(|&t| t != open) {
            stack.pop();
        }
        stack.pop();
    }
    let short: String = stack.into_iter().collect();
    match short.split(' ').next_back() {
        Some(last) if !last.is_empty() => last.to_string(),
        _ => name.to_string(),
    }
}

/// `s` cut to at most `max` characters, its middle replaced by `…` (both
/// the namespace and the function's own name stay readable).
pub fn cut_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max || max < 3 {
        return s.to_string();
    }
    let keep = max - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// Cuts the [`Kind::Name`] cells so the table is at most
/// [`TABLE_MAX_WIDTH`] wide (name columns share the room left by the
/// others, each at least [`NAME_MIN_WIDTH`]).
fn fit_names(header: &[String], cells: &mut [Vec<String>], columns: &[Column]) {
    let names: Vec<usize> = (0..columns.len())
        .filter(|&i| columns[i].kind == Kind::Name)
        .collect();
    if names.is_empty() {
        return;
    }
    let width = |i: usize| {
        cells
            .iter()
            .map(|r| r[i].chars().count())
            .chain(std::iter::once(header[i].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let others: usize = (0..columns.len())
        .filter(|i| !names.contains(i))
        .map(width)
        .sum();
    let gaps = 2 * columns.len().saturating_sub(1);
    let room = TABLE_MAX_WIDTH.saturating_sub(others + gaps);
    let max = (room / names.len()).max(NAME_MIN_WIDTH);
    for row in cells.iter_mut() {
        for &i in &names {
            row[i] = cut_middle(&row[i], max);
        }
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
    fn names_are_shortened_as_hta_does() {
        let cases = [
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
                "at::native::vectorized_elementwise_kernel",
            ),
            ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "ncclKernel_AllReduce_RING_LL_Sum_float"),
            ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize96x64x64", "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize96x64x64"),
            ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
            ("aten::add_", "aten::add_"),
            ("()", "()"),
        ];
        for (name, want) in cases {
            assert_eq!(shorten_name(name), want, "{name}");
        }
    }

    #[test]
    fn long_names_are_cut_to_fit_and_kept_whole_in_json_and_csv() {
        let long = format!("void {}(float*)", "k".repeat(400));
        let rows = vec![json!({"rank": 0, "name": long, "sum_ns": 5})];
        let cols = [
            col("rank", "rank", Kind::Plain),
            col("name", "name", Kind::Name),
            col("name", "name_again", Kind::Name),
            col("sum_ns", "sum_ms", Kind::NsAsMs),
        ];
        let t = render(&rows, &cols, OutputFormat::Table);
        for line in t.lines() {
            assert!(line.chars().count() <= TABLE_MAX_WIDTH, "{line}");
        }
        assert!(t.contains('…'), "{t}");
        assert!(!t.contains("float"), "{t}");
        assert!(render(&rows, &cols, OutputFormat::Csv).contains(&long));
        assert!(render(&rows, &cols, OutputFormat::Json).contains(&long));
    }

    #[test]
    fn cut_middle_keeps_both_ends() {
        assert_eq!(cut_middle("abcdefghij", 5), "ab…ij");
        assert_eq!(cut_middle("abc", 5), "abc");
        assert_eq!(cut_middle("abcdef", 6), "abcdef");
    }

    #[test]
    fn empty_table_says_so() {
        assert_eq!(render(&[], &COLS, OutputFormat::Table), "(no rows)\n");
    }
}
