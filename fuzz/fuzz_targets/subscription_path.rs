//! The subscription a push names and the path it is pushed to: the input as the `subscription`
//! of a wrapped push (a JSON string), as the `x-goog-pubsub-subscription-name` header of an
//! unwrapped one, and as the push path of a subscription in the service's configuration
//! (`[subscriptions.KEY.push] path`, from the environment).
//!
//! A push is taken only when the name it gives is exactly the endpoint's subscription. A push
//! path is taken only when it is a plain path of its own (a `/`, then letters, digits and
//! `/ - _ . ~`; not `/` nor one of the service's endpoints), and then it is a route that
//! actix-web builds without a panic and that matches that path and no pattern. No panic, no
//! allocation out of proportion to the input.

#![no_main]

use actix_web::dev::ResourceDef;
use leasehold_fuzz::{SUBSCRIPTION, bound, within};
use leasehold_push::fuzzing::{unwrapped, wrapped};
use leasehold_service::config;
use libfuzzer_sys::fuzz_target;

/// A push for `subscription` as a wrapped body.
fn envelope(subscription: &str) -> Vec<u8> {
    let named = serde_json::to_string(subscription).expect("a JSON string");
    format!(r#"{{"message": {{"messageId": "1", "data": "aGk="}}, "subscription": {named}}}"#)
        .into_bytes()
}

fn plain(path: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "/-_.~".contains(c);
    path.starts_with('/')
        && path.len() >= 2
        && path.chars().all(allowed)
        && !["/", "/metrics", "/livez", "/readyz"].contains(&path)
}

fuzz_target!(|input: &[u8]| {
    within(bound(input.len()), || {
        let headers = [
            ("x-goog-pubsub-message-id", &b"1"[..]),
            ("x-goog-pubsub-subscription-name", input),
        ];
        let taken = unwrapped(b"hi", headers, SUBSCRIPTION).is_ok();
        assert_eq!(taken, input == SUBSCRIPTION.as_bytes(), "unwrapped");
        let Ok(text) = std::str::from_utf8(input) else {
            return;
        };
        let taken = wrapped(&envelope(text), SUBSCRIPTION).is_ok();
        assert_eq!(taken, text == SUBSCRIPTION, "wrapped");
        let prefix = "LEASEHOLD__SUBSCRIPTIONS__ORDERS__";
        let env = [
            ("NAME", SUBSCRIPTION),
            ("DELIVERY", "push"),
            ("PUSH__ALLOW_UNAUTHENTICATED", "true"),
            ("PUSH__PATH", text),
        ]
        .map(|(k, v)| (format!("{prefix}{k}"), v.to_string()));
        let Ok(read) = config::from_sources(None, env) else {
            return;
        };
        let table = &read.subscriptions["orders"];
        let Some(push) = &table.push else {
            return;
        };
        if table.push_endpoint("orders", true).is_ok() {
            let path = push.path.as_str();
            assert!(plain(path), "{path:?} was taken");
            let route = ResourceDef::new(path);
            assert!(route.is_match(path), "{path:?} does not match itself");
            assert!(!route.is_match(&format!("{path}x")));
        }
    });
});
