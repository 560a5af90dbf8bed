//! [`ClickHouseCluster`]: private ClickHouse servers forming one cluster of N shards
//! (one replica each) over a private [`ZooKeeper`], for tests of the collector's
//! cluster mode (`clickhouse_cluster`).
//!
//! In: a cluster name and a shard count; a ClickHouse server binary and Debian's
//! `zookeeper` package. Out: a handle whose `shards[i]` are ordinary [`ClickHouse`]
//! handles (query each server's local tables through them) and whose cluster answers
//! `ON CLUSTER` DDL.
//!
//! Each server is started by [`ClickHouse`]'s own start-up code from the shared config
//! template, plus one `config.d/cluster.xml` with `remote_servers` (every shard, by its
//! native port), `macros` (`{shard}` = 1..N, `{replica}`), `zookeeper`,
//! `distributed_ddl` and the interserver port replicated tables need.
//!
//! Invariants: `start` returns only once every server answers `/ping` and reaches
//! ZooKeeper (`system.zookeeper` answers); the servers and ZooKeeper die with the handle
//! (servers first) or with the test process (`PR_SET_PDEATHSIG`). A missing ZooKeeper
//! is an error naming the install command, never a skipped test.

mod zookeeper;

use std::time::{Duration, Instant};

use crate::clickhouse::{is_port_clash, pick_port, process, PORT_ATTEMPTS, START_DEADLINE};
use crate::{ClickHouse, TestkitError};
pub use zookeeper::ZooKeeper;

#[cfg(test)]
pub(crate) use zookeeper::INSTALL_HINT;

/// A running cluster of private ClickHouse servers.
pub struct ClickHouseCluster {
    /// The cluster's name in `remote_servers` (what `clickhouse_cluster` names).
    pub name: String,
    /// One server per shard, shard `i + 1` at index `i`. Dropped before ZooKeeper.
    pub shards: Vec<ClickHouse>,
    /// The coordination server of the cluster.
    pub zookeeper: ZooKeeper,
}

/// The ports of one server.
#[derive(Debug, Clone, Copy)]
struct Ports {
    http: u16,
    tcp: u16,
    interserver: u16,
}

impl ClickHouseCluster {
    /// Starts ZooKeeper and `shards` servers forming cluster `name` (`[A-Za-z0-9_]+`).
    pub fn start(name: &str, shards: usize) -> Result<ClickHouseCluster, TestkitError> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(TestkitError::Http(format!(
                "cluster name {name:?} must be [A-Za-z0-9_]+"
            )));
        }
        let binary = process::find_server_binary()?;
        let zookeeper = ZooKeeper::start()?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start_servers(&binary, name, shards.max(1), zookeeper.port) {
                Ok(servers) => {
                    let cluster = ClickHouseCluster {
                        name: name.to_string(),
                        shards: servers,
                        zookeeper,
                    };
                    cluster.wait_for_zookeeper()?;
                    return Ok(cluster);
                }
                Err(e) if is_port_clash(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::StartFailed {
            reason: "no attempt was made".into(),
            log_tail: String::new(),
        }))
    }

    fn try_start_servers(
        binary: &process::ServerBinary,
        name: &str,
        shards: usize,
        zookeeper_port: u16,
    ) -> Result<Vec<ClickHouse>, TestkitError> {
        let ports = (0..shards)
            .map(|_| {
                Ok(Ports {
                    http: pick_port("http")?,
                    tcp: pick_port("tcp")?,
                    interserver: pick_port("interserver http")?,
                })
            })
            .collect::<Result<Vec<_>, TestkitError>>()?;
        let mut servers = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let xml = cluster_xml(name, &ports, i, zookeeper_port);
            // An error drops the servers started so far, which kills them.
            servers.push(ClickHouse::start_private_on(
                binary,
                p.http,
                p.tcp,
                &[("cluster.xml", xml)],
            )?);
        }
        Ok(servers)
    }

    /// Waits until every server has a ZooKeeper session (ClickHouse connects lazily).
    fn wait_for_zookeeper(&self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + START_DEADLINE;
        for (i, server) in self.shards.iter().enumerate() {
            loop {
                match server.query("SELECT count() FROM system.zookeeper WHERE path = '/'") {
                    Ok(_) => break,
                    Err(e) if Instant::now() >= deadline => {
                        return Err(TestkitError::StartFailed {
                            reason: format!(
                                "shard {} cannot reach ZooKeeper on port {}: {e}",
                                i + 1,
                                self.zookeeper.port
                            ),
                            log_tail: server.log_tail(),
                        })
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(25)),
                }
            }
        }
        Ok(())
    }
}

