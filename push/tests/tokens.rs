//! The push endpoint's token check end to end, against the test issuer: a refused token is
//! answered (401, 403 or 503) and counted before anything else, a good one passes on to the
//! gate (here not started: 503 not_started). No emulator, no network beyond 127.0.0.1.

use actix_web::http::header::AUTHORIZATION;
use actix_web::{App, test};
use issuer::{AUDIENCE, EMAIL, Issuer, claims};
use leasehold::testing::MemoryPubSub;
use leasehold_push::{Push, PushEndpoint, TokenCheck};
use leasehold_test_support::issuer;

fn endpoint(jwks_url: String) -> PushEndpoint {
    let check = TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(jwks_url);
    let (_connector, endpoint) = Push::new("/push/orders", check).bind(
        "projects/p/subscriptions/orders",
        MemoryPubSub::new().connector(),
    );
    endpoint
}

/// The status and body `authorization` is answered with.
async fn push(endpoint: &PushEndpoint, authorization: Option<&str>) -> (u16, String) {
    let app = test::init_service(App::new().configure(|c| endpoint.configure(c))).await;
    let mut request = test::TestRequest::post()
        .uri("/push/orders")
        .set_payload(r#"{"message": {"messageId": "1"}}"#);
    if let Some(value) = authorization {
        request = request.insert_header((AUTHORIZATION, value));
    }
    let response = test::call_service(&app, request.to_request()).await;
    let status = response.status().as_u16();
    let body = test::read_body(response).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[actix_rt::test]
async fn the_endpoint_answers_each_token_with_its_status_and_counts_it() {
    let issuer = Issuer::start().await;
    let endpoint = endpoint(issuer.jwks_url());
    let good = issuer.token(claims());
    let iap = issuer.token(issuer::with(
        claims(),
        "iss",
        "https://cloud.google.com/iap".into(),
    ));
    let cases = [
        (None, 401, "no bearer token"),
        (
            Some("Basic dXNlcjpwYXNz".to_string()),
            401,
            "no bearer token",
        ),
        (Some("Bearer x.y".to_string()), 401, "not a JWT"),
        (Some(format!("Bearer {iap}")), 403, "accounts.google.com"),
        (
            Some(format!("Bearer {}", issuer::unsigned(claims()))),
            403,
            "RS256",
        ),
        (Some(format!("Bearer {good}")), 503, "not started"),
    ];
    for (authorization, status, says) in &cases {
        let (got, body) = push(&endpoint, authorization.as_deref()).await;
        assert_eq!(got, *status, "{authorization:?}: {body}");
        assert!(body.contains(says), "{body}");
        assert!(!body.contains(EMAIL), "{body}");
    }
    let stats = endpoint.stats();
    assert_eq!(stats.refused("unauthenticated"), 3);
    assert_eq!(stats.refused("forbidden"), 2);
    assert_eq!(
        stats.refused("not_started"),
        1,
        "the good token got past the check"
    );
}

#[actix_rt::test]
async fn keys_that_cannot_be_fetched_are_answered_503_keys_unavailable() {
    let endpoint = endpoint(issuer::unreachable_url().await);
    let token = issuer::token(claims());
    let (status, body) = push(&endpoint, Some(&format!("Bearer {token}"))).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(endpoint.stats().refused("keys_unavailable"), 1);
}
