//! Where the pooled connections' I/O runs: on one thread of Leasehold's own per process.
//!
//! tokio-postgres splits a connection into a client and a task that does its I/O, and
//! deadpool-postgres spawns that task on the thread that opens the connection. Handlers run on
//! worker threads, which a stop ends and a death restarts: a connection opened there would be
//! cut with its thread while the pool still lends it, and a handler that blocks its thread
//! would stall every other handler's statements on connections opened there.

use deadpool_postgres::{Connect, Manager, ManagerConfig, RecyclingMethod};
use futures::future::BoxFuture;
use std::sync::OnceLock;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Error, Socket};

/// The channel outbox rows are announced on (`leasehold_outbox_insert` notifies it; a relay's
/// connection listens).
pub(crate) const OUTBOX_CHANNEL: &str = "leasehold_outbox";

/// This process, as its outbox rows' notifications name it: its relays are woken by its own
/// commits already, and skip those.
pub(crate) fn origin() -> &'static str {
    static ORIGIN: OnceLock<String> = OnceLock::new();
    ORIGIN.get_or_init(|| format!("{}:{:08x}", std::process::id(), fastrand::u32(..)))
}

/// Counts the notifications on [`OUTBOX_CHANNEL`] any connection of this process received:
/// what a relay's wake-ups watch. (Connections of several databases share it: a notification
/// from one wakes the relays of all, which then find nothing to send.)
pub(crate) fn outbox_notifications() -> &'static tokio::sync::watch::Sender<u64> {
    static NOTIFIED: OnceLock<tokio::sync::watch::Sender<u64>> = OnceLock::new();
    NOTIFIED.get_or_init(|| tokio::sync::watch::channel(0).0)
}

/// Drives a connection to its end, passing its notifications on [`OUTBOX_CHANNEL`] from other
/// processes to [`outbox_notifications`] (only a connection that ran `LISTEN` gets any).
async fn drive<S, T>(mut connection: Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n)))
                if n.channel() == OUTBOX_CHANNEL && n.payload() != origin() =>
            {
                outbox_notifications().send_modify(|count| *count = count.wrapping_add(1));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "a PostgreSQL connection ended with an error");
                return;
            }
            None => return,
        }
    }
}

/// The thread that drives every connection, started on first use and kept for the process.
fn driver() -> &'static Handle {
    static DRIVER: OnceLock<Handle> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for PostgreSQL connections");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("leasehold-postgres".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("a thread for PostgreSQL connections");
        handle
    })
}

/// Opens connections with `tls` and drives them on the driver thread.
struct OnDriverThread<T> {
    tls: T,
}

impl<T> Connect for OnDriverThread<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(&self, config: &Config) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), Error>> {
        let (tls, config) = (self.tls.clone(), config.clone());
        Box::pin(async move {
            let opening = driver().spawn(async move {
                let (client, connection) = config.connect(tls).await?;
                let driven = tokio::spawn(drive(connection));
                Ok((client, driven))
            });
            match opening.await {
                Ok(opened) => opened,
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    // Cancelled: the driver's runtime never shuts down while the process runs.
                    Err(e) => panic!("opening a PostgreSQL connection was cancelled: {e}"),
                },
            }
        })
    }
}

/// A deadpool manager for [`PostgresStore::with_pool`](crate::PostgresStore::with_pool): its
/// connections are opened with `tls` (`tokio_postgres::NoTls`, or a TLS connector such as
/// `postgres-native-tls`'s or `tokio-postgres-rustls`'s) and their I/O runs on a thread of
/// Leasehold's own, so a connection outlives the worker thread that first used it and a
/// handler that blocks its thread stalls no other handler's statements. Recycling is
/// deadpool's `Fast`.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_postgres::{PostgresStore, deadpool_postgres::Pool, manager, tokio_postgres};
///
/// let config: tokio_postgres::Config = "postgres://app@db/app".parse()?;
/// let pool = Pool::builder(manager(config, tokio_postgres::NoTls)).max_size(32).build()?;
/// let store = PostgresStore::with_pool(pool).await?;
/// # Ok(()) }
/// ```
pub fn manager<T>(config: Config, tls: T) -> Manager
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    Manager::from_connect(
        config,
        OnDriverThread { tls },
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    )
}
