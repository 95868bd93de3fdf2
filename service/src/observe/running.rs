//! One subscription the service runs, as the HTTP surface and the replay command see it: its
//! key, its handle, its window, its push endpoint and its replay. Plain data read by the
//! metrics, the history and the status page.
//!
//! Uses [`super::replays`] (a replay's report) and the runtime's handles; nothing above.

use crate::observe::replays::{Report, read_report};
use leasehold::Subscription;
use std::sync::Arc;
use std::time::Duration;

/// One subscription the service runs.
#[derive(Debug)]
pub(crate) struct Running {
    /// The key it is configured under.
    pub(crate) key: String,
    /// Its handle.
    pub(crate) subscription: Subscription,
    /// The `max_lease` it runs with: how old a lease may grow before it is lost.
    pub(crate) max_lease: Duration,
    /// Its push endpoint, when Pub/Sub pushes to it.
    pub(crate) push: Option<leasehold_push::PushEndpoint>,
    /// Its flow-control window, what [`saturation`](Running::saturation) is measured against.
    pub(crate) window: Window,
    /// The subscription on its dead-letter topic that `replay` takes from, as configured.
    pub(crate) dead_letter_subscription: Option<String>,
    /// A replay of its dead letters running in this process (`subscription` is then the
    /// replay's consumer, on the dead-letter subscription).
    pub(crate) replay: Option<leasehold::replay::ReplayWatch>,
    /// Where `replay KEY` processes report their progress (serving processes read it).
    pub(crate) replays_dir: Option<std::path::PathBuf>,
    /// What its schema decoder counts, when its handler reads a schema.
    pub(crate) schema: Option<leasehold_schema::SchemaStats>,
    /// The relay of the outbox of the store bound to its key (`Service::outbox`), in this
    /// process.
    pub(crate) relay: Option<leasehold_relay::Relay>,
}

/// A subscription's flow-control window: at most this much outstanding at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

impl Window {
    pub(crate) fn of(options: &leasehold::Options) -> Self {
        Self {
            messages: options.max_outstanding_messages,
            bytes: options.max_outstanding_bytes,
        }
    }

    /// How full the window is with `messages` and `bytes` outstanding: the larger of the two
    /// shares, from 0 (idle) to 1 (no room: this replica takes no more until one is settled).
    pub(crate) fn saturation(&self, messages: usize, bytes: usize) -> f64 {
        let share = |used: usize, limit: usize| used as f64 / limit.max(1) as f64;
        share(messages, self.messages)
            .max(share(bytes, self.bytes))
            .clamp(0.0, 1.0)
    }
}

impl Running {
    /// How saturated this replica is for the subscription: the share of its flow-control
    /// window in use (messages or bytes, whichever is fuller), 0 to 1.
    pub(crate) fn saturation(&self) -> f64 {
        let in_flight = self.subscription.in_flight();
        self.window.saturation(in_flight.messages, in_flight.bytes)
    }
}

/// The subscriptions a service runs, in the order of their keys.
pub(crate) type Subscriptions = Arc<Vec<Running>>;

impl Running {
    /// The replay of its key: its own, in this process, or one another process reports.
    pub(crate) fn replay_report(&self) -> Option<Report> {
        if let Some(watch) = &self.replay {
            let from = self.dead_letter_subscription.as_deref().unwrap_or("-");
            return Some(Report::of(
                from,
                watch.is_dry_run(),
                &watch.progress(),
                watch.is_over(),
            ));
        }
        self.replays_dir
            .as_deref()
            .and_then(|dir| read_report(dir, &self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn saturation_is_the_fuller_share_of_the_window() {
        let window = Window {
            messages: 100,
            bytes: 1_000,
        };
        assert_eq!(window.saturation(0, 0), 0.0);
        assert_eq!(window.saturation(25, 100), 0.25);
        assert_eq!(
            window.saturation(25, 900),
            0.9,
            "bytes fuller than messages"
        );
        assert_eq!(window.saturation(100, 0), 1.0);
        assert_eq!(
            window.saturation(1, 5_000),
            1.0,
            "a lone large message: capped at 1"
        );
    }
}
