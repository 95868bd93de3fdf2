// The crate doc is the crate's manual, README.md; its examples run as doctests.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod driver;
mod endpoint;
mod error;
mod local;
mod schema;
mod store;

pub use endpoint::{DEFAULT_CONNECT_TIMEOUT, Endpoint, SPANNER_EMULATOR_HOST_ENV};
pub use error::SpannerError;
/// The client the transaction speaks: statements, keys, mutations, rows.
pub use gcloud_spanner;
pub use local::{
    LaunchError, LocalSpanner, SPANNER_EMULATOR_BIN_ENV, SpannerHost, create_database,
};
pub use schema::{Migrated, SCHEMA, apply_ddl, migrate};
pub use store::{
    DEFAULT_LOOKUP_TIMEOUT, DEFAULT_MAX_ABORTS, DEFAULT_SESSIONS, SpannerProgress, SpannerStore,
    SpannerTransaction,
};
