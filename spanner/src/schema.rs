//! The table Leasehold keeps in the database ([`SCHEMA`]), the migration step that creates it
//! ([`migrate`]), and the check at connect that it is there.
//!
//! Unlike PostgreSQL's, Spanner's schema changes are long-running operations that take seconds
//! to minutes and are not transactional with the data: they are a deployment step, run once
//! per database (by [`migrate`], by `gcloud spanner databases ddl update`, or by your own
//! schema tooling), not at every start of every replica. It uses `endpoint` and the store's
//! errors.

use crate::endpoint::Endpoint;
use crate::error::SpannerError;
use gcloud_gax::grpc::Code;
use gcloud_googleapis::spanner::admin::database::v1::{
    GetDatabaseDdlRequest, UpdateDatabaseDdlRequest,
};
use gcloud_spanner::admin::client::Client as AdminClient;

/// The claims table.
pub(crate) const TABLE: &str = "leasehold_claims";

/// The DDL of Leasehold's tables and indexes, one statement per item (for `gcloud spanner
/// databases ddl update --ddl=...`, or your own schema tooling).
///
/// `leasehold_claims`: one row per finished message per subscription, written in the handler's
/// transaction at its commit. `shard` (a hash of the message id, 0 to 63) leads the key:
/// Pub/Sub's message ids grow with time, and a key that led with them would send every new
/// claim to the same split (a hot spot); `outcome` is what a redelivery is settled with;
/// `committed_at` is the transaction's commit timestamp. The row deletion policy removes
/// claims 7 days after their commit (Spanner deletes them within about three days after that):
/// 7 days is the longest a subscription retains an unacked message, so a redelivery Pub/Sub can
/// still make finds its claim.
///
/// `leasehold_outbox` (with its three indexes): the transactional outbox, one row per message a
/// transaction published, sent by a relay once committed. The key is a random id (no hot
/// spot); `pending_shard` is set while the row waits and cleared once it is sent, so the
/// `leasehold_outbox_pending` index (null-filtered) holds only what waits; `seq` is the row's
/// place in its ordering key's commit order (unique per topic and key; no key, no entry);
/// `leasehold_outbox_sent` finds the rows past the retention.
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE leasehold_claims (
    shard INT64 NOT NULL,
    subscription STRING(MAX) NOT NULL,
    message_id STRING(MAX) NOT NULL,
    outcome STRING(16) NOT NULL,
    committed_at TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (shard, subscription, message_id),
  ROW DELETION POLICY (OLDER_THAN(committed_at, INTERVAL 7 DAY))",
    "CREATE TABLE leasehold_outbox (
    id INT64 NOT NULL,
    topic STRING(MAX) NOT NULL,
    ordering_key STRING(MAX),
    seq INT64 NOT NULL,
    data BYTES(MAX) NOT NULL,
    attribute_names ARRAY<STRING(MAX)> NOT NULL,
    attribute_values ARRAY<STRING(MAX)> NOT NULL,
    message_key STRING(MAX) NOT NULL,
    created_at TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
    pending_shard INT64,
    attempts INT64 NOT NULL,
    next_attempt_at TIMESTAMP,
    lease_owner STRING(MAX),
    lease_until TIMESTAMP,
    last_error STRING(MAX),
    sent_at TIMESTAMP,
) PRIMARY KEY (id)",
    "CREATE NULL_FILTERED INDEX leasehold_outbox_pending ON leasehold_outbox (pending_shard, created_at)",
    "CREATE UNIQUE NULL_FILTERED INDEX leasehold_outbox_order ON leasehold_outbox (topic, ordering_key, seq)",
    "CREATE NULL_FILTERED INDEX leasehold_outbox_sent ON leasehold_outbox (sent_at)",
];

/// The outbox's table.
pub(crate) const OUTBOX_TABLE: &str = "leasehold_outbox";

/// What [`migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Migrated {
    /// What was missing of the tables and indexes was created (all of it, or the outbox's on a
    /// database migrated before the outbox).
    Created,
    /// Every table and index was there already: nothing was changed.
    AlreadyThere,
}

