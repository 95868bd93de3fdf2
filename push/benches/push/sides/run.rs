//! The parent's run of one server side: the server in a child of its own (Leasehold's push
//! endpoint on a fresh subscription, the bare endpoint, or another build's push endpoint), a
//! token of the run's own when the side takes one, the load generator warming up, then pushing
//! inside the server's measured window.
//!
//! Uses the load generator ([`load`](super::load)), the harness's child processes and
//! subscriptions, and the test issuer's tokens.

use super::load::{Load, load};
use crate::harness::args::Server;
use crate::harness::child::{child, child_of, expect_line, field, lines, reap};
use crate::harness::topics::Admin;
use leasehold_test_support::issuer;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The subscription the bare endpoint's pushes name: it reads no subscription.
const BARE_SUBSCRIPTION: &str = "projects/leasehold-bench/subscriptions/bare";

/// One server run's figures.
#[derive(Debug, Clone)]
pub(crate) struct ServerRun {
    pub(crate) per_second: f64,
    pub(crate) cpu_us: f64,
    pub(crate) allocations: f64,
    pub(crate) load_cpu_us: f64,
    pub(crate) not_204: u64,
    /// The server's context switches per message, all its threads (`NaN` from a build that
    /// does not count them).
    pub(crate) switches: f64,
    /// The server's CPU per message by thread name (`name:µs,…`; empty from a build that does
    /// not count it).
    pub(crate) threads: String,
}

/// How one server run goes: which server, its connections, its warm-up and measured durations,
/// the server's actix-web workers, the key set tokens are verified against, another build's
/// binary for [`Server::Against`], and where the message ids go on from (shared by every run).
pub(crate) struct ServerPlan<'a> {
    pub(crate) server: Server,
    pub(crate) connections: usize,
    pub(crate) warm_up: Duration,
    pub(crate) duration: Duration,
    pub(crate) http_workers: usize,
    pub(crate) jwks_url: &'a str,
    pub(crate) against: Option<&'a str>,
    pub(crate) ids: &'a Rc<Cell<u64>>,
}

/// One run of `plan.server` at `plan.connections` connections.
pub(crate) async fn server_run(admin: &Admin, host: &str, plan: ServerPlan<'_>) -> ServerRun {
    let connections = plan.connections;
    let workers = plan.http_workers.to_string();
    let leasehold = !matches!(plan.server, Server::Bare | Server::BareOpen);
    let made = if leasehold {
        Some(admin.prepare(0).await)
    } else {
        None
    };
    let subscription = made
        .as_ref()
        .map_or(BARE_SUBSCRIPTION, |m| m.subscription.as_str())
        .to_string();
    let mode = if leasehold { "--serve" } else { "--bare" };
    let mut args = vec![
        mode,
        "--subscription",
        &subscription,
        "--http-workers",
        &workers,
    ];
    if plan.server.takes_token() {
        args.extend(["--jwks-url", plan.jwks_url]);
    }
    match plan.server {
        Server::PushUncached => args.extend(["--token-cache", "0"]),
        Server::PushInline => args.extend(["--worker-threads", "0"]),
        _ => {}
    }
    let mut server = match (plan.server, plan.against) {
        (Server::Against, Some(binary)) => child_of(Path::new(binary), host, &args),
        _ => child(host, &args),
    };
    let mut stdin = server.stdin.take().expect("piped stdin");
    let mut lines = lines(&mut server);
    let port: u16 = expect_line(&mut lines, "READY port=")
        .await
        .parse()
        .expect("a port");
    // A token of this run's own, good for an hour, on every push (as Pub/Sub reuses one).
    let token = plan
        .server
        .takes_token()
        .then(|| issuer::token(issuer::claims()));
    let Load {
        tally,
        elapsed,
        cpu: load_cpu,
    } = load(
        port,
        (&subscription, token.as_deref()),
        plan.ids,
        connections,
        (plan.warm_up, plan.duration),
        async || {
            stdin.write_all(b"start\n").await.unwrap();
            expect_line(&mut lines, "STARTED").await;
        },
    )
    .await;
    stdin.write_all(b"stop\n").await.unwrap();
    let result = expect_line(&mut lines, "RESULT ").await;
    drop(stdin);
    reap(server).await;
    if let Some(made) = made {
        admin.cleanup(made).await;
    }
    let name = plan.server.name();
    let answered = field(&result, "messages").unwrap_or(0.0);
    if answered as u64 != tally.no_content {
        eprintln!(
            "{name}, {connections} connection(s): the server counted {answered} in its window, \
             the load generator {} answers 204",
            tally.no_content
        );
    }
    if tally.other > 0 || tally.reconnects > 0 {
        eprintln!(
            "{name}, {connections} connection(s): {} answers other than 204, {} reconnects",
            tally.other, tally.reconnects
        );
    }
    ServerRun {
        per_second: tally.no_content as f64 / elapsed,
        cpu_us: field(&result, "cpu_us_per_message").expect("cpu_us_per_message"),
        allocations: field(&result, "allocations_per_message").unwrap_or(f64::NAN),
        load_cpu_us: load_cpu * 1e6 / (tally.no_content + tally.other).max(1) as f64,
        not_204: tally.other,
        switches: field(&result, "context_switches_per_message").unwrap_or(f64::NAN),
        threads: result
            .split_whitespace()
            .find_map(|f| f.strip_prefix("thread_cpu_us_per_message="))
            .unwrap_or_default()
            .to_string(),
    }
}
