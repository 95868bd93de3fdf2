//! `SpannerError`: what connecting, the migration step or the emulator's provisioning can fail
//! with; and the check of a database's name. It uses no other module of the crate.

use leasehold_actors::error::Cause;
use std::time::Duration;

/// The store could not be set up, or the schema migrated: nothing was consumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpannerError {
    /// The database name is not `projects/P/instances/I/databases/D`.
    #[error("invalid Spanner database name {0:?}: expected projects/P/instances/I/databases/D")]
    Name(String),
    /// Spanner (or the emulator) did not answer within the connect timeout.
    #[error(
        "Spanner at {endpoint} did not answer within {timeout:?}: is it running (for the \
         emulator, SPANNER_EMULATOR_HOST=host:port), and reachable from here?"
    )]
    Unreachable {
        /// Where it was asked: the emulator's host and port, or Google's endpoint.
        endpoint: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// The instance or the database does not exist.
    #[error("the Spanner database {0} does not exist: create it (and its instance) first")]
    DatabaseNotFound(String),
    /// The database has no `leasehold_claims` table.
    #[error(
        "the Spanner database {0} has no leasehold_claims table: run the migration once \
         (leasehold_spanner::migrate, or the DDL in leasehold_spanner::SCHEMA with gcloud \
         spanner databases ddl update)"
    )]
    SchemaMissing(String),
    /// The client could not be built, or Spanner refused a request.
    #[error("Spanner refused a request")]
    Client(#[source] Cause),
}

impl SpannerError {
    pub(crate) fn client(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Client(Cause::new(e))
    }
}

/// Checks the form of a database's name: `projects/P/instances/I/databases/D`.
pub(crate) fn check_name(database: &str) -> Result<(), SpannerError> {
    let parts: Vec<&str> = database.split('/').collect();
    let valid = parts.len() == 6
        && parts[0] == "projects"
        && parts[2] == "instances"
        && parts[4] == "databases"
        && [1, 3, 5].iter().all(|&i| !parts[i].is_empty());
    if valid {
        Ok(())
    } else {
        Err(SpannerError::Name(database.to_string()))
    }
}
