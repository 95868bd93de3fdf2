//! Google's Spanner emulator for this test binary, and a database of each test's own in it.

use leasehold_spanner::{Endpoint, SpannerHost, create_database, migrate};
use std::sync::OnceLock;

static HOST: OnceLock<SpannerHost> = OnceLock::new();

/// The Spanner emulator for this test binary: the one `SPANNER_EMULATOR_HOST` names, or one
/// started on a free port at the first call and stopped when the process exits. Fails (never
/// skips) when the emulator cannot be found, with the error that says how to install it.
pub fn spanner_endpoint() -> Endpoint {
    HOST.get_or_init(|| {
        SpannerHost::from_env_or_start().unwrap_or_else(|e| panic!("cannot run the tests: {e}"))
    })
    .endpoint()
}

/// A new database of this test's own (in the instance `leasehold`), with Leasehold's table
/// created by the migration step: its name, `projects/leasehold/instances/leasehold/databases/…`.
pub async fn spanner_database() -> String {
    let database = new_spanner_database().await;
    migrate(&spanner_endpoint(), &database)
        .await
        .unwrap_or_else(|e| panic!("cannot migrate {database}: {e}"));
    database
}

/// A new database of this test's own, without Leasehold's table.
pub async fn new_spanner_database() -> String {
    // Database ids: 2 to 30 lowercase letters, digits, `_` or `-`, starting with a letter.
    let id: String = crate::unique("db")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let id = format!("d{}", &id[id.len().saturating_sub(28)..]);
    let database = format!("projects/leasehold/instances/leasehold/databases/{id}");
    create_database(&spanner_endpoint(), &database)
        .await
        .unwrap_or_else(|e| panic!("cannot create {database}: {e}"));
    database
}
