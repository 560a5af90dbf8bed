//! A renderer for the small subset of Helm's Go templates that
//! `deploy/helm/rankscope/templates/` is written in, so that the chart can be
//! rendered and checked without `helm` (not installable here).
//!
//! In: a template and a context (`{"Values": .., "Release": .., "Chart": ..}`
//! as JSON). Out: the rendered text, or an error naming the construct.
//!
//! The subset: text; `{{ PIPELINE }}`; `{{ if PIPELINE }} .. {{ else }} ..
//! {{ end }}` (nestable); `{{/* comments */}}`; `{{-` / `-}}` whitespace
//! trimming. A pipeline is a term (`.Values.a.b`, `.Release.Name`, `.Chart.X`,
//! a "string", an integer) or a function call, followed by `| function args`.
//! Functions: `quote`, `default`, `toYaml`, `nindent`, `indent`, `int64`,
//! `trim`.
//! Anything else (`range`, `with`, `include`, variables, ...) is an error, so
//! the chart cannot drift outside what this renderer checks.
//!
//! Invariants, Helm's behaviour kept where it matters: values are numbers as
//! Helm sees them (float64), so printing an integer >= 10^6 without `int64`
//! is an error (Helm would print `1e+06`); printing a missing value is an
//! error (Helm prints nothing); `if` on a missing value is false.

use serde_json::Value;

#[derive(Debug)]
enum Node {
    Text(String),
    Print(String),
    If(String, Vec<Node>, Vec<Node>),
}

/// Renders `template` with `ctx`.
pub fn render(template: &str, ctx: &Value) -> Result<String, String> {
    let tokens = tokenize(template)?;
    let mut pos = 0;
    let (nodes, stop) = parse(&tokens, &mut pos)?;
    if let Some(stop) = stop {
        return Err(format!("unexpected {{{{ {stop} }}}}"));
    }
    let mut out = String::new();
    emit(&nodes, ctx, &mut out)?;
    Ok(out)
}

#[derive(Debug)]
enum Tok {
    Text(String),
    Action(String),
}

fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
    let mut toks = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_owned();
        if trim_next {
            text = text.trim_start().to_owned();
        }
        let after = &rest[open + 2..];
        let (trim_left, body_start) = match after.strip_prefix("- ") {
            Some(_) => (true, 2),
            None => (false, 0),
        };
        if trim_left {
            text = text.trim_end().to_owned();
        }
        toks.push(Tok::Text(text));
        let close = after
            .find("}}")
            .ok_or_else(|| format!("unclosed action near {:?}", &after[..after.len().min(40)]))?;
        let mut body = &after[body_start..close];
        trim_next = body.ends_with(" -");
        if trim_next {
            body = &body[..body.len() - 2];
        }
        toks.push(Tok::Action(body.trim().to_owned()));
        rest = &after[close + 2..];
    }
    let mut text = rest.to_owned();
    if trim_next {
        text = text.trim_start().to_owned();
    }
    toks.push(Tok::Text(text));
    Ok(toks)
}

/// Parses nodes up to an `else` / `end` (returned as the stop word) or the end.
fn parse(toks: &[Tok], pos: &mut usize) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while *pos < toks.len() {
        let tok = &toks[*pos];
        *pos += 1;
        let action = match tok {
            Tok::Text(t) => {
                nodes.push(Node::Text(t.clone()));
                continue;
            }
            Tok::Action(a) => a.as_str(),
        };
        if action.starts_with("/*") && action.ends_with("*/") {
            continue;
        }
        if action == "else" || action == "end" {
            return Ok((nodes, Some(action.to_owned())));
        }
        if let Some(cond) = action.strip_prefix("if ") {
            let (then, stop) = parse(toks, pos)?;
            let otherwise = match stop.as_deref() {
                Some("end") => Vec::new(),
                Some("else") => match parse(toks, pos)? {
                    (nodes, Some(s)) if s == "end" => nodes,
                    _ => return Err(format!("`if {cond}`: else without end")),
                },
                _ => return Err(format!("`if {cond}` without end")),
            };
            nodes.push(Node::If(cond.trim().to_owned(), then, otherwise));
            continue;
        }
        let first = action.split_whitespace().next().unwrap_or("");
        if [
            "range", "with", "define", "template", "block", "include", "tpl", "else",
        ]
        .contains(&first)
            || action.starts_with('$')
        {
            return Err(format!("unsupported action {{{{ {action} }}}}"));
        }
        nodes.push(Node::Print(action.to_owned()));
    }
    Ok((nodes, None))
}

fn emit(nodes: &[Node], ctx: &Value, out: &mut String) -> Result<(), String> {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(p) => {
                let v = pipeline(p, ctx)?.ok_or_else(|| format!("{{{{ {p} }}}}: no value"))?;
                out.push_str(&print(&v).map_err(|e| format!("{{{{ {p} }}}}: {e}"))?);
            }
            Node::If(cond, then, otherwise) => {
                let v = pipeline(cond, ctx)?;
                emit(if truthy(v.as_ref()) { then } else { otherwise }, ctx, out)?;
            }
        }
    }
    Ok(())
}

/// Go's notion of truth: false, 0, "", null and empty collections are false.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// How Go's text/template prints a value Helm loaded from YAML.
fn print(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => match n.as_i64() {
            Some(i) if i.abs() < 1_000_000 => Ok(i.to_string()),
            _ => Err(format!(
                "{n} would print as a float under Helm; pipe it to int64"
            )),
        },
        other => Err(format!("cannot print {other} directly; use toYaml")),
    }
}

