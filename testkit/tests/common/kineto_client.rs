//! A stand-in for libkineto's daemon client in a process the test controls:
//! it polls the agent's abstract socket `@<daemon>` on behalf of a pid (the
//! agent attributes the pid by its environment) and returns the config it
//! is given, as libkineto's `IpcFabricConfigClient` would.

use std::time::Duration;

pub struct FakeClient {
    socket: std::os::unix::net::UnixDatagram,
    daemon: String,
}

impl FakeClient {
    /// `tag` makes the client's own socket name unique; `daemon` is the
    /// agent's `kineto_daemon_name`.
    pub fn new(tag: &str, daemon: &str) -> Self {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("rankscope-test-client-{tag}-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = std::os::unix::net::UnixDatagram::bind_addr(&addr).expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        Self {
            socket,
            daemon: daemon.to_owned(),
        }
    }

    /// One `req` poll for `pid`: the config text ("" = nothing to do).
    pub fn poll(&self, pid: u32) -> String {
        use rankscope_agent::kineto::wire;
        use std::os::linux::net::SocketAddrExt;
        let mut payload = Vec::new();
        payload.extend_from_slice(&wire::CONFIG_TYPE_ACTIVITIES.to_ne_bytes());
        payload.extend_from_slice(&1i32.to_ne_bytes());
        payload.extend_from_slice(&0i64.to_ne_bytes());
        payload.extend_from_slice(&(pid as i32).to_ne_bytes());
        let mut name = self.daemon.clone().into_bytes();
        name.push(0);
        let daemon = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        self.socket
            .send_to_addr(&wire::encode("req", &payload), &daemon)
            .expect("send");
        let mut buf = vec![0u8; 65536];
        let n = self.socket.recv(&mut buf).expect("the agent answers");
        String::from_utf8_lossy(&buf[wire::HEADER_BYTES..n]).into_owned()
    }
}
