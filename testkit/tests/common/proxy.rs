//! A TCP proxy the tests can switch off, to take a real server "down" and
//! bring it back without restarting it (the collector keeps its ClickHouse
//! URL; connections through the proxy are refused while it is down). It can
//! also black-hole traffic (`set_blackhole`): connections stay open and
//! nothing moves, as across a network partition that drops packets.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    blackhole: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (up, up_rx) = watch::channel(true);
        let (blackhole, hole_rx) = watch::channel(false);
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
                let mut hole = hole_rx.clone();
                tokio::spawn(async move {
                    if *hole.borrow() {
                        // Held open, silent, until the partition heals.
                        let _ = hole.wait_for(|h| !*h).await;
                        return;
                    }
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut c, mut s) = (client, server);
                    let down = async {
                        let _ = rx.wait_for(|up| !*up).await;
                    };
                    let mut hole2 = hole.clone();
                    let holed = async {
                        let _ = hole2.wait_for(|h| *h).await;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut c, &mut s) => {}
                        () = down => {} // going down cuts live connections
                        () = holed => {
                            // Nothing moves any more; both ends stay open
                            // until the partition heals, then are cut.
                            let _ = hole.wait_for(|h| !*h).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            up,
            blackhole,
            task,
        }
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// Drops all traffic silently (`true`) or heals (`false`).
    #[allow(dead_code)] // not every test module partitions
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.send_replace(on);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
