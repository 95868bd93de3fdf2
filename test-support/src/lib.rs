//! Leasehold's test support: what every crate's integration tests and the benchmarks share. A
//! dev-dependency only (`publish = false`); no published crate depends on it.
//!
//! - [`emulator`], [`connection`], [`host`]: Google's Pub/Sub emulator for this test binary,
//!   the one `PUBSUB_EMULATOR_HOST` names or one started on a free port (through the public
//!   [`leasehold::emulator::EmulatorHost`]); a test fails, never skips, when there is none.
//! - [`captured_logs`]: everything Leasehold logged in this test binary. The first use of the
//!   emulator through this crate installs the capture as the process's global `tracing`
//!   subscriber, so a binary that installs its own subscriber (or a benchmark, which must not
//!   log) starts its emulator with [`EmulatorHost::from_env_or_start`] instead.
//! - [`Scratch`]: a topic and a subscription of one test's own, deleted at its end; [`Record`]:
//!   what the handlers saw; [`Sink`]: a plain subscriber counting what reached a topic (the
//!   outbox relay's sends, copies included).
//! - [`dedupe`]: the dedupe contract every progress store follows, one test each store runs.
//! - [`eventually`], [`never_within`]: polling with a deadline (no test sleeps to hope).
//! - [`unique`], [`unique_sql_name`], [`free_port`]: names and ports no other test uses.
//! - [`Proxy`]: a TCP proxy that cuts every connection or black-holes new ones, for real
//!   network faults.
//! - [`layout`]: the layering rules every crate's sources keep, checked on their text.
//! - [`tool`], [`chromium`]: the programs some tests drive, found or explained.
//! - `database_url()` (feature `postgres`): PostgreSQL for this test binary, the one
//!   `DATABASE_URL` names or a throwaway cluster (through the public
//!   `leasehold_postgres::PostgresHost`). A feature, so that only the crates that test against
//!   PostgreSQL build `leasehold-postgres`.
//! - `issuer` (feature `issuer`): a stand-in for Google's ID-token issuer, its key set served
//!   on 127.0.0.1 and tokens signed with its key, for push's token tests and benchmark.
//! - `spanner_endpoint()`, `spanner_database()` (feature `spanner`): Google's Spanner emulator
//!   for this test binary (`SPANNER_EMULATOR_HOST`, or one started on a free port, through the
//!   public `leasehold_spanner::SpannerHost`), and a database of each test's own in it.
//!
//! [`EmulatorHost::from_env_or_start`]: leasehold::emulator::EmulatorHost::from_env_or_start

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod dedupe;
mod emulator;
mod http;
#[cfg(feature = "issuer")]
pub mod issuer;
pub mod layout;
mod logs;
mod names;
mod poll;
#[cfg(feature = "postgres")]
mod postgres;
mod proxy;
mod record;
mod scratch;
mod sink;
#[cfg(feature = "spanner")]
mod spanner;
mod tools;

pub use emulator::{PROJECT, connection, emulator, host};
pub use http::{http, http_get};
pub use logs::captured_logs;
pub use names::{free_port, unique, unique_sql_name};
pub use poll::{eventually, eventually_showing, never_within};
#[cfg(feature = "postgres")]
pub use postgres::{database_url, database_url_in_new_schema};
pub use proxy::Proxy;
pub use record::{Record, Seen};
pub use scratch::Scratch;
pub use sink::{Arrived, Sink};
#[cfg(feature = "spanner")]
pub use spanner::{new_spanner_database, spanner_database, spanner_endpoint};
pub use tools::{chromium, tool};
