//! The Helm chart and the Kubernetes manifests rendered from it.
//!
//! In: `deploy/helm/rankscope` (rendered by [`super::helm`]) and
//! `deploy/kubernetes`. Out: helpers to read the manifests' objects, and
//! failures naming the file, value or object that disagrees.
//! Invariant: `deploy/kubernetes/{agent,collector,clickhouse}.yaml` are the
//! chart's default render, byte for byte.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use super::{helm, read, repo, yaml_docs};

const CHART: &str = "deploy/helm/rankscope";
const RELEASE: &str = "rankscope";
const HEADER: &str =
    "# Generated from deploy/helm/rankscope with its default values (release and\n\
# namespace \"rankscope\"): change the chart, then regenerate with\n\
#   UPDATE_EXPECT=1 cargo test -p rankscope-testkit --test e2e -- deploy::\n";

/// The chart's templates rendered with the default values merged with
/// `overrides`: file name -> text.
pub fn render_chart(overrides: Value) -> BTreeMap<String, String> {
    let mut values: Value = serde_yaml_ng::from_str(&read(&format!("{CHART}/values.yaml")))
        .expect("values.yaml parses");
    merge(&mut values, overrides);
    let chart: Value =
        serde_yaml_ng::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml");
    let ctx = json!({
        "Values": values,
        "Release": {"Name": RELEASE, "Namespace": RELEASE, "Service": "Helm"},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
    });
    let mut out = BTreeMap::new();
    for path in super::files_under(&format!("{CHART}/templates")) {
        let name = file_name(&path);
        let text = std::fs::read_to_string(&path).expect("template");
        let rendered = helm::render(&text, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.insert(name, rendered.trim_start_matches('\n').to_owned());
    }
    out
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// The checked-in manifests of `deploy/kubernetes/<file>`.
pub fn manifests(file: &str) -> Vec<Value> {
    yaml_docs(&read(&format!("deploy/kubernetes/{file}")), file)
}

/// The object of `kind` named `name` among `docs`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The container `name` of a pod spec (`initContainers` too).
pub fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod[*k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// A container's literal environment: name -> value.
pub fn env(c: &Value) -> BTreeMap<String, String> {
    c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// A probe's or Service's port: a number, or a container port's name.
pub fn resolve_port(c: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return n as u16;
    }
    c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == *port)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("port {port} is not a port of container {}", c["name"]))
        as u16
}

/// `sub`'s labels are all in `labels`.
pub fn selects(sub: &Value, labels: &Value) -> bool {
    let sub = sub.as_object().expect("label map");
    !sub.is_empty() && sub.iter().all(|(k, v)| labels[k] == *v)
}

/// `http://NAME.NAMESPACE.svc:PORT` -> (NAME, NAMESPACE, PORT).
pub fn service_url(url: &str) -> (String, String, u16) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}"));
    let (host, port) = rest.rsplit_once(':').unwrap_or_else(|| panic!("{url}"));
    let mut parts = host.split('.');
    let (name, ns) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    assert_eq!(
        parts.collect::<Vec<_>>(),
        ["svc"],
        "{url}: want NAME.NAMESPACE.svc"
    );
    (name.to_owned(), ns.to_owned(), port.parse().expect("port"))
}

/// Bytes of a Kubernetes memory quantity (`512Mi`, `1Gi`, `500M`).
pub fn bytes(q: &str) -> u64 {
    let (num, mult) = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ]
    .iter()
    .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((q, 1));
    num.parse::<u64>()
        .unwrap_or_else(|_| panic!("quantity {q}"))
        * mult
}

#[test]
fn chart_renders_to_the_checked_in_manifests() {
    let rendered = render_chart(json!({}));
    assert!(rendered.len() >= 3, "{:?}", rendered.keys());
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    for (name, text) in rendered.iter().filter(|(n, _)| n.ends_with(".yaml")) {
        let docs = yaml_docs(text, name);
        assert!(!docs.is_empty(), "{name} renders nothing");
        for d in &docs {
            for field in ["apiVersion", "kind"] {
                assert!(d[field].is_string(), "{name}: a document without {field}");
            }
            assert_eq!(
                d["metadata"]["namespace"], RELEASE,
                "{name}: {}",
                d["metadata"]["name"]
            );
        }
        let want = format!("{HEADER}{text}");
        let path = repo().join("deploy/kubernetes").join(name);
        if update {
            std::fs::write(&path, &want).expect("write manifest");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "deploy/kubernetes/{name} is not the chart's render; run \
             UPDATE_EXPECT=1 cargo test -p rankscope-testkit --test e2e -- deploy::"
        );
    }
}

#[test]
fn chart_values_switch_components_and_endpoints() {
    let r = render_chart(json!({
        "clickhouse": {"enabled": false},
        "collector": {"clickhouseUrl": "http://ch.example:8123"},
        "agent": {"collectorUrl": "http://collector.example:7700", "runtimeClassName": ""},
        "image": {"tag": ""},
    }));
    assert!(yaml_docs(&r["clickhouse.yaml"], "clickhouse").is_empty());
    let collector = yaml_docs(&r["collector.yaml"], "collector");
    let c = container(
        &find(&collector, "Deployment", "rankscope-collector")["spec"]["template"]["spec"],
        "collector",
    );
    assert_eq!(env(c)["RANKSCOPE_CLICKHOUSE_URL"], "http://ch.example:8123");
    let agent = yaml_docs(&r["agent.yaml"], "agent");
    let pod = &find(&agent, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    assert_eq!(
        env(container(pod, "agent"))["RANKSCOPE_AGENT_COLLECTOR_URL"],
        "http://collector.example:7700"
    );
    assert!(pod.get("runtimeClassName").is_none());
    assert_eq!(
        container(pod, "agent")["image"],
        "rankscope:0.1.0",
        "empty tag: the appVersion"
    );

    let r = render_chart(
        json!({"clickhouse": {"storageClassName": "fast"}, "agent": {"enabled": false}}),
    );
    assert!(yaml_docs(&r["agent.yaml"], "agent").is_empty());
    let ch = yaml_docs(&r["clickhouse.yaml"], "clickhouse");
    let sts = find(&ch, "StatefulSet", "rankscope-clickhouse");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
        "fast"
    );
}

