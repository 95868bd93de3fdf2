//! The decoders on revisions given in code (`FixedRevisions`), called as a worker calls them:
//! `prepare`, awaited, then `decode`.

use super::*;
use crate::attributes::{SCHEMA_ENCODING, SCHEMA_NAME, SCHEMA_REVISION};
use crate::source::FixedRevisions;
use leasehold::testing::delivery;

const ORDERS: &str = "projects/p/schemas/orders";
const V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"note","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},{"name":"qty","type":"int","default":1}]}"#;

#[derive(Debug, PartialEq, serde::Deserialize)]
struct Order {
    id: i64,
    qty: i32,
}

fn avro(id: &str, definition: &str) -> Revision {
    Revision::new(ORDERS, id, SchemaType::Avro, definition)
}

fn stamped(schema: &str, revision: &str, encoding: &str) -> Delivery {
    delivery()
        .attribute(SCHEMA_NAME, schema)
        .attribute(SCHEMA_REVISION, revision)
        .attribute(SCHEMA_ENCODING, encoding)
        .build()
}

/// What a worker does: the fetch first, then the decode.
async fn decode<D: Decoder>(
    decoder: &D,
    data: &[u8],
    delivery: &Delivery,
) -> Result<D::Output, DecodeError> {
    if let Some(fetch) = decoder.prepare(delivery) {
        fetch.await?;
    }
    decoder.decode(Bytes::copy_from_slice(data), delivery)
}

#[tokio::test(start_paused = true)]
async fn messages_of_two_revisions_decode_into_one_type_counted_by_revision() {
    let fixed = FixedRevisions::new([avro("00000001", V1), avro("00000002", V2)]);
    let schemas = Schemas::new(fixed);
    let decoder = schemas
        .avro::<Order>(ORDERS, ReaderRevision::Latest)
        .await
        .unwrap();
    assert_eq!(decoder.reader_revision(), "00000002");
    let old = stamped(ORDERS, "00000001", "BINARY");
    assert!(
        decoder.prepare(&old).is_some(),
        "an unseen revision is fetched"
    );
    assert_eq!(
        decode(&decoder, &[10, 4, b'h', b'i'], &old).await,
        Ok(Order { id: 5, qty: 1 })
    );
    assert!(decoder.prepare(&old).is_none(), "then kept");
    let new = stamped(ORDERS, "00000002", "JSON");
    assert!(
        decoder.prepare(&new).is_none(),
        "the reader's own revision, kept at start"
    );
    assert_eq!(
        decode(&decoder, br#"{"id":6,"qty":3}"#, &new).await,
        Ok(Order { id: 6, qty: 3 })
    );
    let report = decoder.stats().report();
    assert_eq!(report.revision("00000001").unwrap().decoded, 1);
    assert_eq!(report.revision("00000002").unwrap().decoded, 1);
    assert_eq!((report.fetches, report.cache_hits), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn messages_the_decoder_cannot_place_go_to_the_failure_policy_with_a_reason() {
    let fixed = FixedRevisions::new([avro("00000002", V2)]);
    let decoder = Schemas::new(fixed)
        .avro::<Order>(ORDERS, ReaderRevision::Latest)
        .await
        .unwrap();
    let bare = delivery().build();
    let error = decode(&decoder, b"", &bare).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "projects/p/schemas/orders, revision none: the message has no googclient_schemaname \
         attribute (published to a topic without this schema?)"
    );
    let other = stamped("projects/p/schemas/other", "00000002", "BINARY");
    let error = decode(&decoder, &[10, 2], &other).await.unwrap_err();
    assert!(error.to_string().contains("another schema"), "{error}");
    let unknown = stamped(ORDERS, "0000dead", "BINARY");
    let error = decode(&decoder, &[10, 2], &unknown).await.unwrap_err();
    assert!(!error.is_retried());
    assert!(
        error
            .to_string()
            .contains("revision 0000dead: the schema service has no such revision"),
        "{error}"
    );
    let garbled = stamped(ORDERS, "00000002", "BINARY");
    let error = decode(&decoder, &[10], &garbled).await.unwrap_err();
    let DecodeError::Schema {
        field, revision, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(
        (field.as_deref(), revision.as_str()),
        (Some("qty"), "00000002")
    );
    let report = decoder.stats().report();
    assert_eq!((report.unresolved, report.missing_revisions), (3, 1));
    assert_eq!(report.revision("00000002").unwrap().failed, 1);
}

#[tokio::test(start_paused = true)]
async fn an_outage_retries_and_the_revision_is_fetched_once_it_ends() {
    let fixed = FixedRevisions::new([avro("00000001", V1), avro("00000002", V2)]);
    let decoder = Schemas::new(fixed.clone())
        .avro::<Order>(ORDERS, ReaderRevision::Latest)
        .await
        .unwrap();
    fixed.refuse("connection refused");
    let old = stamped(ORDERS, "00000001", "BINARY");
    let error = decode(&decoder, &[10, 0], &old).await.unwrap_err();
    assert!(error.is_retried(), "{error:?}");
    fixed.answer();
    tokio::time::advance(crate::defaults::FETCH_BACKOFF_INITIAL).await;
    assert_eq!(
        decode(&decoder, &[10, 0], &old).await,
        Ok(Order { id: 5, qty: 1 })
    );
    assert_eq!(decoder.stats().report().fetch_failures, 1);
}

#[tokio::test(start_paused = true)]
async fn a_decoder_reads_only_its_schemas_type() {
    let proto = Revision::new(
        ORDERS,
        "00000009",
        SchemaType::ProtocolBuffer,
        "syntax = \"proto3\"; message Order { int64 id = 1; }",
    );
    let schemas = Schemas::new(FixedRevisions::new([proto]));
    let error = schemas
        .avro::<Order>(ORDERS, ReaderRevision::Latest)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "projects/p/schemas/orders is a PROTOCOL_BUFFER schema; this decoder reads AVRO schemas"
    );
    #[derive(Debug, serde::Deserialize)]
    struct Id {
        id: i64,
    }
    let any = schemas
        .decoder::<Id>(ORDERS, ReaderRevision::Latest)
        .await
        .unwrap();
    assert!(matches!(any, SerdeDecoder::Protobuf(_)));
    let json = stamped(ORDERS, "00000009", "JSON");
    assert_eq!(decode(&any, br#"{"id":"4"}"#, &json).await.unwrap().id, 4);
    let missing = Schemas::new(FixedRevisions::default())
        .protobuf::<prost_types_free::Empty>(ORDERS)
        .await
        .unwrap_err();
    assert_eq!(
        missing.to_string(),
        "the latest revision of projects/p/schemas/orders does not exist"
    );
}

/// A `prost` message with no fields, for a decoder that is never built.
mod prost_types_free {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Empty {}
}
