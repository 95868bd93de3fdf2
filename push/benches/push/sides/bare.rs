//! The bare endpoint's child (`--bare`): the least a correct push endpoint does, on the same
//! HTTP stack as Leasehold's (actix-web, the same workers, 127.0.0.1), so that what Leasehold
//! adds on top is its own cost. Each push: with `--jwks-url`, its token verified by Google's
//! ID-token verifier (google-cloud-auth, the one `TokenCheck` builds on) for the audience and
//! the email, once per request, as that verifier does (keys cached); then the body read, the
//! envelope parsed, the subscription compared, the data decoded from base64; then 204. Without
//! `--jwks-url` no token is read: the floor.
//!
//! Uses actix-web, google-cloud-auth, serde_json and base64, and the harness's child
//! processes; nothing of Leasehold.

use crate::harness::args::{number, value};
use crate::harness::child::serve_window;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use google_cloud_auth::credentials::idtoken::verifier::{Builder, Verifier};
use leasehold_test_support::issuer::{AUDIENCE, EMAIL};
use std::sync::atomic::{AtomicU64, Ordering};

/// The body a push may have, as Leasehold's default.
const MAX_BODY: usize = leasehold_push::DEFAULT_MAX_BODY;

/// What every worker of the bare server shares.
struct Bare {
    subscription: String,
    verifier: Option<Verifier>,
    answered: AtomicU64,
}

/// The wrapped push, the fields a push's handling needs.
#[derive(serde::Deserialize)]
struct Envelope {
    message: Message,
    subscription: String,
}

#[derive(serde::Deserialize)]
struct Message {
    #[serde(default)]
    data: String,
    #[serde(rename = "messageId")]
    message_id: String,
}

/// The child: prints `READY port=P`, then answers the parent's window commands with the pushes
/// it answered 204 in the window; EOF stops it.
pub(crate) async fn bare(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let http_workers: usize = number(args, "--http-workers").unwrap_or(1);
    let verifier = value(args, "--jwks-url").map(|url| {
        Builder::new([AUDIENCE])
            .with_email(EMAIL)
            .with_jwks_url(url)
            .build()
    });
    let bare = web::Data::new(Bare {
        subscription: subscription.to_string(),
        verifier,
        answered: AtomicU64::new(0),
    });
    let shared = bare.clone();
    let configure = move |c: &mut web::ServiceConfig| {
        c.app_data(shared.clone())
            .route(super::PATH, web::post().to(push));
    };
    let handle = super::serve_on_loopback(configure, http_workers);
    serve_window(|| bare.answered.load(Ordering::Relaxed), || 0).await;
    handle.stop(false).await;
}

/// One push: who sent it, then its body.
async fn push(req: HttpRequest, payload: web::Payload, bare: web::Data<Bare>) -> HttpResponse {
    if let Some(verifier) = &bare.verifier {
        let token = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(token) = token else {
            return HttpResponse::Unauthorized().finish();
        };
        if verifier.verify(token).await.is_err() {
            return HttpResponse::Forbidden().finish();
        }
    }
    let Ok(body) = payload.to_bytes_limited(MAX_BODY).await else {
        return HttpResponse::PayloadTooLarge().finish();
    };
    let Ok(Ok(body)) = body.map(|b| serde_json::from_slice::<Envelope>(&b)) else {
        return HttpResponse::BadRequest().finish();
    };
    if body.subscription != bare.subscription || body.message.message_id.is_empty() {
        return HttpResponse::BadRequest().finish();
    }
    let Ok(data) = base64::engine::general_purpose::STANDARD.decode(body.message.data) else {
        return HttpResponse::BadRequest().finish();
    };
    std::hint::black_box(data);
    bare.answered.fetch_add(1, Ordering::Relaxed);
    HttpResponse::NoContent().finish()
}