/// The mount paths of `pod`'s container `name`, by volume name.
fn mounts(pod: &Value, name: &str) -> BTreeMap<String, String> {
    container(pod, name)["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m["name"].as_str()?.to_owned(),
                m["mountPath"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

#[test]
fn chart_with_tls_mounts_the_secrets_and_both_binaries_accept_it() {
    let r = render_chart(json!({
        "tls": {"enabled": true},
        "collector": {"allowInsecure": false},
    }));
    let collector = yaml_docs(&r["collector.yaml"], "collector");
    let dep = find(&collector, "Deployment", "rankscope-collector");
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(pod, "collector");
    let e = env(c);
    assert!(!e.contains_key("RANKSCOPE_ALLOW_INSECURE"));
    let mut cfg = rankscope_collector::Config {
        grpc_listen_addr: e["RANKSCOPE_GRPC_LISTEN_ADDR"].clone(),
        http_listen_addr: e["RANKSCOPE_HTTP_LISTEN_ADDR"].clone(),
        tls_cert_path: e["RANKSCOPE_TLS_CERT_PATH"].clone(),
        tls_key_path: e["RANKSCOPE_TLS_KEY_PATH"].clone(),
        tls_ca_path: e["RANKSCOPE_TLS_CA_PATH"].clone(),
        ..Default::default()
    };
    cfg.validate().expect("TLS on 0.0.0.0 is accepted");
    cfg.tls_cert_path.clear();
    cfg.tls_key_path.clear();
    cfg.tls_ca_path.clear();
    assert!(cfg.validate().is_err(), "and refused without TLS");
    let dir = &mounts(pod, "collector")["tls"];
    for key in [
        "RANKSCOPE_TLS_CERT_PATH",
        "RANKSCOPE_TLS_KEY_PATH",
        "RANKSCOPE_TLS_CA_PATH",
    ] {
        assert!(
            e[key].starts_with(&format!("{dir}/")),
            "{key} outside the secret mount"
        );
    }
    let secret = |pod: &Value| {
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "tls")
            .map(|v| v["secret"]["secretName"].clone())
    };
    assert_eq!(secret(pod), Some(json!("rankscope-collector-tls")));
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(
        dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scheme"],
        "https"
    );

    let agent = yaml_docs(&r["agent.yaml"], "agent");
    let pod = &find(&agent, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    let e = env(container(pod, "agent"));
    let cfg = rankscope_agent::Config {
        collector_url: e["RANKSCOPE_AGENT_COLLECTOR_URL"].clone(),
        tls_ca_path: e["RANKSCOPE_TLS_CA_PATH"].clone(),
        tls_cert_path: e["RANKSCOPE_TLS_CERT_PATH"].clone(),
        tls_key_path: e["RANKSCOPE_TLS_KEY_PATH"].clone(),
        ..Default::default()
    };
    assert!(cfg
        .collector_url
        .starts_with("https://rankscope-collector-headless.rankscope.svc:"));
    cfg.validate().expect("agent accepts the TLS settings");
    let dir = &mounts(pod, "agent")["tls"];
    assert!(cfg.tls_cert_path.starts_with(&format!("{dir}/")));
    assert_eq!(secret(pod), Some(json!("rankscope-agent-tls")));
}

#[test]
fn every_value_is_used_and_versions_agree() {
    let values: Value =
        serde_yaml_ng::from_str(&read(&format!("{CHART}/values.yaml"))).expect("values");
    let mut templates = String::new();
    for path in super::files_under(&format!("{CHART}/templates")) {
        templates.push_str(&std::fs::read_to_string(path).expect("template"));
    }
    let used: Vec<&str> = templates
        .match_indices(".Values.")
        .map(|(at, _)| {
            let rest = &templates[at + 8..];
            &rest[..rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .unwrap_or(rest.len())]
        })
        .collect();
    let mut leaves = Vec::new();
    collect_leaves(&values, String::new(), &mut leaves);
    assert!(leaves.len() > 20, "{leaves:?}");
    for leaf in &leaves {
        assert!(
            used.iter()
                .any(|u| leaf == u || leaf.starts_with(&format!("{u}."))),
            "values.yaml: {leaf} is used by no template"
        );
    }

    let version = env!("CARGO_PKG_VERSION");
    let chart: Value =
        serde_yaml_ng::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(
        chart["appVersion"], version,
        "Chart.yaml appVersion = the workspace version"
    );
    assert_eq!(values["image"]["tag"], version);
    let kustomization = yaml_docs(
        &read("deploy/kubernetes/kustomization.yaml"),
        "kustomization",
    );
    assert_eq!(kustomization[0]["images"][0]["newTag"], version);
}

fn collect_leaves(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, child) in map {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                collect_leaves(child, p, out);
            }
        }
        _ => out.push(prefix),
    }
}
