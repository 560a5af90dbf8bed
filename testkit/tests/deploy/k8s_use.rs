//! How the Kubernetes manifests are used: the kustomization that applies
//! them and the example training pod that reaches the agent.
//!
//! In: `deploy/kubernetes/{kustomization.yaml,examples/}` and the manifests.
//! Out: failures naming the disagreement. The kustomization is rendered here
//! ([`kustomize`]: the `namespace`, `resources` and `images` fields it uses,
//! as `kubectl kustomize` applies them), so no kubectl is needed (Debian
//! does not package it); a field the renderer does not implement fails the
//! test instead of being ignored.

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

    let built = kustomize("deploy/kubernetes");
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

/// Kinds `kustomize` leaves without a namespace (cluster-scoped).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// `kubectl kustomize <rel>` for the fields our kustomization uses:
/// `resources` (local files, in order), `namespace` (set on every namespaced
/// object) and `images` (`name` -> `newName` / `newTag` on every container
/// and init container). Anything else in the kustomization, an `images`
/// entry that matches no container, or two objects with the same identity
/// fail, as kustomize would refuse or as we would not notice.
pub fn kustomize(rel: &str) -> Vec<Value> {
    let k = &yaml_docs(&read(&format!("{rel}/kustomization.yaml")), "kustomization")[0];
    for key in k.as_object().expect("kustomization is a map").keys() {
        assert!(
            ["apiVersion", "kind", "namespace", "resources", "images"].contains(&key.as_str()),
            "kustomization.yaml: `{key}` is not rendered by kustomize() in {}",
            file!()
        );
    }
    assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1beta1");
    assert_eq!(k["kind"], "Kustomization");
    let namespace = k["namespace"].as_str();
    let mut objects = Vec::new();
    for r in k["resources"].as_array().expect("resources") {
        let r = r.as_str().expect("resource path");
        let path = repo().join(rel).join(r);
        assert!(path.is_file(), "resource {r} is not a file in {rel}");
        objects.extend(yaml_docs(&read(&format!("{rel}/{r}")), r));
    }
    let mut ids = BTreeSet::new();
    for o in &mut objects {
        let kind = o["kind"].as_str().expect("kind").to_owned();
        let name = o["metadata"]["name"]
            .as_str()
            .expect("metadata.name")
            .to_owned();
        assert!(o["apiVersion"].is_string(), "{kind}/{name}: apiVersion");
        if let Some(ns) = namespace {
            if kind == "Namespace" {
                assert_eq!(name, ns, "kustomize would rename Namespace {name} to {ns}");
            } else if !CLUSTER_SCOPED.contains(&kind.as_str()) {
                o["metadata"]["namespace"] = Value::from(ns);
            }
        }
        let id = (kind, o["metadata"]["namespace"].clone().to_string(), name);
        assert!(ids.insert(id.clone()), "two objects {id:?}");
    }
    for img in k["images"].as_array().into_iter().flatten() {
        for key in img.as_object().expect("images entry is a map").keys() {
            assert!(
                ["name", "newName", "newTag"].contains(&key.as_str()),
                "images: `{key}` is not rendered by kustomize() in {}",
                file!()
            );
        }
        let name = img["name"].as_str().expect("images[].name");
        let mut matched = 0;
        for o in &mut objects {
            for_each_container(o, &mut |c| {
                let Some(image) = c["image"].as_str() else {
                    return;
                };
                // name[:tag]; a registry port (host:5000/x) has a '/' after its ':'.
                let (base, tag) = match image.rsplit_once(':') {
                    Some((b, t)) if !t.contains('/') => (b, Some(t)),
                    _ => (image, None),
                };
                if base != name {
                    return;
                }
                matched += 1;
                let base = img["newName"].as_str().unwrap_or(base);
                let tag = img["newTag"].as_str().or(tag);
                c["image"] = Value::from(match tag {
                    Some(t) => format!("{base}:{t}"),
                    None => base.to_owned(),
                });
            });
        }
        assert!(matched > 0, "images: {name} matches no container");
    }
    objects
}

/// Calls `f` on every container and init container of a workload's pod
/// template (or of a bare Pod).
fn for_each_container(o: &mut Value, f: &mut dyn FnMut(&mut Value)) {
    let at = match o["kind"].as_str() {
        Some("Pod") => "/spec",
        Some("CronJob") => "/spec/jobTemplate/spec/template/spec",
        _ => "/spec/template/spec",
    };
    let Some(pod) = o.pointer_mut(at) else {
        return;
    };
    for list in ["containers", "initContainers"] {
        if let Some(cs) = pod.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(&mut *f);
        }
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
