//! Target `config`: the collector's and the agent's TOML configuration
//! (`rankscope_collector::config::Config::from_toml`, which validates, and
//! `rankscope_agent::config::Config::from_toml` + its derived values).
//!
//! Every input goes to both parsers. Corpus: the example and systemd
//! configs in `deploy/` and the TOML blocks of `docs/*.md`. Inputs: text
//! mutations with TOML tokens (tables, arrays of tables, odd numbers,
//! strings, dates, deep nesting). Checked besides "no panic": an accepted
//! config prints (`to_toml`, what `gen-config` shows) as TOML that parses
//! back to an accepted config.

use std::path::Path;

use rand::rngs::SmallRng;
use rankscope_agent::config::Config as AgentConfig;
use rankscope_collector::config::Config as CollectorConfig;

use crate::mutate::mutate;
use crate::Target;

const TOKENS: &[&str] = &[
    "\n",
    "=",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "\"",
    "'''",
    "\"\"\"",
    "#",
    ".",
    ",",
    "true",
    "false",
    "nan",
    "-inf",
    "+inf",
    "0x7fffffffffffffff",
    "0o777",
    "0b1",
    "1_000",
    "1979-05-27T07:32:00Z",
    "\\u0000",
    "\\uD800",
    "\n[stream]\n",
    "\n[writer]\n",
    "\n[clickhouse]\n",
    "\n[alerts]\n",
    "\n[[alerts.rules]]\n",
    "\n[traces]\n",
    "\n[kineto]\n",
    "\nmax_message_bytes = ",
    "\nretention_days = ",
    "\ncollector_url = \"http://[::1]:7700\"",
    "\nlisten_addr = \"0.0.0.0:99999\"",
    "\nretry_initial_ms = ",
    "\nretry_max_ms = ",
    "\nqueue_max_events = ",
    "a.b.c = 1\n",
];

pub fn target() -> Target {
    Target {
        name: "config",
        corpus: corpus(),
        generate: |rng: &mut SmallRng, corpus: &[Vec<u8>]| mutate(rng, corpus, TOKENS),
        run,
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for f in [
        "deploy/collector.example.toml",
        "deploy/agent.example.toml",
        "deploy/systemd/collector.toml",
        "deploy/systemd/agent.toml",
    ] {
        if let Ok(b) = std::fs::read(root.join(f)) {
            out.push(b);
        }
    }
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    docs.sort();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap_or_default();
        for block in text.split("```toml\n").skip(1) {
            if let Some(end) = block.find("```") {
                out.push(block.as_bytes()[..end].to_vec());
            }
        }
    }
    out.push(b"".to_vec());
    out
}

fn run(input: &[u8]) -> String {
    let Ok(text) = std::str::from_utf8(input) else {
        return "not_utf8".into();
    };
    let collector = match CollectorConfig::from_toml(text, "fuzz.toml") {
        Ok(c) => {
            let again = c.to_toml();
            if let Err(e) = CollectorConfig::from_toml(&again, "printed.toml") {
                panic!("the printed collector config does not parse back: {e}\n{again}");
            }
            let _ = c.tls_paths();
            "ok".into()
        }
        Err(e) => crate::kind(&e),
    };
    let agent = match AgentConfig::from_toml(text, Path::new("fuzz.toml")) {
        Ok(c) => {
            let again = c.to_toml().expect("an accepted agent config prints");
            if let Err(e) = AgentConfig::from_toml(&again, Path::new("printed.toml")) {
                panic!("the printed agent config does not parse back: {e}\n{again}");
            }
            let _ = (c.listen_socket_addr(), c.backoff(), c.unix_socket());
            "ok".into()
        }
        Err(e) => crate::kind(&e),
    };
    format!("collector:{collector} agent:{agent}")
}

/// Runs one saved input (regression tests).
pub fn replay(input: &[u8]) -> String {
    run(input)
}
