//! `Relay`: a running relay's handle. Starting one gives it a thread of its own (a tokio
//! runtime that runs the loop and Google's publisher tasks), so its sends never wait on the
//! subscriptions' threads and theirs never wait on it; its stop drains.

use super::run::Looping;
use crate::rules::options::{InvalidRelayOption, RelayOptions};
use crate::sender::GoogleSender;
use crate::stats::{Counters, RelayStats};
use leasehold::Connection;
use leasehold::error::ConnectError;
use leasehold::store::OutboxStore;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// A relay could not start: nothing was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// An option is out of its range.
    #[error("invalid relay options")]
    InvalidOption(#[from] InvalidRelayOption),
    /// Google's publisher could not be built (no credentials, say).
    #[error("cannot build the relay's publisher")]
    Connect(#[source] ConnectError),
    /// Its thread could not be started.
    #[error("cannot start the relay's thread")]
    Thread(#[source] std::io::Error),
}

/// A running relay: sends what `store`'s transactions published once they commit. Run one in
/// every replica; they share the rows through leases.
///
/// Dropped, it stops as [`stop`](Self::stop) does, without waiting.
///
/// ```no_run
/// # async fn f(store: leasehold_postgres::PostgresStore) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_relay::{Relay, RelayOptions};
/// let relay = Relay::start(store, &leasehold::Connection::from_env(), RelayOptions::default()).await?;
/// // ... consume, publish through the outbox ...
/// let stats = relay.stop().await; // the round being sent finishes; the rest waits for the next start
/// println!("sent {}, failures {}", stats.sent, stats.send_failures);
/// # Ok(()) }
/// ```
#[must_use = "a relay stops when its handle is dropped"]
pub struct Relay {
    owner: String,
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    /// True once its thread has ended (the store and the publishers dropped).
    ended: watch::Receiver<bool>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("owner", &self.owner)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A name for this relay's leases: the host, the process and a random part.
fn owner() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}:{:08x}", std::process::id(), fastrand::u32(..))
}

impl Relay {
    /// Starts relaying `store`'s outbox to the Pub/Sub `connection` reaches, with `options`
    /// (checked first), on a thread of its own. Returns once its publisher is built (no call
    /// is made to Pub/Sub until a row is sent).
    pub async fn start<S: OutboxStore>(
        store: S,
        connection: &Connection,
        options: RelayOptions,
    ) -> Result<Self, RelayError> {
        options.validate()?;
        let counters = Arc::new(Counters::default());
        let owner = owner();
        let (stop, stopped) = watch::channel(false);
        let (ready_tx, ready) = oneshot::channel::<Result<(), ConnectError>>();
        let (ended_tx, ended) = watch::channel(false);
        let (connection, shared, name) = (connection.clone(), counters.clone(), owner.clone());
        let counters_on_thread = counters.clone();
        std::thread::Builder::new()
            .name("leasehold-relay".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime for the relay");
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(async move {
                        let sender =
                            match GoogleSender::connect(&connection, options.send_timeout).await {
                                Ok(sender) => sender,
                                Err(e) => {
                                    let _ = ready_tx.send(Err(e));
                                    return;
                                }
                            };
                        let _ = ready_tx.send(Ok(()));
                        let relay = Looping {
                            store,
                            sender,
                            options,
                            owner: name,
                            counters: shared,
                        };
                        // Consumed: the store and the publishers are dropped when it returns.
                        relay.run(stopped).await;
                    });
                }));
                if ran.is_err() {
                    counters_on_thread.stopped();
                    tracing::error!(
                        "the outbox relay's thread panicked: this relay sends no \
                        more (the rows wait for the other replicas' relays, or a restart)"
                    );
                }
                drop(runtime);
                let _ = ended_tx.send(true);
            })
            .map_err(RelayError::Thread)?;
        match ready.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(RelayError::Connect(e)),
            Err(_) => {
                return Err(RelayError::Thread(std::io::Error::other(
                    "the relay's thread panicked before its publisher was built",
                )));
            }
        }
        tracing::info!(%owner, "outbox relay started");
        Ok(Self {
            owner,
            counters,
            stop,
            ended,
        })
    }

    /// What it did so far.
    pub fn stats(&self) -> RelayStats {
        self.counters.snapshot()
    }

    /// The name its leases carry (host, process id, a random part).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Stops: the round being sent finishes and its rows are marked; what is not leased yet
    /// stays in the outbox for the next start (or another replica's relay). Returns once its
    /// thread has ended, with what it did.
    pub async fn stop(&self) -> RelayStats {
        let _ = self.stop.send(true);
        let mut ended = self.ended.clone();
        // An error: the thread dropped its sender without a word (it panicked); it is over.
        let _ = ended.wait_for(|ended| *ended).await;
        tracing::info!(owner = %self.owner, "outbox relay stopped");
        self.stats()
    }

    /// Whether its thread has ended (after a stop, or a panic in it).
    pub fn is_stopped(&self) -> bool {
        *self.ended.borrow()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
