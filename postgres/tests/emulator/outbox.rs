//! The transactional outbox on PostgreSQL with its relay, on the emulator: what a handler (one
//! message or a batch) or an application's own transaction publishes is sent once its
//! transaction commits, never when it rolls back; one ordering key in commit order; relays
//! sharing rows, a dead relay's lease lapsing, a missing topic kept, Pub/Sub unreachable, and
//! the retention. Each test has its own schema (so its own outbox), topics and sink.

use leasehold::{
    Batch, BatchOutcome, Delivery, OUTBOX_KEY_ATTRIBUTE, OutboxMessage, Outcome, Registration,
};
use leasehold_postgres::{PgTransaction, PostgresStore};
use leasehold_relay::{FailureKind, Relay, RelayOptions};
use leasehold_test_support::{
    PROJECT, Proxy, Scratch, Sink, database_url_in_new_schema, eventually, eventually_showing,
    host, never_within, unique,
};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// A test's consumer topic and subscription (`scratch`), the topic the outbox publishes to with
/// a plain subscriber on it (`sink`), and a store in a schema of its own.
struct Setup {
    scratch: Scratch,
    topic: String,
    sink: Sink,
    store: PostgresStore,
}

async fn setup() -> Setup {
    let mut scratch = Scratch::new(|s| s).await;
    let topic = format!("{PROJECT}/topics/{}", unique("confirmations"));
    scratch.create_topic(&topic).await;
    let sink = Sink::on(&mut scratch, &topic).await;
    let url = database_url_in_new_schema().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    Setup {
        scratch,
        topic,
        sink,
        store,
    }
}

/// A relay that polls only once a minute, so that what it sends within seconds was woken by a
/// commit (or a notification); failures wait at most a second.
fn woken_only() -> RelayOptions {
    RelayOptions::default()
        .poll_interval(Duration::from_secs(60))
        .retry_delay(Duration::from_millis(100))
        .max_retry_delay(Duration::from_secs(1))
}