/// Evaluates `a | f x | g`; `None` is a missing value.
fn pipeline(src: &str, ctx: &Value) -> Result<Option<Value>, String> {
    let mut acc: Option<Option<Value>> = None;
    for stage in split_outside_quotes(src, '|') {
        let words = words(stage.trim())?;
        let (head, args) = words
            .split_first()
            .ok_or_else(|| format!("empty stage in {src:?}"))?;
        let mut vals: Vec<Option<Value>> = args
            .iter()
            .map(|a| term(a, ctx))
            .collect::<Result<_, _>>()?;
        if let Some(prev) = acc.take() {
            vals.push(prev);
        } else if args.is_empty() && !is_function(head) {
            acc = Some(term(head, ctx)?);
            continue;
        }
        acc = Some(call(head, vals).map_err(|e| format!("{src:?}: {e}"))?);
    }
    acc.ok_or_else(|| format!("empty pipeline {src:?}"))
}

fn is_function(word: &str) -> bool {
    [
        "quote", "default", "toYaml", "nindent", "indent", "int64", "trim",
    ]
    .contains(&word)
}

fn call(name: &str, args: Vec<Option<Value>>) -> Result<Option<Value>, String> {
    let want = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("{name} takes {n} arguments, got {}", args.len()))
        }
    };
    let present = |v: &Option<Value>| v.clone().ok_or_else(|| format!("{name}: missing value"));
    match name {
        "quote" => {
            want(1)?;
            let s = print(&present(&args[0])?)?;
            if s.chars()
                .any(|c| c == '"' || c == '\\' || !(' '..='~').contains(&c))
            {
                return Err(format!("quote: {s:?} needs escaping; keep values plain"));
            }
            Ok(Some(Value::String(format!("\"{s}\""))))
        }
        "default" => {
            want(2)?;
            Ok(if truthy(args[1].as_ref()) {
                args[1].clone()
            } else {
                args[0].clone()
            })
        }
        "toYaml" => {
            want(1)?;
            let text = serde_yaml_ng::to_string(&present(&args[0])?).map_err(|e| e.to_string())?;
            Ok(Some(Value::String(text.trim_end_matches('\n').to_owned())))
        }
        "nindent" | "indent" => {
            want(2)?;
            let n = present(&args[0])?
                .as_u64()
                .ok_or_else(|| format!("{name}: the width must be an integer"))?;
            let pad = " ".repeat(n as usize);
            let text = print(&present(&args[1])?)?;
            let body = format!("{pad}{}", text.replace('\n', &format!("\n{pad}")));
            Ok(Some(Value::String(if name == "nindent" {
                format!("\n{body}")
            } else {
                body
            })))
        }
        "trim" => {
            want(1)?;
            Ok(Some(Value::String(
                print(&present(&args[0])?)?.trim().to_owned(),
            )))
        }
        "int64" => {
            want(1)?;
            let v = present(&args[0])?;
            let n = v
                .as_f64()
                .ok_or_else(|| format!("int64: {v} is not a number"))?;
            Ok(Some(Value::String(format!("{}", n.trunc() as i64))))
        }
        other => Err(format!("unsupported function {other}")),
    }
}

/// A term: `.A.B`, `"string"` or an integer. `None` when the path is missing.
fn term(word: &str, ctx: &Value) -> Result<Option<Value>, String> {
    if let Some(s) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) {
        return Ok(Some(Value::String(s.to_owned())));
    }
    if let Ok(n) = word.parse::<i64>() {
        return Ok(Some(Value::from(n)));
    }
    let path = word
        .strip_prefix('.')
        .ok_or_else(|| format!("unsupported term {word:?}"))?;
    let mut v = ctx;
    for key in path.split('.') {
        match v.get(key) {
            Some(next) => v = next,
            None => return Ok(None),
        }
    }
    Ok(Some(v.clone()))
}

fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

fn words(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => {
                cur.push(c);
                quoted = !quoted;
            }
            '(' | ')' if !quoted => return Err(format!("parentheses are not supported: {s:?}")),
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("unterminated string in {s:?}"));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Value {
        json!({"Values": {"a": {"b": "x", "n": 7700, "big": 16777216, "off": false,
                                 "empty": "", "list": [{"k": "v"}]}},
               "Release": {"Name": "r"}, "Chart": {"AppVersion": "1.0"}})
    }

    #[test]
    fn prints_values_trims_and_branches() {
        let t = "a: {{ .Values.a.b }}\n{{- if .Values.a.off }}\nno{{ else }}\nn: {{ .Values.a.n }}{{ end }}\n";
        assert_eq!(render(t, &ctx()).unwrap(), "a: x\nn: 7700\n");
        let t = "v: {{ .Values.a.empty | default .Chart.AppVersion | quote }}";
        assert_eq!(render(t, &ctx()).unwrap(), "v: \"1.0\"");
        let t = "l:\n  {{- toYaml .Values.a.list | nindent 2 }}\n";
        assert_eq!(render(t, &ctx()).unwrap(), "l:\n  - k: v\n");
        assert_eq!(render("{{/* c */ -}}\n x", &ctx()).unwrap(), "x");
    }

    #[test]
    fn rejects_what_helm_would_render_differently_or_we_do_not_support() {
        for bad in [
            "{{ .Values.a.big }}",
            "{{ .Values.missing }}",
            "{{ range .Values.a.list }}{{ end }}",
            "{{ include \"x\" . }}",
            "{{ if .Values.a.b }}",
            "{{ $x := 1 }}",
        ] {
            assert!(render(bad, &ctx()).is_err(), "{bad} rendered");
        }
        assert_eq!(
            render("{{ .Values.a.big | int64 }}", &ctx()).unwrap(),
            "16777216"
        );
    }
}
