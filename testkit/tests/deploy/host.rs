//! Bare-metal deployment: the systemd units and the Slurm scripts.
//!
//! In: `deploy/systemd/*` and `deploy/slurm/*`. Out: failures naming the unit,
//! key or script. `systemd-analyze` checks are skipped with a loud note where
//! it is not installed (and fail under `CI=true`: `make deps` installs it);
//! the static checks always run. The task prolog
//! is run against a real agent, and a rank streams through what it exported.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use rankscope_cli::simulate::{self, SimConfig};

use super::{port_of, read, repo};

/// (unit, binary, config file, exposure threshold x10 for `systemd-analyze security`).
const UNITS: [(&str, &str, &str, u32); 2] = [
    (
        "rankscope-agent.service",
        "rankscope-agent",
        "agent.toml",
        20,
    ),
    (
        "rankscope-collector.service",
        "rankscope-collector",
        "collector.toml",
        15,
    ),
];

/// The value of `key=` in a unit (the last one, as systemd reads it).
fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn systemd_units_run_the_binaries_with_configs_they_accept() {
    for (name, binary, config, _) in UNITS {
        let unit = read(&format!("deploy/systemd/{name}"));
        let exec = unit_value(&unit, "ExecStart").expect("ExecStart");
        let want = format!("/usr/local/bin/{binary} --config /etc/rankscope/{config}");
        assert_eq!(exec, want, "{name}");
        for (key, value) in [
            ("DynamicUser", "yes"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("Restart", "on-failure"),
            ("CapabilityBoundingSet", ""),
            ("ConfigurationDirectory", "rankscope"),
        ] {
            assert_eq!(unit_value(&unit, key), Some(value), "{name}: {key}");
        }
        let text = read(&format!("deploy/systemd/{config}"));
        if binary == "rankscope-agent" {
            let cfg =
                rankscope_agent::Config::from_toml(&text, Path::new(config)).expect("agent.toml");
            let socket = Path::new(&cfg.unix_socket_path);
            let runtime = unit_value(&unit, "RuntimeDirectory").expect("RuntimeDirectory");
            assert_eq!(
                socket.parent(),
                Some(Path::new("/run").join(runtime).as_path()),
                "the socket lives in the unit's RuntimeDirectory"
            );
            assert_eq!(
                unit_value(&unit, "RuntimeDirectoryMode"),
                Some("0755"),
                "users must reach the socket"
            );
            let listen = cfg.listen_socket_addr().expect("listen_addr");
            assert!(listen.ip().is_loopback());
            assert_eq!(
                listen.port(),
                port_of(&rankscope_agent::Config::default().listen_addr)
            );
            let stop_s: u64 = unit_value(&unit, "TimeoutStopSec")
                .and_then(|v| v.strip_suffix('s')?.parse().ok())
                .expect("TimeoutStopSec");
            assert!(
                cfg.shutdown_flush_timeout_ms < stop_s * 1000,
                "systemd would kill the agent mid-flush"
            );
            // The spool is on, in the StateDirectory (kept across restarts,
            // writable under ProtectSystem=strict).
            let state = unit_value(&unit, "StateDirectory").expect("StateDirectory");
            assert!(
                Path::new(&cfg.spool_dir).starts_with(Path::new("/var/lib").join(state)),
                "spool_dir {:?} outside the unit's StateDirectory",
                cfg.spool_dir
            );
        } else {
            let cfg =
                rankscope_collector::Config::from_toml(&text, config).expect("collector.toml");
            let defaults = rankscope_collector::Config::default();
            assert_eq!(
                port_of(&cfg.grpc_listen_addr),
                port_of(&defaults.grpc_listen_addr)
            );
            assert_eq!(
                port_of(&cfg.http_listen_addr),
                port_of(&defaults.http_listen_addr)
            );
        }
    }
}

#[test]
fn systemd_units_pass_systemd_analyze() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        super::missing_tool(
            "systemd-analyze",
            "apt-get install systemd (make deps does)",
        );
        return;
    };
    assert!(version.status.success());
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, _, threshold) in UNITS {
        // verify insists that ExecStart's binary exists: point it at a stub.
        let stub = dir.path().join(binary);
        std::fs::write(&stub, "#!/bin/sh\nexit 0\n").expect("stub");
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let unit = read(&format!("deploy/systemd/{name}")).replace(
            &format!("/usr/local/bin/{binary}"),
            stub.to_str().expect("utf8"),
        );
        let path = dir.path().join(name);
        std::fs::write(&path, unit).expect("unit");

        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&path)
            .output()
            .expect("verify");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Unknown keys and bad values are only warnings ("..., ignoring"): any output fails.
        assert!(
            out.status.success() && said.trim().is_empty(),
            "systemd-analyze verify {name}:\n{said}"
        );

        let out = Command::new("systemd-analyze")
            .args([
                "security",
                "--offline=yes",
                &format!("--threshold={threshold}"),
            ])
            .arg(&path)
            .output()
            .expect("security");
        let said = String::from_utf8_lossy(&out.stdout);
        let overall = said
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or("");
        assert!(
            out.status.success(),
            "{name}: exposure above {}: {overall}",
            threshold as f64 / 10.0
        );
        println!("{name}: {overall}");
    }

    // The check itself catches a misspelt key.
    let bad = dir.path().join("bad.service");
    std::fs::write(
        &bad,
        format!(
            "[Service]\nExecStart={}\nRestartt=always\n",
            dir.path().join("rankscope-agent").display()
        ),
    )
    .expect("bad unit");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&bad)
        .output()
        .expect("verify");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Restartt"),
        "verify no longer reports unknown keys"
    );
}