async fn outbox_rows(store: &PostgresStore, condition: &str) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        .query_one(
            &format!("SELECT count(*) FROM leasehold_outbox WHERE {condition}"),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[actix_rt::test]
async fn what_a_handler_publishes_is_sent_once_its_transaction_commits_and_never_before() {
    let s = setup().await;
    let relay = Relay::start(s.store.clone(), &s.scratch.connection, woken_only())
        .await
        .unwrap();
    let topic = s.topic.clone();
    let runs: Arc<Mutex<HashSet<String>>> = Arc::default();
    let registration = Registration::transactional_raw(
        &s.scratch.subscription,
        s.store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
            let order = String::from_utf8_lossy(&data).into_owned();
            let first = runs.lock().insert(order.clone());
            let confirmed = OutboxMessage::new(&topic, format!("confirmed {order}"))
                .attribute("kind", "OrderConfirmed");
            tx.publish(confirmed).await.map_err(|e| e.to_string())?;
            match order.as_str() {
                // Published, then rolled back by a retry: nothing of the first run is sent.
                "1" if first => Ok(d.retry()),
                // Published, then failed: the same.
                "2" if first => Err("the handler failed after its publish".to_string()),
                _ => Ok(d.ack()),
            }
        },
    );
    let sub = leasehold::start(registration, &s.scratch.connection)
        .await
        .unwrap();
    let ids: Vec<String> =
        futures::future::join_all(["0", "1", "2"].map(|order| s.scratch.publish(order, ""))).await;
    eventually_showing(
        "three confirmations",
        Duration::from_secs(30),
        || s.sink.messages() >= 3,
        || format!("{:?}", s.sink.all()),
    )
    .await;
    never_within("no fourth message", Duration::from_secs(2), || {
        s.sink.messages() > 3
    })
    .await;
    let mut arrived = s.sink.all();
    arrived.sort_by(|a, b| a.data.cmp(&b.data));
    for (n, (a, id)) in arrived.iter().zip(&ids).enumerate() {
        assert_eq!(a.data, format!("confirmed {n}"));
        // The same key on every run of the handler for this message.
        assert_eq!(
            a.key.as_deref(),
            Some(format!("{}/{id}/0", s.scratch.subscription).as_str())
        );
        assert_eq!(
            a.attributes.get("kind").map(String::as_str),
            Some("OrderConfirmed")
        );
    }
    assert_eq!(
        outbox_rows(&s.store, "true").await,
        3,
        "rolled-back rows never existed"
    );
    assert_eq!(outbox_rows(&s.store, "sent_at IS NULL").await, 0);
    sub.stop().await;
    let stats = relay.stop().await;
    assert_eq!((stats.sent, stats.send_failures), (3, 0));
    assert!(!format!("{stats:?}").contains(OUTBOX_KEY_ATTRIBUTE));
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_batch_handlers_messages_are_keyed_by_the_message_each_is_for() {
    let s = setup().await;
    let relay = Relay::start(s.store.clone(), &s.scratch.connection, woken_only())
        .await
        .unwrap();
    let topic = s.topic.clone();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let refusals = refused.clone();
    let registration = Registration::transactional_raw_batch(
        &s.scratch.subscription,
        s.store.clone(),
        async move |batch: Batch<bytes::Bytes>, tx: &mut PgTransaction| {
            if batch.len() > 1 {
                // Several messages claimed: a message must say which it is for.
                let anonymous = tx.publish(OutboxMessage::new(&topic, "which?")).await;
                refusals.lock().push(anonymous.unwrap_err().to_string());
            }
            for item in &batch {
                let id = item.delivery.message_id();
                tx.publish(OutboxMessage::new(&topic, id.to_string()).for_message(id))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(BatchOutcome::all(Outcome::ack()))
        },
    )
    .max_batch_messages(10)
    .max_batch_wait(Duration::from_millis(200));
    let sub = leasehold::start(registration, &s.scratch.connection)
        .await
        .unwrap();
    let ids = s.scratch.publish_all((0..10).map(|n| n.to_string())).await;
    eventually("ten messages", Duration::from_secs(30), || {
        s.sink.messages() >= 10
    })
    .await;
    for a in s.sink.all() {
        assert!(ids.contains(&a.data), "{a:?}");
        assert_eq!(
            a.key.as_deref(),
            Some(format!("{}/{}/0", s.scratch.subscription, a.data).as_str())
        );
    }
    assert!(sub.stats().batches >= 1);
    if let Some(refusal) = refused.lock().first() {
        assert!(refusal.contains("for_message"), "{refusal}");
    }
    sub.stop().await;
    drop(relay);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_application_transaction_publishes_when_it_commits_and_the_relay_is_notified() {
    let s = setup().await;
    let relay = Relay::start(s.store.clone(), &s.scratch.connection, woken_only())
        .await
        .unwrap();
    let mut client = s.store.pool().get().await.unwrap();
    let rolled_back = client.transaction().await.unwrap();
    leasehold_postgres::publish(&*rolled_back, OutboxMessage::new(&s.topic, "never"))
        .await
        .unwrap();
    rolled_back.rollback().await.unwrap();
    let tx = client.transaction().await.unwrap();
    leasehold_postgres::publish(&*tx, OutboxMessage::new(&s.topic, "placed").key("order-7"))
        .await
        .unwrap();
    leasehold_postgres::publish(&*tx, OutboxMessage::new(&s.topic, "random key"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // No commit of this process's store told the relay: LISTEN did, long before its poll.
    eventually("two messages", Duration::from_secs(10), || {
        s.sink.messages() >= 2
    })
    .await;
    never_within(
        "nothing rolled back is sent",
        Duration::from_secs(1),
        || s.sink.all().iter().any(|a| a.data == "never"),
    )
    .await;
    let all = s.sink.all();
    let placed = all.iter().find(|a| a.data == "placed").unwrap();
    assert_eq!(placed.key.as_deref(), Some("order-7"));
    let random = all.iter().find(|a| a.data == "random key").unwrap();
    assert_eq!(random.key.as_ref().map(String::len), Some(32));
    drop(relay);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn one_ordering_keys_messages_arrive_in_the_order_their_transactions_committed() {
    let s = setup().await;
    let relay = Relay::start(s.store.clone(), &s.scratch.connection, woken_only())
        .await
        .unwrap();
    // Each transaction takes a counter's row lock after its publish, held to its commit: the
    // counter's order is the order they committed in (whatever order their tasks resume in).
    let client = s.store.pool().get().await.unwrap();
    client
        .batch_execute("CREATE TABLE commits (n bigint NOT NULL); INSERT INTO commits VALUES (0)")
        .await
        .unwrap();
    drop(client);
    let committed: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    // Twenty transactions at once, each waiting a different while before and after its publish:
    // the order they commit in is not the order they began in.
    let writers = (0..20).map(|n: u64| {
        let (store, topic, committed) = (s.store.clone(), s.topic.clone(), committed.clone());
        async move {
            actix_rt::time::sleep(Duration::from_millis((n * 7) % 20)).await;
            let mut client = store.pool().get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let key = if n.is_multiple_of(4) {
                "other"
            } else {
                "customer-1"
            };
            let m = OutboxMessage::new(&topic, n.to_string()).ordering_key(key);
            leasehold_postgres::publish(&*tx, m).await.unwrap();
            actix_rt::time::sleep(Duration::from_millis((n * 13) % 10)).await;
            let order: i64 = tx
                .query_one("UPDATE commits SET n = n + 1 RETURNING n", &[])
                .await
                .unwrap()
                .get(0);
            tx.commit().await.unwrap();
            committed.lock().push((order, n.to_string()));
        }
    });
    futures::future::join_all(writers).await;
    eventually("twenty messages", Duration::from_secs(30), || {
        s.sink.copies().len() >= 20
    })
    .await;
    committed.lock().sort();
    for key in ["customer-1", "other"] {
        let mut seen = HashSet::new();
        let arrived: Vec<String> = s
            .sink
            .all()
            .into_iter()
            .filter(|a| a.ordering_key == key && seen.insert(a.message_id.clone()))
            .map(|a| a.data)
            .collect();
        let in_commit_order: Vec<String> = committed
            .lock()
            .iter()
            .map(|(_, n)| n)
            .filter(|n| (n.parse::<u64>().unwrap() % 4 == 0) == (key == "other"))
            .cloned()
            .collect();
        assert_eq!(arrived, in_commit_order, "{key}");
        let mut numeric = in_commit_order.clone();
        numeric.sort_by_key(|n| n.parse::<u64>().unwrap());
        if key == "customer-1" {
            assert_ne!(
                in_commit_order, numeric,
                "the commits went in another order"
            );
        }
    }
    drop(relay);
    s.scratch.cleanup().await;
}

async fn publish_rows(store: &PostgresStore, topic: &str, n: usize) {
    let mut client = store.pool().get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    for i in 0..n {
        let key = if i % 10 == 0 { "keyed" } else { "" };
        let m = OutboxMessage::new(topic, i.to_string()).ordering_key(key);
        leasehold_postgres::publish(&*tx, m).await.unwrap();
    }
    tx.commit().await.unwrap();
}

#[actix_rt::test]
async fn two_relays_share_the_rows_and_send_each_once() {
    let s = setup().await;
    let options = woken_only().max_batch(20);
    let first = Relay::start(s.store.clone(), &s.scratch.connection, options.clone())
        .await
        .unwrap();
    let second = Relay::start(s.store.clone(), &s.scratch.connection, options)
        .await
        .unwrap();
    for _ in 0..3 {
        publish_rows(&s.store, &s.topic, 100).await;
    }
    eventually("300 messages", Duration::from_secs(60), || {
        s.sink.messages() >= 300
    })
    .await;
    never_within("no copy", Duration::from_secs(1), || {
        s.sink.messages() > 300
    })
    .await;
    assert!(s.sink.copies().values().all(|n| *n == 1));
    let (a, b) = (first.stop().await, second.stop().await);
    assert_eq!(a.sent + b.sent, 300, "{a:?} {b:?}");
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_dead_relays_rows_are_sent_once_their_lease_lapses() {
    let s = setup().await;
    publish_rows(&s.store, &s.topic, 5).await;
    // A relay that died holding the rows' lease, for 3 s more.
    let client = s.store.pool().get().await.unwrap();
    client
        .execute(
            "UPDATE leasehold_outbox SET lease_owner = 'dead', lease_until = now() + interval '3 s'",
            &[],
        )
        .await
        .unwrap();
    let relay = Relay::start(
        s.store.clone(),
        &s.scratch.connection,
        woken_only().poll_interval(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    never_within("a live lease is kept", Duration::from_secs(2), || {
        !s.sink.is_empty()
    })
    .await;
    eventually(
        "sent once the lease lapsed",
        Duration::from_secs(10),
        || s.sink.messages() == 5,
    )
    .await;
    drop(relay);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_missing_topic_is_kept_counted_and_sent_once_it_exists() {
    let mut s = setup().await;
    let missing = format!("{PROJECT}/topics/{}", unique("later"));
    publish_rows(&s.store, &missing, 1).await;
    let relay = Relay::start(
        s.store.clone(),
        &s.scratch.connection,
        woken_only().poll_interval(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let topic_missing = |r: &Relay| {
        r.stats()
            .failures
            .iter()
            .find(|(k, _)| *k == FailureKind::TopicMissing)
            .map_or(0, |(_, n)| *n)
    };
    eventually("a topic_missing failure", Duration::from_secs(20), || {
        topic_missing(&relay) >= 1
    })
    .await;
    // Counted before it is marked: the mark follows.
    let mut kept = 0;
    for _ in 0..100 {
        kept = outbox_rows(&s.store, "sent_at IS NULL AND last_error = 'topic_missing'").await;
        if kept == 1 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(kept, 1, "the row kept, with its reason");
    s.scratch.create_topic(&missing).await;
    let late = Sink::on(&mut s.scratch, &missing).await;
    eventually(
        "sent once the topic exists",
        Duration::from_secs(20),
        || late.messages() == 1,
    )
    .await;
    assert_eq!(outbox_rows(&s.store, "sent_at IS NULL").await, 0);
    drop(relay);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn rows_wait_while_pub_sub_is_unreachable_and_go_once_it_is_back() {
    let s = setup().await;
    let proxy = Proxy::start(&host());
    let through_proxy = leasehold::Connection::emulator(&proxy.host());
    let options = woken_only()
        .poll_interval(Duration::from_millis(500))
        .send_timeout(Duration::from_secs(2))
        .lease(Duration::from_secs(5));
    let relay = Relay::start(s.store.clone(), &through_proxy, options)
        .await
        .unwrap();
    proxy.black_hole();
    publish_rows(&s.store, &s.topic, 20).await;
    let unavailable = |r: &Relay| r.stats().failures[0].1;
    eventually("sends that failed", Duration::from_secs(20), || {
        unavailable(&relay) >= 1
    })
    .await;
    assert!(s.sink.is_empty());
    proxy.accept();
    eventually_showing(
        "every row once Pub/Sub is back",
        Duration::from_secs(30),
        || s.sink.copies().len() == 20,
        || format!("{:?}", relay.stats()),
    )
    .await;
    let stats = relay.stop().await;
    assert_eq!(stats.failures[0].0, FailureKind::Unavailable);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn sent_rows_are_deleted_after_the_retention_in_small_batches() {
    let s = setup().await;
    publish_rows(&s.store, &s.topic, 7).await;
    let relay = Relay::start(
        s.store.clone(),
        &s.scratch.connection,
        woken_only()
            .sweep_interval(Duration::from_secs(1))
            .sweep_batch(2)
            .retention(Duration::from_secs(24 * 3600)),
    )
    .await
    .unwrap();
    eventually("seven sent", Duration::from_secs(20), || {
        s.sink.messages() == 7
    })
    .await;
    let client = s.store.pool().get().await.unwrap();
    client
        .execute(
            "UPDATE leasehold_outbox SET sent_at = now() - interval '2 days' WHERE seq = 0",
            &[],
        )
        .await
        .unwrap();
    // Six were sent two days ago, one (the keyed row) just now. The relay counts a sweep's
    // batch once its DELETE has answered, so the count can trail the table by a moment: poll
    // for both.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (mut left, mut swept) = (7, 0);
    while std::time::Instant::now() < deadline {
        left = outbox_rows(&s.store, "true").await;
        swept = relay.stats().swept;
        if left == 1 && swept >= 6 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 1, "the row sent within the retention stays");
    assert_eq!(swept, 6, "the six old rows, counted");
    drop(relay);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn invalid_messages_are_refused_before_anything_is_written() {
    let s = setup().await;
    let mut client = s.store.pool().get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let reserved = OutboxMessage::new(&s.topic, "x").attribute(OUTBOX_KEY_ATTRIBUTE, "mine");
    let error = leasehold_postgres::publish(&*tx, reserved)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("key(..)"), "{error}");
    let bad_topic = OutboxMessage::new("orders", "x");
    assert!(leasehold_postgres::publish(&*tx, bad_topic).await.is_err());
    // The transaction is still usable: nothing was sent to the database.
    tx.execute("SELECT 1", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(outbox_rows(&s.store, "true").await, 0);
    s.scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_send_whose_answer_was_lost_is_sent_again_with_the_same_key() {
    let s = setup().await;
    let proxy = Proxy::start(&host());
    let through_proxy = leasehold::Connection::emulator(&proxy.host());
    let options = woken_only()
        .poll_interval(Duration::from_millis(500))
        .send_timeout(Duration::from_secs(2))
        .lease(Duration::from_secs(5));
    let relay = Relay::start(s.store.clone(), &through_proxy, options)
        .await
        .unwrap();
    // Pub/Sub takes the messages; the relay never hears it did.
    proxy.mute_replies();
    publish_rows(&s.store, &s.topic, 3).await;
    eventually(
        "the three messages in Pub/Sub",
        Duration::from_secs(20),
        || s.sink.copies().len() == 3,
    )
    .await;
    eventually("failed sends", Duration::from_secs(20), || {
        relay.stats().failures[0].1 >= 3
    })
    .await;
    proxy.unmute();
    eventually_showing(
        "each sent again",
        Duration::from_secs(30),
        || s.sink.copies().values().all(|n| *n >= 2),
        || format!("{:?} {:?}", s.sink.copies(), relay.stats()),
    )
    .await;
    // Copies with other message ids: only their key tells they are one message.
    let all = s.sink.all();
    let first = &all[0];
    let copies: Vec<_> = all.iter().filter(|a| a.key == first.key).collect();
    assert!(copies.len() >= 2 && copies[0].message_id != copies[1].message_id);
    // Marked once a send is answered (after its arrival, maybe).
    let mut pending = 3;
    for _ in 0..200 {
        pending = outbox_rows(&s.store, "sent_at IS NULL").await;
        if pending == 0 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pending, 0, "every row marked sent: {:?}", relay.stats());
    drop(relay);
    s.scratch.cleanup().await;
}
