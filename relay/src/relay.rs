//! The running relay: its handle (`handle`: started on a thread of its own, stopped with a
//! drain) and its loop (`run`: wake-ups, rounds, the backlog, the sweep).
//!
//! May use `rules`, `stats` and `sender`.

mod handle;
mod run;

pub use handle::{Relay, RelayError};

#[cfg(test)]
mod tests;
