//! The objects of the Kubernetes manifests against the binaries they run:
//! the agent DaemonSet, the collector Deployment / Service / budget and the
//! ClickHouse reference.
//!
//! In: `deploy/kubernetes/{agent,collector,clickhouse}.yaml` (the chart's
//! default render, see [`super::k8s`]), the binaries' `Config` defaults and
//! parsers, `collector/src/api.rs`. Out: failures naming object and field.

use std::path::Path;

use serde_json::{json, Value};

use super::k8s::{bytes, container, env, find, manifests, resolve_port, selects, service_url};
use super::{port_of, read};
#[test]
fn agent_daemonset_agrees_with_the_agent() {
    let docs = manifests("agent.yaml");
    let ds = find(&docs, "DaemonSet", "rankscope-agent");
    let pod = &ds["spec"]["template"]["spec"];
    assert!(selects(
        &ds["spec"]["selector"]["matchLabels"],
        &ds["spec"]["template"]["metadata"]["labels"]
    ));
    // Rank process mapping, host metrics, NVML through the NVIDIA runtime, GPU nodes only.
    assert_eq!(pod["hostPID"], true);
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["dnsPolicy"], "ClusterFirstWithHostNet",
        "host network pods resolve Services only so"
    );
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert!(pod["nodeSelector"]
        .as_object()
        .is_some_and(|m| !m.is_empty()));
    let agent = container(pod, "agent");
    let env = env(agent);
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "all");
    assert!(env["NVIDIA_DRIVER_CAPABILITIES"]
        .split(',')
        .any(|c| c == "utility"));

    // The config file the container reads parses, and so does it with the
    // flags' environment applied (what main.rs does).
    let cmd: Vec<&str> = agent["command"]
        .as_array()
        .expect("command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(cmd[..2], ["rankscope-agent", "--config"]);
    let cm_name = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "config")
        .expect("config volume")["configMap"]["name"]
        .clone();
    let mount = agent["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "config")
        .expect("config mount");
    let file = Path::new(cmd[2]);
    assert_eq!(
        file.parent().expect("dir").to_str(),
        mount["mountPath"].as_str()
    );
    let cm = find(&docs, "ConfigMap", cm_name.as_str().expect("name"));
    let text = cm["data"][file.file_name().expect("file").to_str().expect("utf8")]
        .as_str()
        .expect("agent.toml in ConfigMap");
    let mut cfg = rankscope_agent::Config::from_toml(text, file).expect("agent.toml parses");
    cfg.listen_addr
        .clone_from(&env["RANKSCOPE_AGENT_LISTEN_ADDR"]);
    cfg.unix_socket_path
        .clone_from(&env["RANKSCOPE_AGENT_UNIX_SOCKET"]);
    cfg.collector_url
        .clone_from(&env["RANKSCOPE_AGENT_COLLECTOR_URL"]);
    cfg.validate().expect("effective agent config");

    // Ports: the binary's default, bound to loopback, probed there.
    let default_port = port_of(&rankscope_agent::Config::default().listen_addr);
    let listen = cfg.listen_socket_addr().expect("listen addr");
    assert_eq!(listen.port(), default_port);
    assert!(
        listen.ip().is_loopback(),
        "the rank port must stay on the node: {listen}"
    );
    assert_eq!(resolve_port(agent, &json!("grpc")), default_port);
    for probe in ["readinessProbe", "livenessProbe"] {
        let tcp = &agent[probe]["tcpSocket"];
        assert_eq!(resolve_port(agent, &tcp["port"]), default_port, "{probe}");
        assert_eq!(
            tcp["host"],
            listen.ip().to_string(),
            "{probe} must dial the address the agent binds"
        );
    }

    // The socket lives in a host directory mounted at the same path.
    let socket_dir = Path::new(&cfg.unix_socket_path)
        .parent()
        .expect("socket dir")
        .to_str()
        .expect("utf8")
        .to_owned();
    let mount = agent["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == socket_dir.as_str())
        .expect("socket dir mounted");
    let vol = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("volume");
    assert_eq!(vol["hostPath"]["path"], socket_dir.as_str());
    let init = container(pod, "socket-dir");
    let sc = &agent["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    let owner = format!("{}:{}", sc["runAsUser"], sc["runAsGroup"]);
    assert_eq!(
        init["command"],
        json!(["chown", owner, socket_dir, cfg.spool_dir]),
        "init container hands the socket and spool dirs to the agent"
    );

    // The collector it sends to is the chart's headless Service (see
    // k8s_scale.rs), on the collector's default port.
    let (svc, ns, port) = service_url(&cfg.collector_url);
    assert_eq!(ns, "rankscope");
    let collector = manifests("collector.yaml");
    let service = find(&collector, "Service", &svc);
    assert!(service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .any(|p| p["port"] == port && p["name"] == "grpc"));
    assert_eq!(
        port,
        port_of(&rankscope_collector::Config::default().grpc_listen_addr)
    );

    // Requests: the footprint target; the memory limit holds the configured buffers.
    let res = &agent["resources"];
    assert_eq!(res["requests"]["cpu"], "10m", "<= 1% of a core");
    assert_eq!(res["requests"]["memory"], "32Mi", "<= 32 MiB RSS");
    let limit = bytes(res["limits"]["memory"].as_str().expect("memory limit"));
    // Events in the queue and the batch being built, each its encoding
    // (budgeted at the decoded size, 96 B: the events ranks send encode in
    // less) plus its range (8 B, x2: vectors grown by doubling); encoded
    // batches in the backlog, and each call's copy of its batch in the gRPC
    // buffers; 64 MiB for the runtime, NVML and gRPC.
    let event = std::mem::size_of::<rankscope_proto::v1::Event>() as u64;
    let range = 2 * std::mem::size_of::<(u32, u32)>() as u64;
    let worst = (cfg.queue_max_events + cfg.batch_max_events) as u64 * (event + range)
        + cfg.backlog_max_bytes as u64
        + (cfg.max_in_flight_batches * cfg.batch_max_events) as u64 * event
        + (64 << 20);
    assert!(
        worst <= limit,
        "buffers may need {worst} bytes, limit is {limit}"
    );
}

#[test]
fn collector_deployment_and_service_agree_with_the_collector() {
    let docs = manifests("collector.yaml");
    let dep = find(&docs, "Deployment", "rankscope-collector");
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&dep["spec"]["selector"]["matchLabels"], labels));
    // Replicas and the agents' headless Service: k8s_scale.rs.
    assert_eq!(dep["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(pod, "collector");
    let env = env(c);
    let defaults = rankscope_collector::Config::default();
    let (grpc, http) = (
        port_of(&defaults.grpc_listen_addr),
        port_of(&defaults.http_listen_addr),
    );

    let text = find(&docs, "ConfigMap", "rankscope-collector")["data"]["collector.toml"]
        .as_str()
        .expect("collector.toml");
    let mut cfg = rankscope_collector::Config::from_toml(text, "collector.toml")
        .expect("collector.toml parses");
    cfg.grpc_listen_addr
        .clone_from(&env["RANKSCOPE_GRPC_LISTEN_ADDR"]);
    cfg.http_listen_addr
        .clone_from(&env["RANKSCOPE_HTTP_LISTEN_ADDR"]);
    cfg.clickhouse
        .url
        .clone_from(&env["RANKSCOPE_CLICKHOUSE_URL"]);
    cfg.clickhouse
        .database
        .clone_from(&env["RANKSCOPE_CLICKHOUSE_DATABASE"]);
    // The default values serve plaintext on the pod network, which the
    // collector only accepts when told so explicitly.
    assert_eq!(
        env.get("RANKSCOPE_ALLOW_INSECURE").map(String::as_str),
        Some("true")
    );
    assert!(!env.contains_key("RANKSCOPE_TLS_CERT_PATH"));
    cfg.allow_insecure = true;
    cfg.validate().expect("effective collector config");
    assert_eq!(
        c["command"],
        json!([
            "rankscope-collector",
            "--config",
            "/etc/rankscope/collector.toml"
        ])
    );
    for (addr, want) in [(&cfg.grpc_listen_addr, grpc), (&cfg.http_listen_addr, http)] {
        let sa: std::net::SocketAddr = addr.parse().expect("ip:port");
        assert_eq!(sa.port(), want);
        assert!(
            sa.ip().is_unspecified(),
            "{addr}: a Service reaches the pod IP only"
        );
    }
    assert_eq!(resolve_port(c, &json!("grpc")), grpc);
    assert_eq!(resolve_port(c, &json!("http")), http);

    // Probes and scrape annotations point at routes the API serves.
    let api = read("collector/src/api.rs");
    for route in ["/healthz", "/metrics"] {
        assert!(
            api.contains(&format!(".route(\"{route}\"")),
            "collector/src/api.rs has no {route}"
        );
    }
    let ready = &c["readinessProbe"]["httpGet"];
    assert_eq!(ready["path"], "/healthz");
    assert_eq!(resolve_port(c, &ready["port"]), http);
    assert_eq!(
        resolve_port(c, &c["livenessProbe"]["tcpSocket"]["port"]),
        http
    );
    let ann = &dep["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], http.to_string());
    assert_eq!(ann["prometheus.io/path"], "/metrics");

    // The Services and the PodDisruptionBudget select these pods: the API's
    // Service serves HTTP, the agents' headless one gRPC (and HTTP).
    for (name, want_ports) in [
        ("rankscope-collector", &[("http", http)][..]),
        (
            "rankscope-collector-headless",
            &[("grpc", grpc), ("http", http)][..],
        ),
    ] {
        let svc = find(&docs, "Service", name);
        assert!(selects(&svc["spec"]["selector"], labels), "{name}");
        let ports = svc["spec"]["ports"].as_array().expect("ports");
        assert_eq!(ports.len(), want_ports.len(), "{name}: {ports:?}");
        for (port, want) in want_ports {
            let p = ports
                .iter()
                .find(|p| p["name"] == *port)
                .unwrap_or_else(|| panic!("{name}: service port {port}"));
            assert_eq!(p["port"], *want);
            assert_eq!(resolve_port(c, &p["targetPort"]), *want);
        }
    }
    let pdb = find(&docs, "PodDisruptionBudget", "rankscope-collector");
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], labels));
    assert_eq!(
        pdb["spec"]["maxUnavailable"], 1,
        "one collector at a time: its jobs move to the others"
    );

    // ClickHouse is the chart's StatefulSet, on the port it serves HTTP on.
    let (name, ns, port) = service_url(&cfg.clickhouse.url);
    assert_eq!(ns, "rankscope");
    let ch = manifests("clickhouse.yaml");
    let ch_svc = find(&ch, "Service", &name);
    let sts = find(&ch, "StatefulSet", "rankscope-clickhouse");
    let server = container(&sts["spec"]["template"]["spec"], "clickhouse");
    let p = ch_svc["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["port"] == port)
        .expect("ClickHouse port");
    assert_eq!(resolve_port(server, &p["targetPort"]), port);
    assert_eq!(resolve_port(server, &json!("http")), port);
}

#[test]
fn clickhouse_reference_is_current_persistent_and_reachable_only_from_the_collector() {
    let docs = manifests("clickhouse.yaml");
    let sts = find(&docs, "StatefulSet", "rankscope-clickhouse");
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&sts["spec"]["selector"]["matchLabels"], labels));
    let pod = &sts["spec"]["template"]["spec"];
    let c = container(pod, "clickhouse");
    let image = c["image"].as_str().expect("image");
    let tag = image
        .strip_prefix("clickhouse/clickhouse-server:")
        .expect("official image");
    let major: u32 = tag
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("versioned tag");
    assert!(major >= 24, "{image}: use a current release");
    assert_eq!(
        env(c)["CLICKHOUSE_SKIP_USER_SETUP"],
        "1",
        "else the image locks 'default' to loopback"
    );
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/ping", "{probe}");
        assert_eq!(resolve_port(c, &c[probe]["httpGet"]["port"]), 8123);
    }
    let data = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/clickhouse")
        .expect("data mount");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        data["name"]
    );
    let svc = find(
        &docs,
        "Service",
        sts["spec"]["serviceName"].as_str().expect("serviceName"),
    );
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert!(selects(&svc["spec"]["selector"], labels));

    let np = find(&docs, "NetworkPolicy", "rankscope-clickhouse");
    assert!(selects(&np["spec"]["podSelector"]["matchLabels"], labels));
    let ingress = np["spec"]["ingress"].as_array().expect("ingress");
    assert_eq!(ingress.len(), 1);
    let collector = manifests("collector.yaml");
    let collector_labels = &find(&collector, "Deployment", "rankscope-collector")["spec"]
        ["template"]["metadata"]["labels"];
    let from = &ingress[0]["from"][0]["podSelector"]["matchLabels"];
    assert!(selects(from, collector_labels));
    assert!(
        !selects(from, labels),
        "the policy must not admit ClickHouse's own label set only"
    );
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": 8123, "protocol": "TCP"}])
    );
}
