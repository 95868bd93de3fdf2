//! A TCP proxy between the client and the emulator that can cut every connection, black-hole
//! new ones for a while, or lose the server's answers: real network faults, not faults
//! simulated in the code under test.
//!
//! It runs on its own thread and tokio runtime, so it keeps working whatever the test's actix
//! system is doing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    cuts: watch::Sender<u64>,
    stop: watch::Sender<bool>,
}

struct State {
    black_hole: AtomicBool,
    muted: AtomicBool,
    accepted: AtomicU64,
    swallowed: AtomicU64,
}

impl Proxy {
    /// A proxy on a free local port forwarding to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Self {
        let upstream = upstream.to_string();
        let state = Arc::new(State {
            black_hole: AtomicBool::new(false),
            muted: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            swallowed: AtomicU64::new(0),
        });
        let (cuts, cut_rx) = watch::channel(0u64);
        let (stop, stop_rx) = watch::channel(false);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let s = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(upstream, s, cut_rx, stop_rx, addr_tx));
        });
        let addr = addr_rx.recv().unwrap();
        Self {
            addr,
            state,
            cuts,
            stop,
        }
    }

    /// `host:port` to give the client.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Closes every open connection at once.
    pub fn cut_all(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Closes every connection and accepts new ones without forwarding anything: the server
    /// has gone silent. Until [`Proxy::accept`].
    pub fn black_hole(&self) {
        self.state.black_hole.store(true, Ordering::SeqCst);
        self.cut_all();
    }

    /// Forwards new connections again; black-holed ones are closed.
    pub fn accept(&self) {
        self.state.black_hole.store(false, Ordering::SeqCst);
        self.cut_all();
    }

    /// Closes every connection, and forwards what the client sends on new ones but none of the
    /// server's answers: a request reaches the server and its answer is lost (a publish Pub/Sub
    /// took, whose publisher never hears it did). Until [`Proxy::unmute`].
    pub fn mute_replies(&self) {
        self.state.muted.store(true, Ordering::SeqCst);
        self.cut_all();
    }

    /// Forwards the answers again; muted connections are closed.
    pub fn unmute(&self) {
        self.state.muted.store(false, Ordering::SeqCst);
        self.cut_all();
    }

    /// Connections swallowed by the black hole so far.
    pub fn swallowed(&self) -> u64 {
        self.state.swallowed.load(Ordering::SeqCst)
    }

    /// Connections forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.cut_all();
    }
}

async fn serve(
    upstream: String,
    state: Arc<State>,
    cuts: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
    addr_tx: std::sync::mpsc::Sender<SocketAddr>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    addr_tx.send(listener.local_addr().unwrap()).unwrap();
    loop {
        let (client, _) = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let mut cuts = cuts.clone();
        cuts.mark_unchanged();
        if state.black_hole.load(Ordering::SeqCst) {
            state.swallowed.fetch_add(1, Ordering::SeqCst);
            // Hold the connection open, say nothing, until the next cut.
            tokio::spawn(async move {
                let _held = client;
                let _ = cuts.changed().await;
            });
            continue;
        }
        state.accepted.fetch_add(1, Ordering::SeqCst);
        let upstream = upstream.clone();
        let muted = state.muted.load(Ordering::SeqCst);
        tokio::spawn(async move {
            let Ok(Ok(server)) =
                tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&upstream)).await
            else {
                return;
            };
            let (mut client, mut server) = (client, server);
            if muted {
                // The client's bytes go up; the server's are read and dropped.
                let (mut from_client, _to_client) = client.split();
                let (mut from_server, mut to_server) = server.split();
                let drop_answers = async {
                    let mut buffer = [0u8; 16 * 1024];
                    use tokio::io::AsyncReadExt;
                    while matches!(from_server.read(&mut buffer).await, Ok(n) if n > 0) {}
                };
                tokio::select! {
                    _ = cuts.changed() => {}
                    _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                    () = drop_answers => {}
                }
                return;
            }
            tokio::select! {
                _ = cuts.changed() => {}
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
            }
            // Dropping both ends closes the connection.
        });
    }
}
