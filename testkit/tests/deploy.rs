//! Deployment assets against the binaries they deploy.
//!
//! In: `deploy/kubernetes`, `deploy/helm/rankscope`, `deploy/systemd`,
//! `deploy/slurm`, `docs/deployment.md`, the binaries' `Config` defaults and
//! parsers, and their `main.rs` sources (for the flags' environment
//! variables). Out: failures naming the file and field that disagree.
//!
//! What is checked: the Helm chart renders to the checked-in manifests
//! (`UPDATE_EXPECT=1` regenerates them); ports, probes, sockets, URLs and
//! configs in the manifests agree with the binaries; the kustomization
//! renders (in Rust, no kubectl) to exactly the listed objects; systemd units
//! pass `systemd-analyze verify` and a hardening threshold (skipped with a loud
//! note when systemd-analyze is missing, a failure under `CI=true`); the
//! Slurm task prolog points a rank at a
//! real running agent; every `RANKSCOPE_*` variable named anywhere in these
//! assets is a flag's `env` in a binary.

#[path = "deploy/helm.rs"]
mod helm;
#[path = "deploy/host.rs"]
mod host;
#[path = "deploy/k8s.rs"]
mod k8s;
#[path = "deploy/k8s_objects.rs"]
mod k8s_objects;
#[path = "deploy/k8s_scale.rs"]
mod k8s_scale;
#[path = "deploy/k8s_use.rs"]
mod k8s_use;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the repository root")
        .to_path_buf()
}

/// A file of the repository, as text.
pub fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The files under a directory of the repository, recursively, sorted.
pub fn files_under(rel: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![repo().join(rel)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every non-empty document of a multi-document YAML text.
pub fn yaml_docs(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: {e}")))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Reports a missing external tool: under `CI=true` the test fails (CI runs
/// after `make deps`, which installs every tool the tests use); elsewhere it
/// prints a loud note to stderr and the caller skips that check.
pub fn missing_tool(tool: &str, install: &str) {
    let msg = format!("{tool} is not installed ({install}); its checks did NOT run");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true: {msg}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!`.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED: {msg} ***\n");
}

/// The port of `ip:port`.
pub fn port_of(addr: &str) -> u16 {
    addr.parse::<std::net::SocketAddr>()
        .unwrap_or_else(|e| panic!("{addr:?} is not ip:port: {e}"))
        .port()
}

/// Every `env = "NAME"` of a clap flag in the binaries' `main.rs`.
pub fn flag_env_vars() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for src in [
        "agent/src/main.rs",
        "collector/src/main.rs",
        "cli/src/main.rs",
    ] {
        let text = read(src);
        for (at, _) in text.match_indices("env = \"") {
            let rest = &text[at + 7..];
            let end = rest.find('"').expect("closing quote");
            names.insert(rest[..end].to_owned());
        }
    }
    assert!(names.contains("RANKSCOPE_AGENT_LISTEN_ADDR"), "{names:?}");
    names
}

/// Every `RANKSCOPE_[A-Z0-9_]+` word in a text.
pub fn rankscope_vars(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("RANKSCOPE_") {
        if at > 0 && text.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let len = text[at..]
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(text.len() - at);
        // `RANKSCOPE_AGENT_*` names a family, not a variable.
        if text[at + len..].starts_with('*') {
            continue;
        }
        out.insert(text[at..at + len].trim_end_matches('_').to_owned());
    }
    out
}

#[test]
fn every_rankscope_variable_in_the_deploy_assets_is_a_flag_env() {
    let known = flag_env_vars();
    let mut files = Vec::new();
    for dir in [
        "deploy/kubernetes",
        "deploy/helm",
        "deploy/systemd",
        "deploy/slurm",
    ] {
        files.extend(files_under(dir));
    }
    files.push(repo().join("docs/deployment.md"));
    let mut seen = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for name in rankscope_vars(&text) {
            seen += 1;
            assert!(
                known.contains(&name),
                "{}: {name} is not the env of any flag in agent/, collector/ or cli/ main.rs \
                 (known: {known:?})",
                file.display()
            );
        }
    }
    assert!(
        seen >= 10,
        "only {seen} RANKSCOPE_* names found: did the scan break?"
    );
    let found = rankscope_vars("x RANKSCOPE_NOPE_1=2 y RANKSCOPE_AGENT_* z");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["RANKSCOPE_NOPE_1"]);
}
