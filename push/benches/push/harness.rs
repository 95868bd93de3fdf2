//! The harness: what the measurements stand on, none of it measured itself. The command line
//! ([`args`]), the counting allocator ([`alloc`]), the CPU clock ([`clock`]), the count that
//! ends the pull side's run ([`countdown`]), the topics and subscriptions ([`topics`]), and the
//! child processes every side runs in ([`child`]).
//!
//! Uses the emulator's admin clients, tokio's processes and the standard library; nothing of
//! [`sides`](crate::sides) or [`report`](crate::report).

pub(crate) mod alloc;
pub(crate) mod args;
pub(crate) mod child;
pub(crate) mod clock;
pub(crate) mod countdown;
pub(crate) mod topics;

/// The payload of every message, pushed or pulled: 200 bytes, as in benches/throughput.rs.
pub(crate) const PAYLOAD_BYTES: usize = 200;
