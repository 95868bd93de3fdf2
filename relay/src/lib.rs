// The crate doc is the crate's manual, README.md; its examples run as doctests.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod relay;
mod rules;
mod sender;
mod stats;

pub use relay::{Relay, RelayError};
pub use rules::failure::{FAILURE_KINDS, FailureKind};
pub use rules::options::{InvalidRelayOption, RelayOptions};
pub use stats::RelayStats;

/// Every option's default, each a named constant whose doc says why.
pub mod defaults {
    pub use crate::rules::options::{
        DEFAULT_BACKLOG_INTERVAL, DEFAULT_GATHER, DEFAULT_LEASE, DEFAULT_MAX_BATCH,
        DEFAULT_MAX_RETRY_DELAY, DEFAULT_POLL_INTERVAL, DEFAULT_RETENTION, DEFAULT_RETRY_DELAY,
        DEFAULT_SEND_TIMEOUT, DEFAULT_SWEEP_BATCH, DEFAULT_SWEEP_INTERVAL,
    };
}
