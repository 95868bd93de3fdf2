//! The harness: what every measurement stands on, none of it measured itself. The command line
//! ([`args`]), the counting allocator ([`alloc`]), the CPU and wall clocks ([`clock`]), the
//! count that ends a Rust side's run ([`countdown`]), the topics and subscriptions of the
//! end-to-end runs ([`topics`]), the child process each side runs in ([`child`]), and the
//! OpenTelemetry layer of the traces-on runs ([`observability`]).
//!
//! Uses the emulator's admin clients, tokio's processes and the standard library; nothing of
//! [`sides`](crate::sides) or [`report`](crate::report).

pub(crate) mod alloc;
pub(crate) mod args;
pub(crate) mod child;
pub(crate) mod clock;
pub(crate) mod countdown;
pub(crate) mod observability;
pub(crate) mod topics;
