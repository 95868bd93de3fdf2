//! Avro topics of both encodings on the emulator: a revision committed mid-stream, a pinned
//! reader, an incompatible revision, messages without the attributes or of an unknown revision.

use crate::support::{ENCODING, NAME, REVISION, Scene, Seen, V1, V2, consume, v1, v2};
use apache_avro::Schema as AvroSchema;
use apache_avro::types::Value;
use google_cloud_pubsub::model::Encoding;
use leasehold::error::DecodeError;
use leasehold_schema::{ReaderRevision, Schemas};
use leasehold_test_support::captured_logs;

/// Revision 3: the id became a string, which no reader of a long can read.
const V3: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"string"},
    {"name":"note","type":"string","default":""}]}"#;

async fn a_revision_committed_mid_stream_is_read_with_the_first(encoding: Encoding) {
    let (scene, first) = Scene::avro(V1, Some(encoding.clone())).await;
    let schemas = Schemas::connect(&scene.connection).await.unwrap();
    let decoder = schemas
        .avro::<crate::support::Order>(&scene.schema, ReaderRevision::Latest)
        .await
        .unwrap();
    let stats = decoder.stats();
    let seen = Seen::default();
    let subscription = consume(&scene, decoder, &seen).await;
    for id in 0..20 {
        scene.publish(v1(id, &encoding), &[]).await;
    }
    let second = scene.commit(V2).await;
    for id in 100..120 {
        scene.publish(v2(id, &encoding), &[]).await;
    }
    let expected: Vec<i64> = (0..20).chain(100..120).collect();
    seen.wait_for(&expected, 0).await;
    subscription.stop().await;
    assert_eq!(seen.ids_of(&first), (0..20).collect::<Vec<_>>());
    assert_eq!(seen.ids_of(&second), (100..120).collect::<Vec<_>>());
    assert!(
        seen.notes
            .lock()
            .iter()
            .all(|(id, note)| (*id >= 100) == note.is_empty()),
        "revision 2 has no note: the reader's default"
    );
    let report = stats.report();
    assert_eq!(report.revision(&first).unwrap().decoded, 20);
    assert_eq!(report.revision(&second).unwrap().decoded, 20);
    assert_eq!(
        (report.fetches, report.unresolved),
        (1, 0),
        "revision 2 fetched once"
    );
    assert!(seen.refused.lock().is_empty());
    scene.cleanup().await;
}

#[actix_rt::test]
async fn binary_messages_of_a_revision_committed_mid_stream_decode_into_one_type() {
    a_revision_committed_mid_stream_is_read_with_the_first(Encoding::Binary).await;
}

#[actix_rt::test]
async fn json_messages_of_a_revision_committed_mid_stream_decode_into_one_type() {
    a_revision_committed_mid_stream_is_read_with_the_first(Encoding::Json).await;
}

#[actix_rt::test]
async fn a_pinned_reader_reads_later_revisions_and_an_incompatible_one_goes_to_the_policy() {
    let (scene, first) = Scene::avro(V1, Some(Encoding::Binary)).await;
    let second = scene.commit(V2).await;
    let schemas = Schemas::connect(&scene.connection).await.unwrap();
    let decoder = schemas
        .avro::<crate::support::Order>(&scene.schema, ReaderRevision::Pinned(first.clone()))
        .await
        .unwrap();
    assert_eq!(
        decoder.reader_revision(),
        first,
        "pinned, though revision 2 is the latest"
    );
    let seen = Seen::default();
    let subscription = consume(&scene, decoder, &seen).await;
    scene.publish(v2(100, &Encoding::Binary), &[]).await;
    let third = scene.commit(V3).await;
    let schema = AvroSchema::parse_str(V3).unwrap();
    let secret = "card-4111-1111";
    let record = Value::Record(vec![
        ("id".into(), Value::String(secret.into())),
        ("note".into(), Value::String(String::new())),
    ]);
    scene
        .publish(apache_avro::to_avro_datum(&schema, record).unwrap(), &[])
        .await;
    seen.wait_for(&[100], 1).await;
    subscription.stop().await;
    assert_eq!(seen.ids_of(&second), [100]);
    let refused = seen.refused.lock()[0].clone();
    let DecodeError::Schema {
        schema,
        revision,
        field,
        problem,
    } = &refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!((schema, revision), (&scene.schema, &third));
    assert_eq!(field.as_deref(), Some("id"));
    assert!(
        problem.starts_with(&format!("cannot be read as revision {first}")),
        "{problem}"
    );
    assert!(!refused.to_string().contains(secret));
    assert!(
        !captured_logs().contains(secret),
        "no payload value in a log line"
    );
    scene.cleanup().await;
}

#[actix_rt::test]
async fn messages_without_the_attributes_or_of_an_unknown_revision_go_to_the_policy() {
    // The schema on the emulator, the messages on a plain topic: stamped by hand, or not at all.
    let (scene, first) = Scene::avro(V1, None).await;
    let schemas = Schemas::connect(&scene.connection).await.unwrap();
    let decoder = schemas
        .avro::<crate::support::Order>(&scene.schema, ReaderRevision::Latest)
        .await
        .unwrap();
    let stats = decoder.stats();
    let seen = Seen::default();
    let subscription = consume(&scene, decoder, &seen).await;
    scene.publish(v1(1, &Encoding::Binary), &[]).await;
    let stamp = |revision| {
        [
            (NAME, scene.schema.as_str()),
            (REVISION, revision),
            (ENCODING, "BINARY"),
        ]
    };
    scene
        .publish(v1(2, &Encoding::Binary), &stamp("0000dead"))
        .await;
    scene
        .publish(v1(3, &Encoding::Binary), &stamp(&first))
        .await;
    seen.wait_for(&[3], 2).await;
    subscription.stop().await;
    let reasons: Vec<String> = seen
        .refused
        .lock()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("has no googclient_schemaname attribute")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("revision 0000dead: the schema service has no such revision")),
        "{reasons:?}"
    );
    let report = stats.report();
    assert_eq!((report.unresolved, report.missing_revisions), (2, 1));
    scene.cleanup().await;
}