/// Creates Leasehold's tables and indexes in `database` (`projects/P/instances/I/databases/D`)
/// that are not there, through the database admin API at `endpoint`, and waits until the
/// schema change is done. Needs `spanner.databases.updateDdl` (and `getDdl`). Run it once per database, as a
/// deployment step; [`SpannerStore::connect`](crate::SpannerStore::connect) only checks.
pub async fn migrate(endpoint: &Endpoint, database: &str) -> Result<Migrated, SpannerError> {
    crate::error::check_name(database)?;
    let endpoint = endpoint.clone();
    let database = database.to_string();
    crate::driver::on_driver(async move {
        let timeout = crate::endpoint::DEFAULT_CONNECT_TIMEOUT;
        let unreachable = || SpannerError::Unreachable {
            endpoint: endpoint.describe(),
            timeout,
        };
        // Bounded: a Spanner that does not answer is an error within the connect timeout (the
        // schema change itself, once asked for, may take minutes, and is waited for).
        let ddl = tokio::time::timeout(timeout, async {
            let admin = admin_client(&endpoint).await?;
            let ddl = admin
                .database()
                .get_database_ddl(
                    GetDatabaseDdlRequest {
                        database: database.clone(),
                    },
                    None,
                )
                .await
                .map_err(|status| match status.code() {
                    Code::NotFound => SpannerError::DatabaseNotFound(database.clone()),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => unreachable(),
                    _ => SpannerError::client(status),
                })?
                .into_inner();
            Ok::<_, SpannerError>((admin, ddl))
        })
        .await
        .map_err(|_| unreachable())?;
        let (admin, ddl) = ddl?;
        let missing: Vec<String> = SCHEMA
            .iter()
            .filter(|wanted| {
                let name = created(wanted);
                !ddl.statements.iter().any(|there| created(there) == name)
            })
            .map(|s| s.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(Migrated::AlreadyThere);
        }
        let mut operation = admin
            .database()
            .update_database_ddl(
                UpdateDatabaseDdlRequest {
                    database: database.clone(),
                    statements: missing,
                    ..Default::default()
                },
                None,
            )
            .await
            .map_err(SpannerError::client)?;
        operation.wait(None).await.map_err(SpannerError::client)?;
        tracing::info!(%database, "created Leasehold's tables and indexes");
        Ok(Migrated::Created)
    })
    .await
}

/// Applies `statements` (DDL: your own tables, say) to `database` at `endpoint` and waits
/// until the schema change is done. For examples and tests; in production, change schemas with
/// your own tooling.
pub async fn apply_ddl(
    endpoint: &Endpoint,
    database: &str,
    statements: &[&str],
) -> Result<(), SpannerError> {
    crate::error::check_name(database)?;
    let (endpoint, database) = (endpoint.clone(), database.to_string());
    let statements: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    crate::driver::on_driver(async move {
        let admin = admin_client(&endpoint).await?;
        let mut operation = admin
            .database()
            .update_database_ddl(
                UpdateDatabaseDdlRequest {
                    database,
                    statements,
                    ..Default::default()
                },
                None,
            )
            .await
            .map_err(SpannerError::client)?;
        operation.wait(None).await.map_err(SpannerError::client)?;
        Ok(())
    })
    .await
}

/// The table or index a `CREATE TABLE` or `CREATE [UNIQUE] [NULL_FILTERED] INDEX` statement
/// creates (`None` for any other statement).
fn created(statement: &str) -> Option<&str> {
    let mut words = statement.split_whitespace();
    if !words.next()?.eq_ignore_ascii_case("create") {
        return None;
    }
    let name = loop {
        let word = words.next()?;
        if ["table", "index"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w))
        {
            break words.next()?;
        }
        if !["unique", "null_filtered"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w))
        {
            return None;
        }
    };
    Some(name.trim_matches('`').trim_end_matches('('))
}

/// An admin client for `endpoint` (authenticated with Application Default Credentials on
/// Google Cloud). Must be built on the driver thread.
pub(crate) async fn admin_client(endpoint: &Endpoint) -> Result<AdminClient, SpannerError> {
    let config = gcloud_spanner::admin::AdminClientConfig {
        environment: endpoint.environment().await?,
        ..Default::default()
    };
    AdminClient::new(config).await.map_err(SpannerError::client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_and_index_is_found_in_the_databases_ddl() {
        let names: Vec<_> = SCHEMA.iter().map(|s| created(s)).collect();
        assert_eq!(
            names,
            [
                Some(TABLE),
                Some(OUTBOX_TABLE),
                Some("leasehold_outbox_pending"),
                Some("leasehold_outbox_order"),
                Some("leasehold_outbox_sent"),
            ]
        );
        assert_eq!(
            created("CREATE TABLE `leasehold_claims` (\n x INT64) PRIMARY KEY (x)"),
            Some(TABLE)
        );
        assert_eq!(
            created("CREATE INDEX orders_by_day ON orders (day)"),
            Some("orders_by_day")
        );
        assert_eq!(
            created("ALTER TABLE leasehold_claims ADD COLUMN x INT64"),
            None
        );
    }
}