/// Runs a Slurm script with `vars`, a clean environment and `path_dir` first on PATH.
fn run_script(script: &str, vars: &[(&str, &str)], path_dir: Option<&Path>) -> (bool, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("deploy/slurm").join(script))
        .env_clear();
    let path = match path_dir {
        Some(d) => format!("{}:/usr/bin:/bin", d.display()),
        None => "/usr/bin:/bin".to_owned(),
    };
    cmd.env("PATH", path).envs(vars.iter().copied());
    let out = cmd.output().expect("bash");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn slurm_scripts_are_valid_bash() {
    for script in ["task-prolog.sh", "prolog.sh", "simulate.sbatch"] {
        let out = Command::new("bash")
            .arg("-n")
            .arg(repo().join("deploy/slurm").join(script))
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn slurm_task_prolog_points_a_rank_at_the_running_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("run/agent.sock");
    // Certificates where the unit's agent.toml expects them (moved to the test's dir).
    let tls = dir.path().join("tls");
    let made = Command::new(repo().join("deploy/tls/gen-certs.sh"))
        .arg(&tls)
        .output()
        .expect("gen-certs.sh");
    assert!(made.status.success(), "{made:?}");
    // The agent.toml the unit installs, with the socket and port moved into the test's reach.
    let text = read("deploy/systemd/agent.toml")
        .replace("/etc/rankscope/tls", &tls.display().to_string())
        .replace(
            "/var/lib/rankscope",
            &dir.path().join("state").display().to_string(),
        )
        .replace(
            "\"/run/rankscope/agent.sock\"",
            &format!("{:?}", socket.display().to_string()),
        )
        .replace("\"127.0.0.1:7710\"", "\"127.0.0.1:0\"")
        .replace(
            "shutdown_flush_timeout_ms = 10000",
            "shutdown_flush_timeout_ms = 100",
        )
        .replace(
            "\"https://rankscope-collector:7700\"",
            "\"https://127.0.0.1:9\"",
        );
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, &text).expect("config");
    let mut cfg = rankscope_agent::Config::from_toml(&text, &config).expect("config parses");
    // The default metrics port may be taken by a local stack (`make up`).
    cfg.metrics_listen_addr = "127.0.0.1:0".into();
    assert_eq!(
        Path::new(&cfg.unix_socket_path),
        socket,
        "the replacement took"
    );
    assert!(Path::new(&cfg.spool_dir).starts_with(dir.path()), "{cfg:?}");
    let agent = rankscope_agent::start(cfg).await.expect("agent starts");

    let config_var = ("RANKSCOPE_AGENT_CONFIG", config.to_str().expect("utf8"));
    let (ok, out) = run_script(
        "task-prolog.sh",
        &[config_var, ("SLURM_JOB_ID", "42")],
        None,
    );
    assert!(ok);
    let url = out
        .trim()
        .strip_prefix("export RANKSCOPE_AGENT=")
        .unwrap_or_else(|| panic!("{out:?}"))
        .to_owned();
    assert_eq!(url, format!("unix:{}", socket.display()));

    // A rank pointed there streams to this agent.
    let sim = SimConfig {
        job: "42".into(),
        ranks: 2,
        ranks_per_node: 2,
        steps: 2,
        layers: 1,
        ..SimConfig::default()
    };
    let summary = simulate::run(&sim, &url)
        .await
        .expect("ranks stream to the agent");
    assert!(summary.events_sent > 0);
    let m = agent.metrics();
    assert_eq!(m.accepted_events, summary.events_sent, "{m:?} {summary:?}");
    // With the shipped spool on, a rank's acks wait for its batch to be on
    // disk; the simulator half-closes after its last message, and the agent
    // still sends the acks that were waiting (agent/src/ingest.rs,
    // `drain_acks`): every event is acknowledged, none counted lost.
    assert_eq!(summary.accepted, summary.events_sent, "{summary:?}");
    assert_eq!(summary.lost_disconnected, 0, "{summary:?}");
    assert_eq!(summary.dropped, 0, "{summary:?}");
    agent.shutdown().await;

    // No usable socket: the loopback TCP port, read from the same config.
    let missing = dir.path().join("other.toml");
    std::fs::write(
        &missing,
        "unix_socket_path = \"/nonexistent/agent.sock\"\nlisten_addr = \"0.0.0.0:7711\"\n",
    )
    .expect("config");
    let (ok, out) = run_script(
        "task-prolog.sh",
        &[("RANKSCOPE_AGENT_CONFIG", missing.to_str().expect("utf8"))],
        None,
    );
    assert!(ok);
    assert_eq!(out, "export RANKSCOPE_AGENT=http://127.0.0.1:7711\n");
    // A rank that chose its agent keeps it; no config at all still exits 0.
    let (ok, out) = run_script(
        "task-prolog.sh",
        &[config_var, ("RANKSCOPE_AGENT", "unix:/x")],
        None,
    );
    assert!(ok && out.is_empty(), "{out:?}");
    let (ok, out) = run_script(
        "task-prolog.sh",
        &[("RANKSCOPE_AGENT_CONFIG", "/nonexistent.toml")],
        None,
    );
    assert!(ok);
    assert_eq!(out, "export RANKSCOPE_AGENT=http://127.0.0.1:7710\n");
}

