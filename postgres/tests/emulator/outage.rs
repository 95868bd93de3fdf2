//! A PostgreSQL outage under a transactional handler, with and without the outage breaker: the
//! server of a throwaway cluster stopped for 90 s while a few thousand messages flow, on a
//! subscription that dead-letters after 5 attempts.

use super::{effects, store_and_table_on, write};
use futures::future::LocalBoxFuture;
use leasehold::error::{ReadError, SourceError};
use leasehold::source::{Connector, MessageSource, Received, StreamSettings, SubscriptionInfo};
use leasehold::status::BreakerState;
use leasehold::{Breaker, Delivery, Registration};
use leasehold_postgres::{LocalPostgres, PgTransaction, PostgresStore};
use leasehold_test_support::{Scratch, eventually};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MESSAGES: usize = 3000;
const MAX_ATTEMPTS: i32 = 5;
/// How long the server is down: the issue asks for at least 60 s.
const OUTAGE: Duration = Duration::from_secs(90);
const FIRST_COOLDOWN: Duration = Duration::from_secs(1);
const MAX_COOLDOWN: Duration = Duration::from_secs(5);

/// What one side of the test saw.
#[derive(Debug)]
struct Seen {
    /// Rows written and distinct payloads among them.
    effects: (i64, i64),
    dead_lettered: u64,
    /// The highest delivery attempt Pub/Sub numbered.
    max_attempt: u32,
    /// From the server's return to the first commit after it.
    resumed_after: Option<Duration>,
    trips: u64,
    /// Deliveries from Pub/Sub, every attempt counted.
    deliveries: u64,
}

/// Every delivery the stream hands over, as Pub/Sub numbered it: the connector of the
/// registration, wrapping the real one.
#[derive(Default)]
struct Deliveries {
    /// The highest attempt of each message.
    attempts: Mutex<HashMap<String, u32>>,
    /// Every delivery.
    total: AtomicU64,
}

struct Watching {
    inner: std::rc::Rc<dyn Connector>,
    seen: Arc<Deliveries>,
}

struct WatchedSource {
    inner: Box<dyn MessageSource>,
    seen: Arc<Deliveries>,
}

impl Connector for Watching {
    fn read_subscription<'a>(
        &'a self,
        subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        self.inner.read_subscription(subscription)
    }
    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        Box::new(WatchedSource {
            inner: self.inner.open(settings),
            seen: self.seen.clone(),
        })
    }
}

impl MessageSource for WatchedSource {
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        Box::pin(async move {
            let next = self.inner.next().await;
            if let Some(Ok(received)) = &next {
                let attempt = received.delivery_attempt.unwrap_or(0);
                let mut attempts = self.seen.attempts.lock();
                let max = attempts.entry(received.message_id.clone()).or_default();
                *max = (*max).max(attempt);
                self.seen.total.fetch_add(1, Ordering::Relaxed);
            }
            next
        })
    }
    fn shutdown(&self) -> LocalBoxFuture<'static, ()> {
        self.inner.shutdown()
    }
}

/// CPU time the calling thread has used (user and system), from `/proc/thread-self/stat`.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel's USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    actix_rt::task::spawn_blocking(f).await.unwrap()
}

