//! A push subscription in the service: `delivery = "push"` binds its endpoint on the service's
//! own address, Google's emulator pushes to it, and `/metrics` and the status page show it
//! like a pull subscription, with what its endpoint refused.

use google_cloud_pubsub::model::PushConfig;
use leasehold::Delivery;
use leasehold_service::{Service, config};
use leasehold_test_support::{Scratch, eventually, free_port, host, unique};
use std::time::Duration;

/// A payload marker that must reach no metric, page or log.
const SECRET: &str = "card-4111-1111-1111-1111";

/// One HTTP/1.1 request; the status and the body.
fn request(address: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    leasehold_test_support::http(address, method, path, body)
}

fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[actix_rt::test]
async fn a_push_subscription_is_served_on_the_service_address_and_reported_like_a_pull_one() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let name = format!(
        "{}/subscriptions/{}",
        leasehold_test_support::PROJECT,
        unique("svcpush")
    );
    let endpoint = format!("http://{address}/push/orders");
    let scratch = Scratch::named(&name, move |s| {
        s.set_push_config(PushConfig::new().set_push_endpoint(endpoint))
    })
    .await;
    let toml = format!(
        r#"
[connection]
emulator_host = "{host}"
[http]
address = "{address}"
[subscriptions.orders]
name = "{name}"
delivery = "push"
[subscriptions.orders.push]
path = "/push/orders"
allow_unauthenticated = true
max_body = 4096
"#,
        host = host()
    );
    let path = std::env::temp_dir().join(format!("{}.toml", unique("push")));
    std::fs::write(&path, toml).unwrap();
    let config = config::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = Service::new(config).raw("orders", |_data, d: Delivery| async move { d.ack() });
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));

    for i in 0..3 {
        scratch.publish(&format!("{SECRET} {i}"), "").await;
    }
    let metrics = || request(&address, "GET", "/metrics", "").map(|(_, m)| m);
    let acked = "leasehold_messages_settled_total{subscription=\"orders\",outcome=\"acked\"}";
    eventually("three pushes acked", Duration::from_secs(30), || {
        metrics().and_then(|m| sample(&m, acked)) == Some(3.0)
    })
    .await;
    let (status, _) = request(&address, "POST", "/push/orders", SECRET).unwrap();
    assert_eq!(status, 400, "a body that is no envelope");
    let (status, _) = request(&address, "GET", "/push/orders", "").unwrap();
    assert_eq!(status, 405);
    let metrics = metrics().unwrap();
    let refused = "leasehold_push_refused_total{subscription=\"orders\",reason=\"bad_request\"}";
    assert_eq!(sample(&metrics, refused), Some(1.0), "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "leasehold_max_lease_seconds{subscription=\"orders\"}"
        ),
        Some(10.0),
        "a push's lease is its deadline, the subscription's ack deadline"
    );
    let (_, page) = request(&address, "GET", "/", "").unwrap();
    assert!(
        page.contains("push on /push/orders (unauthenticated)"),
        "{page}"
    );
    assert!(page.contains("1 bad_request"), "{page}");
    for text in [&metrics, &page, &leasehold_test_support::captured_logs()] {
        assert!(
            !text.contains(SECRET),
            "a payload reached a metric, the page or a log"
        );
    }
    let (status, _) = request(&address, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200);

    stop.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.subscriptions["orders"].acked, 3);
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_unauthenticated_push_endpoint_against_real_pub_sub_does_not_start() {
    let config = config::from_sources(
        None,
        [
            (
                "LEASEHOLD__CONNECTION__ENDPOINT",
                "https://pubsub.googleapis.com",
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__NAME",
                "projects/p/subscriptions/orders",
            ),
            ("LEASEHOLD__SUBSCRIPTIONS__ORDERS__DELIVERY", "push"),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__PUSH__PATH",
                "/push/orders",
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__PUSH__ALLOW_UNAUTHENTICATED",
                "true",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .unwrap();
    let service = Service::new(config).raw("orders", |_data, d: Delivery| async move { d.ack() });
    let error = service.run_until(async {}).await.unwrap_err();
    let text = format!("{error} {:?}", std::error::Error::source(&error));
    assert!(text.contains("unauthenticated_outside_emulator"), "{text}");
}

#[actix_rt::test]
async fn two_push_subscriptions_on_one_path_do_not_start() {
    let mut vars = vec![(
        "LEASEHOLD__CONNECTION__EMULATOR_HOST".to_string(),
        "127.0.0.1:1".to_string(),
    )];
    for key in ["AUDIT", "ORDERS"] {
        let var = |k: &str| format!("LEASEHOLD__SUBSCRIPTIONS__{key}__{k}");
        vars.push((var("NAME"), format!("projects/p/subscriptions/{key}")));
        vars.push((var("DELIVERY"), "push".into()));
        vars.push((var("PUSH__PATH"), "/push/orders".into()));
        vars.push((var("PUSH__ALLOW_UNAUTHENTICATED"), "true".into()));
    }
    let config = config::from_sources(None, vars).unwrap();
    let service = Service::new(config)
        .raw("audit", |_data, d: Delivery| async move { d.ack() })
        .raw("orders", |_data, d: Delivery| async move { d.ack() });
    let error = service.run_until(async {}).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("push.path /push/orders is also audit's"),
        "{error}"
    );
}
