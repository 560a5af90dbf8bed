//! Several collectors and the agents' disk spool in the Kubernetes
//! manifests (issue 36, item 3).
//!
//! In: `deploy/kubernetes/{agent,collector}.yaml` (the chart's default
//! render), the chart rendered with other values ([`super::k8s::render_chart`]),
//! `values.yaml` and the agent's `Config` parser. Out: failures naming the
//! object and field. What is checked: N collector replicas behind a headless
//! Service (no cluster IP, ready pods only) whose name is the agents'
//! `collector_url`, an ordinary Service for the API and UI without the gRPC
//! port, readiness gating, spreading and a disruption budget below N; the
//! agent's spool configured in its `agent.toml` on a hostPath directory
//! mounted at the same path and owned by the agent's user.

use std::path::Path;

use serde_json::{json, Value};

use super::k8s::{container, env, find, manifests, render_chart, selects, service_url};
use super::{read, yaml_docs};

/// The chart's default `collector.replicas`.
fn default_replicas() -> u64 {
    let values: Value =
        serde_yaml_ng::from_str(&read("deploy/helm/rankscope/values.yaml")).expect("values.yaml");
    values["collector"]["replicas"]
        .as_u64()
        .expect("collector.replicas is a number")
}

#[test]
fn collectors_are_replicated_behind_a_headless_service_the_agents_dial() {
    let docs = manifests("collector.yaml");
    let dep = find(&docs, "Deployment", "rankscope-collector");
    let replicas = default_replicas();
    assert!(
        replicas >= 2,
        "the chart ships several collectors, not {replicas}"
    );
    assert_eq!(dep["spec"]["replicas"], replicas);
    let rolling = &dep["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(
        rolling["maxUnavailable"], 0,
        "a new collector is ready before an old one stops"
    );
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(pod, "collector");
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"], "/healthz",
        "readiness gates the headless Service's addresses"
    );
    let spread = &pod["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&spread["labelSelector"]["matchLabels"], labels));
    let pdb = find(&docs, "PodDisruptionBudget", "rankscope-collector");
    assert!(pdb["spec"]["maxUnavailable"].as_u64().expect("number") < replicas);

    // Agents: the headless Service, ready pods only.
    let headless = find(&docs, "Service", "rankscope-collector-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], false);
    assert!(
        headless["spec"].get("type").is_none(),
        "headless is ClusterIP"
    );
    assert!(selects(&headless["spec"]["selector"], labels));
    // Users: the API's Service balances connections; no gRPC port on it,
    // so no agent can reach a collector through it by mistake.
    let api = find(&docs, "Service", "rankscope-collector");
    assert_eq!(api["spec"]["type"], "ClusterIP");
    assert!(api["spec"].get("clusterIP").is_none());
    assert!(!api["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .any(|p| p["name"] == "grpc"));

    // The agent's collector_url is the headless name, on its gRPC port.
    let agents = manifests("agent.yaml");
    let ds_pod = &find(&agents, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    let url = env(container(ds_pod, "agent"))["RANKSCOPE_AGENT_COLLECTOR_URL"].clone();
    let (name, ns, port) = service_url(&url);
    assert_eq!(
        (name.as_str(), ns.as_str()),
        ("rankscope-collector-headless", "rankscope")
    );
    assert!(headless["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .any(|p| p["name"] == "grpc" && p["port"] == port));
}

#[test]
fn the_agent_spool_is_a_host_path_set_in_agent_toml() {
    let docs = manifests("agent.yaml");
    let pod = &find(&docs, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    let text = find(&docs, "ConfigMap", "rankscope-agent")["data"]["agent.toml"]
        .as_str()
        .expect("agent.toml");
    let cfg = rankscope_agent::Config::from_toml(text, Path::new("agent.toml"))
        .expect("agent.toml parses");
    assert_eq!(cfg.spool_dir, "/var/lib/rankscope/spool");
    assert!(cfg.spool_max_bytes > 0);
    let volume = volume(pod, "spool");
    assert_eq!(volume["hostPath"]["path"], cfg.spool_dir.as_str());
    assert_eq!(volume["hostPath"]["type"], "DirectoryOrCreate");
    for name in ["agent", "socket-dir"] {
        let mounted = container(pod, name)["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "spool" && m["mountPath"] == cfg.spool_dir.as_str());
        assert!(mounted, "{name} does not mount the spool at spool_dir");
    }
    // The init container hands it to the agent's user (checked in
    // k8s_objects.rs); the agent writes nowhere else but its socket dir.
    assert_eq!(
        container(pod, "agent")["securityContext"]["readOnlyRootFilesystem"],
        true
    );
}

/// The volume `name` of a pod spec.
fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

#[test]
fn chart_values_set_the_replicas_and_can_turn_the_spool_off() {
    let r = render_chart(json!({
        "collector": {"replicas": 5},
        "agent": {"spoolDir": ""},
    }));
    let collector = yaml_docs(&r["collector.yaml"], "collector");
    assert_eq!(
        find(&collector, "Deployment", "rankscope-collector")["spec"]["replicas"],
        5
    );
    let agent = yaml_docs(&r["agent.yaml"], "agent");
    let pod = &find(&agent, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    assert!(pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .all(|v| v["name"] != "spool"));
    let init = container(pod, "socket-dir");
    assert_eq!(init["command"].as_array().expect("command").len(), 3);
    let text = find(&agent, "ConfigMap", "rankscope-agent")["data"]["agent.toml"]
        .as_str()
        .expect("agent.toml");
    let cfg = rankscope_agent::Config::from_toml(text, Path::new("agent.toml"))
        .expect("agent.toml parses");
    assert_eq!(cfg.spool_dir, "", "no spool");

    let r = render_chart(json!({"agent": {"spoolDir": "/data/rankscope-spool"}}));
    let agent = yaml_docs(&r["agent.yaml"], "agent");
    let pod = &find(&agent, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    assert_eq!(
        volume(pod, "spool")["hostPath"]["path"],
        "/data/rankscope-spool"
    );
    let text = find(&agent, "ConfigMap", "rankscope-agent")["data"]["agent.toml"]
        .as_str()
        .expect("agent.toml");
    assert!(
        text.contains("spool_dir = \"/data/rankscope-spool\""),
        "{text}"
    );
}
