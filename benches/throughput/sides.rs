//! The sides measured: the plain loop over Google's official client ([`plain`]), Leasehold on
//! the emulator ([`leasehold`]) and on the in-memory source ([`in_memory`]), and the peers
//! installed beside them: Google's Python and Node subscribers and the community crate
//! `gcloud-pubsub` ([`peers`]). [`Side`] names the five end-to-end sides and the command that
//! starts each as a child.
//!
//! Uses the clocks, the heap count and the completion signal of [`harness`](crate::harness);
//! nothing of [`report`](crate::report).

pub(crate) mod in_memory;
pub(crate) mod leasehold;
pub(crate) mod peers;
pub(crate) mod plain;

use ::leasehold::Registration;

/// `LEASEHOLD_BENCH_WORKER_THREADS`, when set, as the registration's worker threads (for the
/// runs with handlers on fewer threads than the default).
fn worker_threads_from_env(registration: Registration) -> Registration {
    match std::env::var("LEASEHOLD_BENCH_WORKER_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        Some(threads) => registration.worker_threads(threads),
        None => registration,
    }
}

/// The five end-to-end sides, each a child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The plain loop ([`plain`]): this binary with `--side plain`.
    Plain,
    /// Leasehold ([`leasehold`]): this binary with `--side leasehold`.
    Leasehold,
    /// Google's Python subscriber (`benches/peers/subscriber.py`).
    Python,
    /// Google's Node subscriber (`benches/peers/subscriber.js`).
    Node,
    /// The community crate `gcloud-pubsub` (`benches/peers/gcloud/`).
    Gcloud,
}

impl Side {
    pub(crate) const ALL: [Side; 5] = [
        Side::Plain,
        Side::Leasehold,
        Side::Python,
        Side::Node,
        Side::Gcloud,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Plain => "plain",
            Side::Leasehold => "Leasehold",
            Side::Python => "Python",
            Side::Node => "Node",
            Side::Gcloud => "gcloud-pubsub",
        }
    }

    /// Its place in [`Side::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The command that starts this side, without its run's arguments; `None` for a peer that
    /// is not installed.
    pub(crate) fn command(self, peers: &[peers::Peer]) -> Option<tokio::process::Command> {
        let peer = |kind| {
            peers
                .iter()
                .find(|p| p.kind == kind)
                .map(peers::Peer::command)
        };
        match self {
            Side::Plain | Side::Leasehold => {
                let mut command = tokio::process::Command::new(
                    std::env::current_exe().expect("this benchmark's executable"),
                );
                command.args([
                    "--side",
                    if self == Side::Plain {
                        "plain"
                    } else {
                        "leasehold"
                    },
                ]);
                Some(command)
            }
            Side::Python => peer(peers::Kind::Python),
            Side::Node => peer(peers::Kind::Node),
            Side::Gcloud => peer(peers::Kind::Gcloud),
        }
    }
}
