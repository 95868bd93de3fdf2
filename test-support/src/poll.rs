//! Polling with a deadline: no test sleeps to hope.

use std::time::{Duration, Instant};

/// Polls `done` every 50 ms (without blocking the actix system) until it holds; fails after
/// `within`.
pub async fn eventually(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Like [`eventually`], and the timeout's message adds what `state` says then (what is
/// missing, the counts), so that a failure shows its path.
pub async fn eventually_showing(
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}: {}",
            state()
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `broken` every 50 ms for `period`, failing as soon as it holds: for claims such as "not
/// redelivered after the ack deadline".
pub async fn never_within(what: &str, period: Duration, mut broken: impl FnMut() -> bool) {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        assert!(!broken(), "{what}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}