#[test]
fn slurm_prolog_starts_a_stopped_agent_and_never_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls");
    // Stand-ins for systemctl and logger that record their calls; $STATE says
    // whether the agent is active and whether starting it works.
    for tool in ["systemctl", "logger"] {
        let path = dir.path().join(tool);
        let body = format!(
            "#!/bin/sh\necho \"{tool} $*\" >> {log}\n\
             case \"{tool} $1\" in\n\
             'systemctl is-active') [ \"$STATE\" = active ] ;;\n\
             'systemctl start') [ \"$STATE\" = startable ] ;;\n\
             *) exit 0 ;;\nesac\n",
            log = log.display()
        );
        std::fs::write(&path, body).expect("stub");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();
    for (state, want_start, want_log) in [
        ("active", false, false),
        ("startable", true, false),
        ("broken", true, true),
    ] {
        let _ = std::fs::remove_file(&log);
        let (ok, _) = run_script(
            "prolog.sh",
            &[("STATE", state), ("SLURM_JOB_ID", "42")],
            Some(dir.path()),
        );
        assert!(
            ok,
            "{state}: the prolog failed (a failing Prolog drains the node)"
        );
        let calls = calls();
        assert_eq!(
            calls.contains("systemctl start rankscope-agent.service"),
            want_start,
            "{state}: {calls}"
        );
        assert_eq!(
            calls.contains("logger") && calls.contains("job 42"),
            want_log,
            "{state}: {calls}"
        );
    }
}
