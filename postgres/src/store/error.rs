//! The store's errors: `PostgresError`, what setting the store up can fail with, and how a
//! driver's or the pool's error becomes the runtime's `StoreError`.
//!
//! It uses no other module of the crate.

use leasehold_actors::error::{Cause, StoreError};

/// The store could not be set up: nothing was consumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection URL (or `key=value` string) does not parse.
    #[error("invalid PostgreSQL connection string")]
    Config(#[source] tokio_postgres::Error),
    /// The pool could not be built.
    #[error("could not build the PostgreSQL connection pool")]
    Pool(#[source] deadpool_postgres::BuildError),
    /// No connection could be made.
    #[error("could not connect to PostgreSQL")]
    Connect(#[source] deadpool_postgres::PoolError),
    /// Leasehold's tables could not be created or migrated, or a query failed.
    #[error("PostgreSQL refused Leasehold's statements")]
    Database(#[source] tokio_postgres::Error),
    /// The database's tables were migrated by a newer Leasehold.
    #[error(
        "the database's Leasehold schema is version {found}, newer than this Leasehold's \
         ({supported}): upgrade Leasehold"
    )]
    NewerSchema {
        /// The version in the database.
        found: i32,
        /// The newest version this code knows.
        supported: i32,
    },
}

pub(crate) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Cause::new(e))
}

/// A statement's error: a conflict with another transaction is [`StoreError::Busy`] (retried at
/// once, not an outage), anything else [`StoreError::Backend`].
pub(crate) fn statement(e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    let conflict = e.code().is_some_and(|code| {
        [
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ]
        .contains(code)
    });
    if conflict {
        StoreError::Busy(Cause::new(e))
    } else {
        backend(e)
    }
}
