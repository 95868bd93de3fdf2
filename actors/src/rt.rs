//! Runtime helpers with no Pub/Sub meaning: guards around every call into user code, many
//! futures of one actor polled as one, a stream handled a whole turn at a time, and the
//! lifeline by which an actor's death reaches its supervisor.
//!
//! May use: `error`. Used by every folder above.

pub(crate) mod breaker_signal;
pub(crate) mod guard;
pub(crate) mod lifeline;
pub(crate) mod tasks;
pub(crate) mod turns;
