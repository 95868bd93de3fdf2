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

/// The database for this test binary, in a schema of this test's own (created now): a
/// `PostgresStore` connected to the URL returned keeps its tables there (its outbox too), so
/// that tests running at once, each with its relays, never see one another's rows.
pub async fn database_url_in_new_schema() -> String {
    let schema = crate::unique_sql_name("schema");
    let url = database_url();
    let (client, connection) =
        leasehold_postgres::tokio_postgres::connect(url, leasehold_postgres::tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    let driven = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    drop(client);
    let _ = driven.await;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}
