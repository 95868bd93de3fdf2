//! A message published with the W3C trace context of its publisher (the `googclient_traceparent`
//! attribute Google's publishers set): the handler's span continues that trace, whether the
//! message was pulled or pushed (a push subscription on the same topic, whose endpoint is
//! served here).

use actix_web::{App, HttpServer};
use google_cloud_pubsub::model::{Message, PushConfig, Subscription, Topic};
use leasehold::emulator::EmulatorHost;
use leasehold::{Delivery, Registration};
use leasehold_test_support::{PROJECT, free_port, unique};
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

const SECRET: &str = "card-4111-1111-1111-1111";

#[actix_rt::test]
async fn the_handlers_span_continues_the_publishers_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    // Not leasehold_test_support's emulator: its log capture would be a second global
    // subscriber.
    let emulator =
        EmulatorHost::from_env_or_start().unwrap_or_else(|e| panic!("cannot run the test: {e}"));
    let connection = emulator.connection();
    let id = unique("trace");
    let topic = format!("{PROJECT}/topics/{id}");
    let name = format!("{PROJECT}/subscriptions/{id}");
    connection
        .topic_admin()
        .await
        .unwrap()
        .create_topic()
        .with_request(Topic::new().set_name(&topic))
        .send()
        .await
        .unwrap();
    let admin = connection.subscription_admin().await.unwrap();
    admin
        .create_subscription()
        .with_request(Subscription::new().set_name(&name).set_topic(&topic))
        .send()
        .await
        .unwrap();
    let subscription = leasehold::start(
        Registration::raw(&name, |_, d: Delivery| async move { d.ack() }),
        &connection,
    )
    .await
    .unwrap();
    // The same message pushed, on a push subscription of the same topic.
    let pushed_name = format!("{name}-push");
    let (connector, endpoint) = leasehold_push::Push::allow_unauthenticated("/push")
        .bind(&pushed_name, connection.connect().await.unwrap());
    let port = free_port();
    let served = endpoint.clone();
    let server = HttpServer::new(move || {
        let endpoint = served.clone();
        App::new().configure(move |c| endpoint.configure(c))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", port))
    .unwrap()
    .run();
    let http = server.handle();
    actix_rt::spawn(server);
    admin
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(&pushed_name)
                .set_topic(&topic)
                .set_push_config(
                    PushConfig::new().set_push_endpoint(format!("http://127.0.0.1:{port}/push")),
                ),
        )
        .send()
        .await
        .unwrap();
    let pushed = leasehold::start_with(
        Registration::raw(&pushed_name, |_, d: Delivery| async move { d.ack() }),
        connector,
    )
    .await
    .unwrap();

    // The publisher's span, as Google's publishers pass it on.
    let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let publish_span = SpanId::from_hex("00f067aa0ba902b7").unwrap();
    let message = Message::new()
        .set_data(format!("payload {SECRET}"))
        .set_attributes([(
            "googclient_traceparent",
            format!("00-{trace_id}-{publish_span}-01"),
        )]);
    connection
        .publisher(&topic)
        .await
        .unwrap()
        .publish(message)
        .await
        .unwrap();
    for process in [format!("{id} process"), format!("{id}-push process")] {
        continues(&exporter, &process, trace_id, publish_span).await;
    }
    subscription.stop().await;
    pushed.stop().await;
    http.stop(false).await;
    for doomed in [&name, &pushed_name] {
        let _ = admin
            .delete_subscription()
            .set_subscription(doomed)
            .send()
            .await;
    }
    let _ = connection
        .topic_admin()
        .await
        .unwrap()
        .delete_topic()
        .set_topic(&topic)
        .send()
        .await;
}

/// Waits for the span named `process` and checks it continues the publisher's trace.
async fn continues(
    exporter: &InMemorySpanExporter,
    process: &str,
    trace_id: TraceId,
    publish_span: SpanId,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let span = loop {
        let spans = exporter.get_finished_spans().unwrap();
        if let Some(span) = spans.into_iter().find(|s| s.name == process) {
            break span;
        }
        assert!(
            Instant::now() < deadline,
            "no `{process}` span was exported"
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        span.span_context.trace_id(),
        trace_id,
        "the publisher's trace"
    );
    assert_eq!(
        span.parent_span_id, publish_span,
        "the publish span is the parent"
    );
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute("messaging.system").as_deref(), Some("gcp_pubsub"));
    assert_eq!(
        attribute("messaging.gcp_pubsub.result").as_deref(),
        Some("acked")
    );
    assert!(attribute("messaging.message.id").is_some());
    assert!(
        span.attributes
            .iter()
            .all(|kv| !kv.value.to_string().contains(SECRET)),
        "no payload in the span: {:?}",
        span.attributes
    );
}
