//! Protocol Buffers messages of two revisions, binary and proto3 JSON, published to a plain topic
//! with the three attributes set as Pub/Sub sets them (Google's emulator refuses Protocol Buffers
//! schemas, 501), their revisions' definitions given in code.

use crate::support::{ENCODING, NAME, REVISION, Scene, Seen};
use leasehold::{Decoder, Delivery, Registration};
use leasehold_schema::{FixedRevisions, Revision, SchemaType, Schemas};
use leasehold_test_support::{PROJECT, eventually_showing, unique};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

const R1: &str = "0a0b0c01";
const R2: &str = "0a0b0c02";
/// Revision 1: an order with a note.
const V1: &str = r#"syntax = "proto3"; message Order { int64 id = 1; string note = 2; }"#;
/// Revision 2: the note removed (its number reserved), a quantity added.
const V2: &str = r#"syntax = "proto3"; message Order { reserved 2; int64 id = 1; int32 qty = 3; }"#;

/// Revision 2's message, as `prost` builds it: what the handler gets from either revision.
#[derive(Clone, PartialEq, prost::Message)]
struct Order {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int32, tag = "3")]
    qty: i32,
}

/// Revision 1's message, to publish it.
#[derive(Clone, PartialEq, prost::Message)]
struct OldOrder {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(string, tag = "2")]
    note: String,
}

/// A schema's two revisions, known in code only, and a plain topic for its messages.
async fn scene() -> (Scene, Schemas) {
    let schema = format!("{PROJECT}/schemas/{}", unique("proto"));
    let revisions = FixedRevisions::new([
        Revision::new(&schema, R1, SchemaType::ProtocolBuffer, V1),
        Revision::new(&schema, R2, SchemaType::ProtocolBuffer, V2),
    ]);
    (Scene::plain(&schema).await, Schemas::new(revisions))
}

/// Publishes ids 1 to 4: revision 1 binary and JSON, revision 2 binary and JSON.
async fn publish_both_revisions_in_both_encodings(scene: &Scene) {
    let stamp = |revision, encoding| {
        [
            (NAME, scene.schema.as_str()),
            (REVISION, revision),
            (ENCODING, encoding),
        ]
    };
    let old = prost::Message::encode_to_vec(&OldOrder {
        id: 1,
        note: "x".into(),
    });
    scene.publish(old, &stamp(R1, "BINARY")).await;
    scene
        .publish(r#"{"id":"2","note":"x"}"#, &stamp(R1, "JSON"))
        .await;
    let new = prost::Message::encode_to_vec(&Order { id: 3, qty: 3 });
    scene.publish(new, &stamp(R2, "BINARY")).await;
    scene
        .publish(r#"{"id":"4","qty":4}"#, &stamp(R2, "JSON"))
        .await;
}

/// Consumes the four messages of [`publish_both_revisions_in_both_encodings`] with `decoder`;
/// returns each message's id and quantity (`id_qty` reads them from what the handler got), and
/// what the handler and the failure policy saw.
async fn consume_four<D: Decoder>(
    scene: &Scene,
    decoder: D,
    id_qty: fn(&D::Output) -> (i64, i32),
) -> (Vec<(i64, i32)>, Seen) {
    let seen = Seen::default();
    let (handler, got) = (seen.clone(), Arc::new(Mutex::new(Vec::new())));
    let kept = got.clone();
    let registration =
        Registration::decoded(&scene.subscription, decoder, move |m, d: Delivery| {
            let (id, qty) = id_qty(&m);
            kept.lock().push((id, qty));
            std::future::ready(handler.keep(id, &d))
        })
        .failure_policy(seen.policy());
    let subscription = leasehold::start(registration, &scene.connection)
        .await
        .unwrap();
    publish_both_revisions_in_both_encodings(scene).await;
    eventually_showing(
        "four handled",
        Duration::from_secs(30),
        || seen.ids() == [1, 2, 3, 4],
        || format!("{:?}, refused {:?}", seen.ids(), seen.refused.lock()),
    )
    .await;
    subscription.stop().await;
    let mut got = got.lock().clone();
    got.sort_unstable();
    (got, seen)
}

#[actix_rt::test]
async fn binary_and_json_messages_of_two_revisions_decode_into_one_prost_type() {
    let (scene, schemas) = scene().await;
    let decoder = schemas.protobuf::<Order>(&scene.schema).await.unwrap();
    let stats = decoder.stats();
    let (quantities, seen) = consume_four(&scene, decoder, |o: &Order| (o.id, o.qty)).await;
    assert_eq!(
        quantities,
        [(1, 0), (2, 0), (3, 3), (4, 4)],
        "revision 1 has no qty"
    );
    assert_eq!((seen.ids_of(R1), seen.ids_of(R2)), (vec![1, 2], vec![3, 4]));
    let report = stats.report();
    assert_eq!(report.revision(R1).unwrap().decoded, 2);
    assert_eq!(report.revision(R2).unwrap().decoded, 2);
    assert_eq!(
        report.fetches, 1,
        "revision 1 for its JSON message; revision 2 kept at start"
    );
    scene.cleanup().await;
}

#[actix_rt::test]
async fn a_serde_type_reads_both_revisions_through_their_definitions() {
    #[derive(Debug, serde::Deserialize)]
    struct Plain {
        id: i64,
        #[serde(default)]
        qty: i32,
    }
    let (scene, schemas) = scene().await;
    let decoder = schemas
        .protobuf_serde::<Plain>(&scene.schema)
        .await
        .unwrap();
    let (quantities, _) = consume_four(&scene, decoder, |p: &Plain| (p.id, p.qty)).await;
    assert_eq!(quantities, [(1, 0), (2, 0), (3, 3), (4, 4)]);
    scene.cleanup().await;
}
