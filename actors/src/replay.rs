//! Dead letters replayed through the registration's own handler: a run over a subscription on
//! the dead-letter topic, where each outcome settles the message there (ack and drop: gone;
//! anything else: left), nothing is republished, and each message is taken at most once a run.
//! The rules (filter, admission, pacing, the end) are plain data in `rules.rs`; `source.rs`
//! wraps the connector so the runtime below runs the handler as for any subscription;
//! `run.rs` checks, starts, ends and reports a run; `candidate.rs` is what a dry run lists.
//!
//! May use every folder below it (it starts a subscription like any user of `supervisor`).

pub(crate) mod candidate;
pub(crate) mod rules;
pub(crate) mod run;
pub(crate) mod source;

pub use candidate::{
    Candidate, DEAD_LETTER_ATTRIBUTES, SOURCE_DELIVERY_COUNT, SOURCE_SUBSCRIPTION,
    SOURCE_SUBSCRIPTION_PROJECT, SOURCE_TOPIC_PUBLISH_TIME,
};
pub use rules::{Admitted, DEFAULT_REPLAY_IDLE, Filter, MAX_REPLAY_RATE, ReplayOptions};
pub use run::{Replay, ReplayProgress, ReplayWatch, replay};
