//! The schema service unreachable for 10 s while messages of a revision not fetched yet arrive:
//! they are retried, none is dropped, the outage is logged once, and each is handled once the
//! service is back.

use crate::support::{Order, Scene, Seen, V1, V2, consume, v2};
use google_cloud_pubsub::model::Encoding;
use leasehold::Connection;
use leasehold_schema::{ReaderRevision, Schemas};
use leasehold_test_support::{Proxy, captured_logs, eventually, eventually_showing, host};
use std::time::{Duration, Instant};

#[actix_rt::test]
async fn messages_wait_out_an_outage_of_the_schema_service_and_none_is_dropped() {
    let (scene, _) = Scene::avro(V1, Some(Encoding::Binary)).await;
    // The schema service through a proxy that can go silent; Pub/Sub itself directly.
    let proxy = Proxy::start(&host());
    let schemas = Schemas::connect(&Connection::emulator(&proxy.host()))
        .await
        .unwrap();
    let decoder = schemas
        .avro::<Order>(&scene.schema, ReaderRevision::Latest)
        .await
        .unwrap();
    let stats = decoder.stats();
    let seen = Seen::default();
    let subscription = consume(&scene, decoder, &seen).await;
    proxy.black_hole();
    let outage = Instant::now();
    let second = scene.commit(V2).await;
    for id in 100..110 {
        scene.publish(v2(id, &Encoding::Binary), &[]).await;
    }
    eventually(
        "a failed fetch and retried messages",
        Duration::from_secs(20),
        || stats.report().fetch_failures > 0 && subscription.stats().retried > 0,
    )
    .await;
    // The outage lasts 10 s, whatever the test saw meanwhile.
    actix_rt::time::sleep(Duration::from_secs(10).saturating_sub(outage.elapsed())).await;
    assert!(
        seen.ids().is_empty(),
        "nothing decoded without its revision"
    );
    assert!(
        seen.refused.lock().is_empty(),
        "nothing sent to the failure policy"
    );
    proxy.accept();
    let expected: Vec<i64> = (100..110).collect();
    eventually_showing(
        "every message handled",
        Duration::from_secs(40),
        || seen.ids() == expected,
        || format!("{:?}, {:?}", seen.ids(), stats.report()),
    )
    .await;
    let retried = subscription.stats().retried;
    subscription.stop().await;
    assert!(seen.refused.lock().is_empty());
    assert_eq!(seen.ids_of(&second), expected);
    let warnings = captured_logs()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("cannot fetch the schema revision"))
        .filter(|l| l.contains(&scene.schema))
        .count();
    assert_eq!(warnings, 1, "logged once for the revision");
    println!(
        "outage: {retried} deliveries retried, {} failed lookups, handled {:?} after it began",
        stats.report().fetch_failures,
        outage.elapsed()
    );
    scene.cleanup().await;
}
