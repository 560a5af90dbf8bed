//! A TCP proxy the tests can switch off, to take a real server "down" and
//! bring it back without restarting it (the collector keeps its ClickHouse
//! URL; connections through the proxy are refused while it is down).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (up, up_rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if !*up_rx.borrow() {
                    drop(client); // down: close at once
                    continue;
                }
                let mut rx = up_rx.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut c, mut s) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut c, &mut s) => {}
                        _ = rx.wait_for(|up| !*up) => {} // going down cuts live connections
                    }
                });
            }
        });
        Self { addr, up, task }
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
