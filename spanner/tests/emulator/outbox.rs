//! The transactional outbox on Spanner with its relay, on the emulators: what a handler
//! publishes is sent once its transaction commits; a run the emulator aborted, or one that
//! failed after its publish, sends nothing (each order's message arrives once, with the key of
//! its first place); one ordering key's places follow the commit timestamps and arrive in
//! that order.

use super::store_and_tables;
use leasehold::{Delivery, OutboxMessage, Registration};
use leasehold_relay::{Relay, RelayOptions};
use leasehold_spanner::SpannerTransaction;
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_test_support::{PROJECT, Scratch, Sink, eventually_showing, never_within, unique};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

#[actix_rt::test]
async fn what_a_handler_publishes_is_sent_once_and_aborted_or_failed_runs_send_nothing() {
    let mut scratch = Scratch::new(|s| s).await;
    let topic = format!("{PROJECT}/topics/{}", unique("confirmations"));
    scratch.create_topic(&topic).await;
    let sink = Sink::on(&mut scratch, &topic).await;
    let store = store_and_tables().await;
    let relay = Relay::start(
        store.clone(),
        &scratch.connection,
        RelayOptions::default().poll_interval(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let (out, failed_once) = (topic.clone(), Arc::new(Mutex::new(HashSet::new())));
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
            let order = String::from_utf8_lossy(&data).into_owned();
            let key = if order.parse::<u32>().unwrap() % 2 == 0 {
                "even"
            } else {
                "odd"
            };
            let confirmed = OutboxMessage::new(&out, order.clone()).ordering_key(key);
            tx.publish(confirmed).await.map_err(|e| e.to_string())?;
            // Every order ending in 5 fails after its publish the first time: rolled back.
            if order.ends_with('5') && failed_once.lock().insert(order) {
                return Err("failed after the publish".to_string());
            }
            Ok(d.ack())
        },
    )
    // Handlers side by side: the emulator aborts all transactions but one, and they run again.
    .workers(4);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let ids = scratch.publish_all((0..30).map(|n| n.to_string())).await;
    eventually_showing(
        "30 confirmations",
        Duration::from_secs(120),
        || sink.copies().len() >= 30,
        || format!("{} arrived, relay {:?}", sink.messages(), relay.stats()),
    )
    .await;
    never_within("no second copy", Duration::from_secs(2), || {
        sink.messages() > 30
    })
    .await;
    let stats = sub.stats();
    assert!(
        stats.store_aborts > 0,
        "the emulator aborted some runs: {stats:?}"
    );
    for a in sink.all() {
        let n: usize = a.data.parse().unwrap();
        assert_eq!(
            a.key.as_deref(),
            Some(format!("{}/{}/0", scratch.subscription, ids[n]).as_str())
        );
    }
    // One key's places follow its commits, and its messages arrived in that order.
    let mut tx = store.client().single().await.unwrap();
    let by_commit = Statement::new(
        "SELECT ordering_key, seq, data FROM leasehold_outbox ORDER BY created_at, seq",
    );
    let mut rows = tx.query(by_commit).await.unwrap();
    let mut committed: Vec<(String, i64, String)> = Vec::new();
    while let Some(row) = rows.next().await.unwrap() {
        let data: Vec<u8> = row.column(2).unwrap();
        committed.push((
            row.column::<Option<String>>(0).unwrap().unwrap_or_default(),
            row.column(1).unwrap(),
            String::from_utf8(data).unwrap(),
        ));
    }
    assert_eq!(committed.len(), 30, "aborted and failed runs left no row");
    for key in ["even", "odd"] {
        let of_key: Vec<&(String, i64, String)> = committed.iter().filter(|c| c.0 == key).collect();
        let seqs: Vec<i64> = of_key.iter().map(|c| c.1).collect();
        assert_eq!(
            seqs,
            (1..=15).collect::<Vec<i64>>(),
            "{key}: places in commit order"
        );
        let mut seen = HashSet::new();
        let arrived: Vec<String> = sink
            .all()
            .into_iter()
            .filter(|a| a.ordering_key == key && seen.insert(a.message_id.clone()))
            .map(|a| a.data)
            .collect();
        let sent_in_order: Vec<String> = of_key.iter().map(|c| c.2.clone()).collect();
        assert_eq!(arrived, sent_in_order, "{key}: arrival order");
    }
    sub.stop().await;
    let relayed = relay.stop().await;
    assert_eq!(relayed.sent, 30);

    // Sent two days ago: a relay with a day's retention deletes them, seven at a time.
    let old = "UPDATE leasehold_outbox SET sent_at = TIMESTAMP_SUB(sent_at, INTERVAL 2 DAY) \
               WHERE sent_at IS NOT NULL";
    store
        .client()
        .read_write_transaction::<i64, leasehold_spanner::gcloud_spanner::client::Error, _>(|tx| {
            Box::pin(async move { Ok(tx.update(Statement::new(old)).await?) })
        })
        .await
        .unwrap();
    let sweeper = Relay::start(
        store.clone(),
        &scratch.connection,
        RelayOptions::default()
            .retention(Duration::from_secs(24 * 3600))
            .sweep_batch(7),
    )
    .await
    .unwrap();
    eventually_showing(
        "the 30 old rows deleted",
        Duration::from_secs(30),
        || sweeper.stats().swept == 30,
        || format!("{:?}", sweeper.stats()),
    )
    .await;
    drop(sweeper);
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_application_transaction_publishes_when_it_commits_and_not_when_it_rolls_back() {
    let mut scratch = Scratch::new(|s| s).await;
    let topic = format!("{PROJECT}/topics/{}", unique("placed"));
    scratch.create_topic(&topic).await;
    let sink = Sink::on(&mut scratch, &topic).await;
    let store = store_and_tables().await;
    let relay = Relay::start(
        store.clone(),
        &scratch.connection,
        RelayOptions::default().poll_interval(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    // The emulator runs one read-write transaction at a time and aborts one begun beside the
    // relay's (its first lease, its backlog read): an application runs its transaction again
    // after an abort, as `SpannerStore::transaction`'s doc says.
    if let Ok(mut rolled_back) = store.transaction().await {
        let _ = rolled_back
            .publish(OutboxMessage::new(&topic, "never"))
            .await;
        rolled_back.rollback().await;
    }
    let mut last_error = String::new();
    let mut committed = false;
    for _ in 0..20 {
        let mut tx = match store.transaction().await {
            Ok(tx) => tx,
            Err(e) => {
                last_error = format!("{e:?}");
                continue;
            }
        };
        let mut published = Ok(());
        for (data, key) in [("placed", Some("order-7")), ("random key", None)] {
            let mut m = OutboxMessage::new(&topic, data).ordering_key("order-7");
            if let Some(key) = key {
                m = m.key(key);
            }
            published = tx.publish(m).await.map_err(|e| format!("{e:?}"));
            if published.is_err() {
                break;
            }
        }
        match published {
            Ok(()) => match tx.commit().await {
                Ok(()) => {
                    committed = true;
                    break;
                }
                Err(e) => last_error = format!("{e:?}"),
            },
            Err(e) => {
                last_error = e;
                tx.rollback().await;
            }
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(committed, "twenty runs aborted, the last: {last_error}");
    // Woken by the commit in this process, not by its minute-long poll.
    eventually_showing(
        "two messages",
        Duration::from_secs(20),
        || sink.messages() >= 2,
        || format!("{:?}", relay.stats()),
    )
    .await;
    never_within(
        "nothing rolled back is sent",
        Duration::from_secs(1),
        || sink.messages() > 2,
    )
    .await;
    let all = sink.all();
    assert_eq!(all[0].data, "placed", "one key, in order");
    assert_eq!(all[0].key.as_deref(), Some("order-7"));
    assert_eq!(all[1].key.as_ref().map(String::len), Some(32));
    drop(relay);
    scratch.cleanup().await;
}
