//! `replay KEY`: the dead letters of a configured subscription replayed through the handler
//! bound to its key, from the command line: the arguments ([`ReplayArgs`]), the run
//! ([`Service::replay`](crate::Service::replay)), its progress on the terminal (or a log line
//! now and then), a dry run's list, and the summary.
//!
//! - `cli.rs`: the binary's arguments, [`Cli`] and [`ReplayArgs`];
//! - `lines.rs`: what a run prints;
//! - `run.rs`: the run, on top of the service and its HTTP surface.

mod cli;
mod lines;
mod run;

pub use cli::{Cli, Command, REPLAY_LOG_EVERY, ReplayArgs};
pub use lines::{candidate_line, summary_line};
