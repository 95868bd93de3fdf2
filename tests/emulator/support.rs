//! Shared set-up: the emulator, scratch topics and subscriptions, a record of what handlers saw,
//! and polling with a deadline.

use google_cloud_pubsub::client::{Publisher, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{DeadLetterPolicy, Message, Subscription};
use leasehold::emulator::EmulatorHost;
use leasehold::{Connection, Delivery};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub const PROJECT: &str = "projects/leasehold-test";

static EMULATOR: OnceLock<EmulatorHost> = OnceLock::new();

/// Everything Leasehold logs in this test binary, at trace level, without colour codes.
static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the process-wide log capture once. (A per-test subscriber would miss events whose
/// call sites other tests reached first, when no subscriber was interested.)
fn capture_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Captured(buffer.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("leasehold=trace,leasehold_actors=trace")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one log capture");
        buffer
    })
}

/// What Leasehold logged so far in this test binary.
pub fn captured_logs() -> String {
    String::from_utf8_lossy(&capture_logs().lock()).into_owned()
}

/// The emulator for this test binary. Fails (never skips) when there is none.
fn emulator() -> &'static EmulatorHost {
    capture_logs();
    EMULATOR.get_or_init(|| {
        EmulatorHost::from_env_or_start().unwrap_or_else(|e| panic!("cannot run the tests: {e}"))
    })
}

/// A connection to the emulator.
pub fn connection() -> Connection {
    emulator().connection()
}

/// The emulator's `host:port`.
pub fn host() -> String {
    emulator().host().to_string()
}

/// A unique resource id for this run.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A topic and a subscription made for one test, deleted by [`Scratch::cleanup`].
pub struct Scratch {
    pub connection: Connection,
    topic: String,
    pub subscription: String,
    pub publisher: Publisher,
    topics: TopicAdmin,
    subscriptions: SubscriptionAdmin,
    created_topics: Vec<String>,
    created_subscriptions: Vec<String>,
}

impl Scratch {
    /// A new topic and a subscription on it, shaped by `configure` (ack deadline 10 s unless it
    /// says otherwise).
    pub async fn new(configure: impl FnOnce(Subscription) -> Subscription) -> Self {
        let mut scratch = Self::topic_only().await;
        scratch.subscribe(configure).await;
        scratch
    }

    /// A new topic with no subscription yet.
    async fn topic_only() -> Self {
        let connection = connection();
        let topics = connection.topic_admin().await.unwrap();
        let subscriptions = connection.subscription_admin().await.unwrap();
        let topic = format!("{PROJECT}/topics/{}", unique("t"));
        let subscription = format!("{PROJECT}/subscriptions/{}", unique("s"));
        let publisher = connection.publisher(&topic).await.unwrap();
        let mut scratch = Self {
            connection,
            topic: topic.clone(),
            subscription,
            publisher,
            topics,
            subscriptions,
            created_topics: Vec::new(),
            created_subscriptions: Vec::new(),
        };
        scratch.create_topic(&topic).await;
        scratch
    }

    /// Creates the test's subscription on its topic.
    async fn subscribe(&mut self, configure: impl FnOnce(Subscription) -> Subscription) {
        let spec = configure(
            Subscription::new()
                .set_name(&self.subscription)
                .set_topic(&self.topic)
                .set_ack_deadline_seconds(10),
        );
        self.create_subscription(spec).await;
    }

    pub async fn create_topic(&mut self, name: &str) {
        self.topics
            .create_topic()
            .set_name(name)
            .send()
            .await
            .unwrap();
        self.created_topics.push(name.to_string());
    }

    pub async fn create_subscription(&mut self, spec: Subscription) {
        let name = spec.name.clone();
        self.subscriptions
            .create_subscription()
            .with_request(spec)
            .send()
            .await
            .unwrap();
        self.created_subscriptions.push(name);
    }

