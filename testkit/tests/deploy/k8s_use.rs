//! How the Kubernetes manifests are used: the kustomization that applies
//! them and the example training pod that reaches the agent.
//!
//! In: `deploy/kubernetes/{kustomization.yaml,examples/}` and the manifests.
//! Out: failures naming the disagreement. `kubectl kustomize` runs when
//! kubectl is installed; otherwise that part is skipped with a note.

use std::collections::BTreeSet;
use std::path::PathBuf;

use rankscope_cli::simulate::client::connect::Target;
use serde_json::Value;

use super::k8s::{container, env, find, manifests, selects, service_url};
use super::{files_under, read, repo, yaml_docs};

/// `(kind, name)` of every object in the manifests the kustomization lists.
fn listed_objects() -> (Vec<String>, BTreeSet<(String, String)>) {
    let k = &yaml_docs(
        &read("deploy/kubernetes/kustomization.yaml"),
        "kustomization",
    )[0];
    let resources: Vec<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("path").to_owned())
        .collect();
    let mut objects = BTreeSet::new();
    for r in &resources {
        for d in manifests(r) {
            objects.insert((
                d["kind"].as_str().expect("kind").to_owned(),
                d["metadata"]["name"].as_str().expect("name").to_owned(),
            ));
        }
    }
    (resources, objects)
}

#[test]
fn kustomization_applies_every_manifest() {
    let (resources, objects) = listed_objects();
    let on_disk: Vec<String> = files_under("deploy/kubernetes")
        .iter()
        .filter(|p| p.parent() == Some(repo().join("deploy/kubernetes").as_path()))
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    let listed: BTreeSet<&String> = resources.iter().collect();
    assert_eq!(
        listed,
        on_disk.iter().collect(),
        "kustomization.yaml resources vs deploy/kubernetes/*.yaml"
    );
    for kind in [
        "Namespace",
        "DaemonSet",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "StatefulSet",
        "NetworkPolicy",
        "ConfigMap",
    ] {
        assert!(objects.iter().any(|(k, _)| k == kind), "no {kind}");
    }

    let out = match std::process::Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo().join("deploy/kubernetes"))
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            println!("note: kubectl not runnable ({e}); skipping `kubectl kustomize`");
            return;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = yaml_docs(&String::from_utf8_lossy(&out.stdout), "kustomize output");
    let got: BTreeSet<(String, String)> = built
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or("").to_owned(),
                d["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(got, objects);
    let version = env!("CARGO_PKG_VERSION");
    for d in built
        .iter()
        .filter(|d| d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
    {
        let image = &d["spec"]["template"]["spec"]["containers"][0]["image"];
        assert_eq!(
            *image,
            format!("rankscope:{version}"),
            "{}",
            d["metadata"]["name"]
        );
    }
}

#[test]
fn example_training_pod_reaches_the_agent_socket() {
    let job = &yaml_docs(
        &read("deploy/kubernetes/examples/simulate-job.yaml"),
        "simulate-job",
    )[0];
    assert_eq!(job["kind"], "Job");
    let pod = &job["spec"]["template"]["spec"];
    let ranks = container(pod, "ranks");
    let env = env(ranks);

    let agents = manifests("agent.yaml");
    let ds_pod = &find(&agents, "DaemonSet", "rankscope-agent")["spec"]["template"]["spec"];
    let agent = container(ds_pod, "agent");
    let socket = PathBuf::from(&super::k8s::env(agent)["RANKSCOPE_AGENT_UNIX_SOCKET"]);
    let socket_dir = socket.parent().expect("dir").to_str().expect("utf8");

    // RANKSCOPE_AGENT is what the rank client parses, and names the agent's socket.
    match Target::parse(&env["RANKSCOPE_AGENT"]).expect("RANKSCOPE_AGENT parses") {
        Target::Unix(_, path) => assert_eq!(path, socket),
        other => panic!("want the Unix socket, got {other:?}"),
    }
    // ... which is in the same host directory, mounted at the same path.
    let mount = ranks["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == socket_dir)
        .expect("socket dir mounted");
    let vol = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("volume");
    assert_eq!(vol["hostPath"]["path"], socket_dir);
    // ... with the socket's group (mode 0660), on a node that runs an agent.
    let group = &agent["securityContext"]["runAsGroup"];
    assert!(pod["securityContext"]["supplementalGroups"]
        .as_array()
        .expect("groups")
        .contains(group));
    assert_ne!(
        pod["securityContext"]["runAsUser"], 0,
        "shows the non-root case"
    );
    assert!(
        selects(&ds_pod["nodeSelector"], &pod["nodeSelector"]),
        "lands on agent nodes"
    );
    assert_eq!(pod["tolerations"], ds_pod["tolerations"]);

    // --wait asks the collector's HTTP API.
    let (svc, _, port) = service_url(&env["RANKSCOPE_COLLECTOR"]);
    let collector = manifests("collector.yaml");
    let ports = &find(&collector, "Service", &svc)["spec"]["ports"];
    assert!(ports
        .as_array()
        .expect("ports")
        .iter()
        .any(|p| p["name"] == "http" && p["port"] == port));
    let args: Vec<&str> = ranks["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args[0], "simulate");
    assert!(args.windows(2).any(|w| w == ["--job", "$(JOB_NAME)"]));
    assert!(ranks["env"]
        .as_array()
        .expect("env")
        .iter()
        .any(|e| e["name"] == "JOB_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"));
    assert_eq!(
        ranks["image"],
        format!("rankscope:{}", env!("CARGO_PKG_VERSION"))
    );
}
