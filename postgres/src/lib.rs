// The crate doc is the crate's manual, README.md; its examples run as doctests.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod driver;
mod local;
mod schema;
mod store;

/// The connection pool: build one yourself (TLS, sizes) for [`PostgresStore::with_pool`].
pub use deadpool_postgres;
pub use driver::manager;
pub use local::{DATABASE_URL_ENV, LaunchError, LocalPostgres, POSTGRES_BIN_ENV, PostgresHost};
pub use store::{
    DEFAULT_CLAIM_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TTL, PgTransaction, PostgresError,
    PostgresStore, publish,
};
/// The driver the transaction speaks: [`PgTransaction`] dereferences to its client.
pub use tokio_postgres;