impl Drop for ClickHouseCluster {
    fn drop(&mut self) {
        // Servers before their ZooKeeper, so they never run without it.
        self.shards.clear();
    }
}

impl std::fmt::Debug for ClickHouseCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseCluster")
            .field("name", &self.name)
            .field("shards", &self.shards)
            .field("zookeeper", &self.zookeeper)
            .finish()
    }
}

/// `config.d/cluster.xml` of server `index` (shard `index + 1`).
fn cluster_xml(name: &str, ports: &[Ports], index: usize, zookeeper_port: u16) -> String {
    let shards: String = ports
        .iter()
        .map(|p| {
            format!(
                "            <shard>\n                \
                 <internal_replication>true</internal_replication>\n                \
                 <replica><host>127.0.0.1</host><port>{}</port></replica>\n            \
                 </shard>\n",
                p.tcp
            )
        })
        .collect();
    format!(
        r#"<?xml version="1.0"?>
<!-- Cluster membership of a rankscope-testkit server (merged into config.xml). -->
<yandex>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <interserver_http_port>{interserver}</interserver_http_port>
    <remote_servers>
        <{name}>
{shards}        </{name}>
    </remote_servers>
    <macros>
        <shard>{shard}</shard>
        <replica>replica{shard}</replica>
    </macros>
    <zookeeper>
        <node><host>127.0.0.1</host><port>{zookeeper_port}</port></node>
        <session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</yandex>
"#,
        interserver = ports[index].interserver,
        shard = index + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::tests::process_alive;

    #[test]
    fn a_cluster_runs_distributed_ddl_and_dies_with_its_handle() {
        let cluster = ClickHouseCluster::start("kit", 2).unwrap_or_else(|e| panic!("{e}"));
        let [s1, s2] = &cluster.shards[..] else {
            panic!("two shards")
        };
        let members = s2
            .query("SELECT shard_num FROM system.clusters WHERE cluster = 'kit' ORDER BY shard_num")
            .unwrap();
        assert_eq!(members, "1\n2\n");
        assert_eq!(
            s2.query("SELECT substitution FROM system.macros WHERE macro = 'shard'")
                .unwrap(),
            "2\n"
        );
        s1.query("CREATE DATABASE kit_db ON CLUSTER kit")
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", s1.log_tail(), s2.log_tail()));
        assert_eq!(
            s2.query("SELECT count() FROM system.databases WHERE name = 'kit_db'")
                .unwrap(),
            "1\n"
        );
        s1.query(
            "CREATE TABLE kit_db.t ON CLUSTER kit (x UInt64) ENGINE = \
             ReplicatedMergeTree('/clickhouse/tables/{shard}/kit_db/t', '{replica}') ORDER BY x",
        )
        .unwrap();
        s2.query("INSERT INTO kit_db.t VALUES (7)").unwrap();
        assert_eq!(
            s1.query("SELECT sum(x) FROM cluster('kit', kit_db, t)")
                .unwrap(),
            "7\n"
        );

        let pids: Vec<u32> = cluster
            .shards
            .iter()
            .filter_map(ClickHouse::pid)
            .chain([cluster.zookeeper.pid()])
            .collect();
        let zk_dir = cluster.zookeeper.dir().to_path_buf();
        assert_eq!(pids.len(), 3);
        drop(cluster);
        for pid in pids {
            assert!(!process_alive(pid as i32), "{pid} outlived its handle");
        }
        assert!(!zk_dir.exists(), "{zk_dir:?} left behind");
    }

    #[test]
    fn cluster_xml_lists_every_shard_and_its_own_macros() {
        let ports = [
            Ports {
                http: 1,
                tcp: 9101,
                interserver: 9201,
            },
            Ports {
                http: 2,
                tcp: 9102,
                interserver: 9202,
            },
        ];
        let xml = cluster_xml("c2", &ports, 1, 2181);
        assert!(xml.contains("<c2>") && xml.contains("</c2>"), "{xml}");
        assert!(xml.contains("<port>9101</port>") && xml.contains("<port>9102</port>"));
        assert!(xml.contains("<shard>2</shard>"), "{xml}");
        assert!(xml.contains("<interserver_http_port>9202</interserver_http_port>"));
        assert!(xml.contains("<port>2181</port>"));
    }
}
