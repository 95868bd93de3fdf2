//! The decisions, as plain data and pure methods tested without I/O: what an outcome becomes
//! (the outcome table, and the last attempt on which `drop()` dead-letters), the key a
//! message's progress is kept under (its id, or a dedupe key), the states of one message's lease
//! and when it ends, which message runs next and how a batch forms, flow control and what is
//! read ahead of it, how much one turn of a pull loop reads, what the supervisor decides at
//! start, the options with their checks, and the transactional outbox's keys, checks and lease
//! order.
//!
//! May use: `error`. Nothing here sends a message, spawns or sleeps.

pub(crate) mod batcher;
pub(crate) mod breaker;
pub(crate) mod dedupe;
pub(crate) mod flow;
pub(crate) mod lease_state;
pub(crate) mod options;
pub(crate) mod outbox;
pub(crate) mod outcome;
pub(crate) mod pull_turn;
pub(crate) mod read_ahead;
pub(crate) mod schedule;
pub(crate) mod supervision;