    /// Adds a dead-letter topic with `max_attempts`, and a subscription on it that the test can
    /// consume. Returns that subscription's name.
    pub async fn with_dead_letter_topic(
        configure: impl FnOnce(Subscription) -> Subscription,
        max_attempts: i32,
    ) -> (Self, String) {
        let mut scratch = Self::topic_only().await;
        // The dead-letter topic must exist before a subscription names it.
        let dead_topic = format!("{PROJECT}/topics/{}", unique("dlt"));
        scratch.create_topic(&dead_topic).await;
        scratch
            .subscribe(|s| {
                configure(
                    s.set_dead_letter_policy(
                        DeadLetterPolicy::new()
                            .set_dead_letter_topic(&dead_topic)
                            .set_max_delivery_attempts(max_attempts),
                    ),
                )
            })
            .await;
        let dead_subscription = format!("{PROJECT}/subscriptions/{}", unique("dls"));
        scratch
            .create_subscription(
                Subscription::new()
                    .set_name(&dead_subscription)
                    .set_topic(&dead_topic)
                    .set_ack_deadline_seconds(10),
            )
            .await;
        (scratch, dead_subscription)
    }

    /// Publishes `data` (with an ordering key when not empty); returns the message id.
    pub async fn publish(&self, data: &str, ordering_key: &str) -> String {
        let mut m = Message::new().set_data(data.to_string());
        if !ordering_key.is_empty() {
            m = m.set_ordering_key(ordering_key);
        }
        self.publisher.publish(m).await.unwrap()
    }

    /// Publishes every payload at once (the publisher batches them); returns the message ids.
    pub async fn publish_all(&self, payloads: impl IntoIterator<Item = String>) -> Vec<String> {
        let futures: Vec<_> = payloads
            .into_iter()
            .map(|p| self.publisher.publish(Message::new().set_data(p)))
            .collect();
        futures::future::join_all(futures)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
    }

    /// Deletes the test's subscription now (to make it vanish under a running consumer).
    pub async fn delete_subscription(&self) {
        self.subscriptions
            .delete_subscription()
            .set_subscription(&self.subscription)
            .send()
            .await
            .unwrap();
    }

    /// Deletes what the test created: the emulator keeps leasing messages of a closed stream
    /// until its subscription is deleted.
    pub async fn cleanup(self) {
        for s in self.created_subscriptions.iter().rev() {
            let _ = self
                .subscriptions
                .delete_subscription()
                .set_subscription(s)
                .send()
                .await;
        }
        for t in self.created_topics.iter().rev() {
            let _ = self.topics.delete_topic().set_topic(t).send().await;
        }
    }
}

/// One delivery a handler saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub message_id: String,
    pub data: String,
    pub attempt: Option<u32>,
    pub at: Instant,
}

/// Everything handlers saw, shared between the handler and the test.
#[derive(Debug, Clone, Default)]
pub struct Record(Arc<Mutex<Vec<Seen>>>);

impl Record {
    pub fn saw(&self, data: &str, delivery: &Delivery) {
        self.0.lock().push(Seen {
            message_id: delivery.message_id().to_string(),
            data: data.to_string(),
            attempt: delivery.delivery_attempt(),
            at: Instant::now(),
        });
    }
    /// Records a delivery of a text payload; returns the text.
    pub fn saw_payload(&self, data: &[u8], delivery: &Delivery) -> String {
        let text = String::from_utf8_lossy(data).into_owned();
        self.saw(&text, delivery);
        text
    }
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().clone()
    }
    /// Deliveries of the message with payload `data`.
    pub fn of(&self, data: &str) -> Vec<Seen> {
        self.all().into_iter().filter(|s| s.data == data).collect()
    }
}

/// Polls `done` every 50 ms until it holds; fails after `within`.
pub async fn eventually(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `broken` every 50 ms for `period`, failing as soon as it holds: for claims such as "not
/// redelivered after the ack deadline".
pub async fn never_within(what: &str, period: Duration, mut broken: impl FnMut() -> bool) {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        assert!(!broken(), "{what}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}
