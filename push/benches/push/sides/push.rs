//! The push side's child (`--serve`): Leasehold's push endpoint bound to a no-op registration,
//! served by actix-web on 127.0.0.1, its subscription real but never pulled. With
//! `--jwks-url`, every push's token is checked by a `TokenCheck` against that key set (with
//! `--token-cache 0`, verified in full each time); without, `Push::allow_unauthenticated`.
//! `--worker-threads N` sets the registration's handler threads (0: on the supervisor's).
//!
//! Uses `leasehold-push` and actix-web, and the harness's child processes and clock.

use crate::harness::args::{number, value};
use crate::harness::child::serve_window;
use leasehold::{Delivery, Registration};
use leasehold_push::{Push, TokenCheck};
use leasehold_test_support::issuer::{AUDIENCE, EMAIL};

/// The child: prints `READY port=P`, then answers the parent's window commands with the
/// messages its registration acked in the window; EOF stops it.
pub(crate) async fn serve(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let http_workers: usize = number(args, "--http-workers").unwrap_or(1);
    let inner = super::emulator_connection()
        .connect()
        .await
        .expect("connect");
    let mut registration = super::options(Registration::raw(
        subscription,
        |_, d: Delivery| async move { d.ack() },
    ));
    if let Some(threads) = number(args, "--worker-threads") {
        registration = registration.worker_threads(threads);
    }
    let push = match value(args, "--jwks-url") {
        Some(url) => {
            let mut check = TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(url);
            if let Some(entries) = number(args, "--token-cache") {
                check = check.with_token_cache(entries);
            }
            Push::new(super::PATH, check)
        }
        None => Push::allow_unauthenticated(super::PATH),
    };
    let (sub, endpoint) = push
        .start(registration, inner)
        .await
        .expect("start the push registration");
    let served = endpoint.clone();
    let handle = super::serve_on_loopback(move |c| served.configure(c), http_workers);
    serve_window(|| sub.stats().acked, || endpoint.stats().refused_total()).await;
    sub.stop().await;
    handle.stop(false).await;
}
