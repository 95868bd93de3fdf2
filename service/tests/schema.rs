//! A schema handler in the service: the `decode` table names an Avro schema on Google's
//! emulator, the service checks it and the topic at start, decodes each message by the
//! revision it was written with (a revision committed while it runs included), and shows what
//! it decoded per revision in `/metrics` and on the status page. A table that does not fit its
//! handler, or a schema the topic does not have, stops the start.

use google_cloud_pubsub::client::SchemaService;
use google_cloud_pubsub::model::{Encoding, Message, Schema, SchemaSettings, Subscription, Topic};
use leasehold::Delivery;
use leasehold_service::ServiceError;
use leasehold_service::{Service, config};
use leasehold_test_support::{PROJECT, connection, eventually, free_port, host, unique};
use std::time::Duration;

/// A payload marker that must reach no metric, page or log.
const SECRET: &str = "card-4111-1111-1111-1111";

const V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}"#;
const V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},{"name":"qty","type":"int","default":1}]}"#;

#[derive(serde::Deserialize)]
struct Order {
    id: i64,
}

/// An Avro schema on the emulator (its first revision `V1`), a topic with it in JSON, and a
/// subscription: their names, the first revision's id, and the schema client.
async fn schema_topic() -> (String, String, String, String, SchemaService) {
    let schemas = SchemaService::builder()
        .with_endpoint(connection().endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap();
    let id = unique("svcsch");
    let first = schemas
        .create_schema()
        .set_parent(PROJECT)
        .set_schema_id(&id)
        .set_schema(avro(V1))
        .send()
        .await
        .unwrap()
        .revision_id;
    let schema = format!("{PROJECT}/schemas/{id}");
    let (topic, subscription) = topic_with(Some(&schema)).await;
    (schema, topic, subscription, first, schemas)
}

/// An Avro schema's definition, for the schema service.
fn avro(definition: &str) -> Schema {
    Schema::new()
        .set_type(google_cloud_pubsub::model::schema::Type::Avro)
        .set_definition(definition)
}

/// A topic, with `schema` in JSON or plain, and a subscription on it: their names.
async fn topic_with(schema: Option<&str>) -> (String, String) {
    let c = connection();
    let topic = format!("{PROJECT}/topics/{}", unique("svct"));
    let mut spec = Topic::new().set_name(&topic);
    if let Some(schema) = schema {
        spec = spec.set_schema_settings(
            SchemaSettings::new()
                .set_schema(schema)
                .set_encoding(Encoding::Json),
        );
    }
    let topics = c.topic_admin().await.unwrap();
    topics
        .create_topic()
        .with_request(spec)
        .send()
        .await
        .unwrap();
    let subscription = format!("{PROJECT}/subscriptions/{}", unique("svcs"));
    c.subscription_admin()
        .await
        .unwrap()
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(&subscription)
                .set_topic(&topic),
        )
        .send()
        .await
        .unwrap();
    (topic, subscription)
}

/// Deletes a subscription and its topic.
async fn delete(topic: &str, subscription: &str) {
    let c = connection();
    let admin = c.subscription_admin().await.unwrap();
    let _ = admin
        .delete_subscription()
        .set_subscription(subscription)
        .send()
        .await;
    let _ = c
        .topic_admin()
        .await
        .unwrap()
        .delete_topic()
        .set_topic(topic)
        .send()
        .await;
}

async fn cleanup(schema: &str, topic: &str, subscription: &str, schemas: &SchemaService) {
    delete(topic, subscription).await;
    let _ = schemas.delete_schema().set_name(schema).send().await;
}

fn configured(address: &str, subscription: &str, decode: &str) -> config::ServiceConfig {
    let toml = format!(
        r#"
[connection]
emulator_host = "{host}"
[http]
address = "{address}"
[subscriptions.orders]
name = "{subscription}"
{decode}
"#,
        host = host()
    );
    let path = std::env::temp_dir().join(format!("{}.toml", unique("schema")));
    std::fs::write(&path, toml).unwrap();
    let config = config::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    config
}

fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[actix_rt::test]
async fn a_schema_handler_decodes_every_revision_and_shows_each_in_metrics_and_on_the_page() {
    let (schema, topic, subscription, first, schemas) = schema_topic().await;
    let address = format!("127.0.0.1:{}", free_port());
    let config = configured(
        &address,
        &subscription,
        &format!(r#"decode = {{ schema = "{schema}" }}"#),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = Service::new(config).schema("orders", |order: Order, d: Delivery| async move {
        if order.id < 0 { d.drop() } else { d.ack() }
    });
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    let publisher = connection().publisher(&topic).await.unwrap();
    let publish = |json: String| publisher.publish(Message::new().set_data(json));
    publish(format!(r#"{{"id":1,"note":"{SECRET}"}}"#))
        .await
        .unwrap();
    let second = schemas
        .commit_schema()
        .set_name(&schema)
        .set_schema(avro(V2))
        .send()
        .await
        .unwrap()
        .revision_id;
    publish(r#"{"id":2,"qty":3}"#.to_string()).await.unwrap();
    let get = |path: &str| leasehold_test_support::http_get(&address, path).map(|(_, b)| b);
    let decoded = |revision: &str| {
        format!(
            "leasehold_schema_messages_decoded_total{{subscription=\"orders\",schema=\"{schema}\",revision=\"{revision}\"}}"
        )
    };
    eventually("both revisions decoded", Duration::from_secs(30), || {
        get("/metrics").is_some_and(|m| {
            sample(&m, &decoded(&first)) == Some(1.0) && sample(&m, &decoded(&second)) == Some(1.0)
        })
    })
    .await;
    let metrics = get("/metrics").unwrap();
    let fetched =
        "leasehold_schema_revision_lookups_total{subscription=\"orders\",result=\"fetched\"}";
    assert_eq!(
        sample(&metrics, fetched),
        Some(1.0),
        "the second revision: {metrics}"
    );
    let page = get("/").unwrap();
    assert!(
        page.contains(&format!("<h3>Schema {schema}</h3>")),
        "{page}"
    );
    assert!(
        page.contains(&format!("revision {second}: decoded, failed")),
        "{page}"
    );
    for text in [&metrics, &page, &leasehold_test_support::captured_logs()] {
        assert!(
            !text.contains(SECRET),
            "a payload reached a metric, the page or a log"
        );
    }
    stop.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.subscriptions["orders"].acked, 2);
    cleanup(&schema, &topic, &subscription, &schemas).await;
}

#[actix_rt::test]
async fn a_decode_table_that_does_not_fit_stops_the_start() {
    let (schema, topic, subscription, _, schemas) = schema_topic().await;
    let address = format!("127.0.0.1:{}", free_port());
    let handler = |_: Order, d: Delivery| async move { d.ack() };
    let start = |decode: &str, schema_binder: bool| {
        let service = Service::new(configured(&address, &subscription, decode));
        let service = if schema_binder {
            service.schema("orders", handler)
        } else {
            service.json("orders", handler)
        };
        service.run_until(async {})
    };
    let missing = format!(
        r#"decode = {{ schema = "{PROJECT}/schemas/{}" }}"#,
        unique("none")
    );
    let error = start(&missing, true).await.unwrap_err();
    assert!(matches!(error, ServiceError::Schema { .. }), "{error:?}");
    let other_topic =
        format!(r#"decode = {{ schema = "{schema}", reader_revision = "0000dead" }}"#);
    let error = start(&other_topic, true).await.unwrap_err();
    assert!(
        std::error::Error::source(&error)
            .unwrap()
            .to_string()
            .contains("0000dead"),
        "{error:?}"
    );
    let error = start("", true).await.unwrap_err();
    assert!(error.to_string().contains("needs decode = "), "{error}");
    let on_json = format!(r#"decode = {{ schema = "{schema}" }}"#);
    let error = start(&on_json, false).await.unwrap_err();
    assert!(error.to_string().contains("reads no schema"), "{error}");
    cleanup(&schema, &topic, &subscription, &schemas).await;
    // A topic without the schema.
    let (schema, topic, subscription, _, schemas) = schema_topic().await;
    let (plain_topic, plain) = topic_with(None).await;
    let decode = format!(r#"decode = {{ schema = "{schema}" }}"#);
    let service = Service::new(configured(&address, &plain, &decode)).schema("orders", handler);
    let error = service.run_until(async {}).await.unwrap_err();
    let cause = std::error::Error::source(&error).unwrap().to_string();
    assert!(cause.contains("has no schema"), "{cause}");
    delete(&plain_topic, &plain).await;
    cleanup(&schema, &topic, &subscription, &schemas).await;
}
