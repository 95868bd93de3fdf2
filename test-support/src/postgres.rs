//! PostgreSQL for this test binary.

use leasehold_postgres::PostgresHost;
use std::sync::OnceLock;

static DATABASE: OnceLock<PostgresHost> = OnceLock::new();

/// The database for this test binary: the one `DATABASE_URL` names, or a throwaway cluster
/// started on a free port at the first call and stopped (and deleted) when the process exits.
/// Fails (never skips) when PostgreSQL cannot be found, with the error that says how to install
/// it.
pub fn database_url() -> &'static str {
    DATABASE
        .get_or_init(|| {
            PostgresHost::from_env_or_start()
                .unwrap_or_else(|e| panic!("cannot run the tests: {e}"))
        })
        .url()
}