/// One side: its own cluster, store, subscription (dead-lettering after 5 attempts) and
/// publisher; `breaker` set or not. Stops the server `OUTAGE` long, mid-run.
async fn run_side(breaker: bool, open_cpu: Arc<Mutex<Option<f64>>>) -> Seen {
    let pg = blocking(|| LocalPostgres::start().unwrap_or_else(|e| panic!("{e}"))).await;
    let pg = Arc::new(Mutex::new(pg));
    let url = pg.lock().url().to_string();
    let store = PostgresStore::connect(&url).await.unwrap();
    let table = store_and_table_on(&store).await;
    let (scratch, dead_subscription) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS).await;

    let deliveries = Arc::new(Deliveries::default());
    let commits: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (t, c) = (table.clone(), commits.clone());
    let mut registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
            write(tx, &t, std::str::from_utf8(&data).unwrap()).await?;
            c.lock().push(Instant::now());
            Ok::<_, leasehold_postgres::tokio_postgres::Error>(d.ack())
        },
    );
    // Handlers on this side's own thread, with its supervisor and client, so that its CPU is
    // that thread's.
    registration = registration.worker_threads(0);
    if breaker {
        registration = registration.breaker(Breaker::new().cooldown(FIRST_COOLDOWN, MAX_COOLDOWN));
    }
    let watching = Watching {
        inner: scratch.connection.connect().await.unwrap(),
        seen: deliveries.clone(),
    };
    let sub = leasehold::start_with(registration, std::rc::Rc::new(watching))
        .await
        .unwrap();
    let dead = Arc::new(AtomicU64::new(0));
    let counted = dead.clone();
    let dead_letters = leasehold::start(
        Registration::raw(&dead_subscription, move |_, d: Delivery| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { d.ack() }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();

    // A few thousand messages over 15 s; the server stops 5 s in.
    let publishing = async {
        for chunk in 0..15 {
            scratch
                .publish_all((chunk * 200..(chunk + 1) * 200).map(|n| n.to_string()))
                .await;
            actix_rt::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let outage = async {
        actix_rt::time::sleep(Duration::from_secs(5)).await;
        let p = pg.clone();
        blocking(move || p.lock().stop_server().unwrap()).await;
        let stopped = Instant::now();
        if breaker {
            eventually("the breaker to open", Duration::from_secs(20), || {
                sub.breaker().unwrap().state != BreakerState::Closed
            })
            .await;
        }
        // The CPU of this side's thread (its supervisor, handlers and client: everything of it
        // runs there) from 20 s to 80 s into the outage: nothing new is published then.
        actix_rt::time::sleep_until((stopped + Duration::from_secs(20)).into()).await;
        let (cpu0, at0) = (thread_cpu(), Instant::now());
        actix_rt::time::sleep_until((stopped + Duration::from_secs(80)).into()).await;
        let share = (thread_cpu() - cpu0).as_secs_f64() / at0.elapsed().as_secs_f64();
        if breaker {
            *open_cpu.lock() = Some(share);
        }
        actix_rt::time::sleep_until((stopped + OUTAGE).into()).await;
        let p = pg.clone();
        blocking(move || p.lock().start_server().unwrap()).await;
        Instant::now()
    };
    let ((), restarted) = futures::join!(publishing, outage);

    // Every message ends committed, or dead-lettered.
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(180);
    while done < MESSAGES as i64 {
        let (rows, _) = effects(&store, &table).await;
        done = rows + dead.load(Ordering::SeqCst) as i64;
        assert!(
            Instant::now() < deadline,
            "{rows} committed, {} dead-lettered of {MESSAGES}; breaker {breaker}",
            dead.load(Ordering::SeqCst)
        );
        actix_rt::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = Seen {
        effects: effects(&store, &table).await,
        dead_lettered: dead.load(Ordering::SeqCst),
        max_attempt: deliveries
            .attempts
            .lock()
            .values()
            .copied()
            .max()
            .unwrap_or(0),
        deliveries: deliveries.total.load(Ordering::Relaxed),
        resumed_after: commits
            .lock()
            .iter()
            .find(|at| **at > restarted)
            .map(|at| at.duration_since(restarted)),
        trips: sub.stats().breaker_trips,
    };
    sub.stop().await;
    dead_letters.stop().await;
    scratch.cleanup().await;
    seen
}

#[actix_rt::test]
async fn a_database_outage_dead_letters_nothing_with_the_breaker_and_much_without() {
    let open_cpu = Arc::new(Mutex::new(None));
    // The side without a breaker on a thread (and an actix system) of its own, at the same time.
    let without =
        std::thread::spawn(|| actix::System::new().block_on(run_side(false, Arc::default())));
    let with = run_side(true, open_cpu.clone()).await;
    let without = blocking(move || without.join().unwrap()).await;
    let open_cpu = open_cpu.lock().expect("measured");
    eprintln!(
        "outage of {OUTAGE:?} on {MESSAGES} messages: with the breaker {with:?}; without \
         {without:?}; CPU of the side with the breaker while open: {:.2} % of a core",
        open_cpu * 100.0
    );
    // With: every message's effect once, none dead-lettered, none delivered more than twice.
    assert_eq!(with.effects, (MESSAGES as i64, MESSAGES as i64));
    assert_eq!(with.dead_lettered, 0);
    assert!(with.max_attempt <= 2, "{with:?}");
    assert!(with.trips >= 1);
    let resumed = with
        .resumed_after
        .expect("commits after the server's return");
    assert!(
        resumed <= MAX_COOLDOWN + Duration::from_secs(1),
        "resumed {resumed:?} after the server's return"
    );
    assert!(open_cpu < 0.05, "{open_cpu}");
    assert!(
        with.deliveries < without.deliveries,
        "held, not redelivered"
    );
    // Without: the same outage dead-letters good messages; what was not is committed once.
    assert!(without.dead_lettered > 0, "{without:?}");
    assert_eq!(without.effects.0, without.effects.1);
    assert_eq!(
        without.effects.0 as u64 + without.dead_lettered,
        MESSAGES as u64
    );
}
