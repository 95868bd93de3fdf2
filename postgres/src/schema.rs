//! The tables Leasehold keeps in the database, created or migrated at connect.
//!
//! Migrations run in one transaction under an advisory lock, so replicas starting together
//! apply each step once; the version applied is kept in `leasehold_schema`.

use tokio_postgres::Client;

/// The steps, in order: step `n` (from 1) brings the schema to version `n`. Append only.
const STEPS: &[&str] = &[
    // 1: one row per finished message per subscription. `outcome` is what a redelivery is
    // settled with; `expires_at` is when the record stops counting (set by the store that
    // wrote it: its time to live from the claim). The primary key is the claim: a second
    // transaction inserting the same key waits for the first to end.
    "CREATE TABLE leasehold_progress (
        subscription text NOT NULL,
        message_id text NOT NULL,
        outcome text NOT NULL CHECK (outcome IN ('acked', 'dropped')),
        claimed_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (subscription, message_id)
    );
    CREATE INDEX leasehold_progress_expires_at ON leasehold_progress (expires_at);",
    // 2: a claim is written as 'claimed' and becomes 'acked' or 'dropped' at the commit. A
    // handler that commits the transaction itself then leaves a 'claimed' row, which the next
    // claim takes over, instead of a finished one that would settle every redelivery unrun.
    // (NOT VALID: the existing rows hold 'acked' or 'dropped'; no scan under the lock.)
    "ALTER TABLE leasehold_progress DROP CONSTRAINT leasehold_progress_outcome_check;
    ALTER TABLE leasehold_progress ADD CONSTRAINT leasehold_progress_outcome_check
        CHECK (outcome IN ('claimed', 'acked', 'dropped')) NOT VALID;",
    // 3: the transactional outbox (issue 39). A row per message a transaction published, sent
    // by a relay once committed. `seq` is the row's place in its topic's ordering key, in
    // commit order (0 without a key); `leasehold_outbox_insert` gives it under a transaction
    // lock on the key, so one key's writers commit one after the other. A relay leases rows
    // (`lease_owner`, `lease_until`), marks them sent (`sent_at`) or failed (`attempts`,
    // `next_attempt_at`, `last_error`: a reason word, never a payload); sent rows are deleted
    // after the retention. The function also notifies `leasehold_outbox` with the process it
    // came from (unless told not to), which relays LISTEN on: a notification is delivered at
    // the commit, and not at all after a rollback. Pages
    // are left 30 % free so that a lease (no indexed column changes) is a HOT update.
    "CREATE TABLE leasehold_outbox (
        id bigserial PRIMARY KEY,
        topic text NOT NULL,
        ordering_key text NOT NULL,
        seq bigint NOT NULL,
        data bytea NOT NULL,
        attribute_names text[] NOT NULL,
        attribute_values text[] NOT NULL,
        message_key text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
        lease_owner text,
        lease_until timestamptz,
        last_error text,
        sent_at timestamptz
    ) WITH (fillfactor = 70);
    CREATE INDEX leasehold_outbox_pending ON leasehold_outbox (id) WHERE sent_at IS NULL;
    CREATE UNIQUE INDEX leasehold_outbox_order ON leasehold_outbox (topic, ordering_key, seq)
        WHERE ordering_key <> '';
    CREATE INDEX leasehold_outbox_sent ON leasehold_outbox (sent_at) WHERE sent_at IS NOT NULL;
    CREATE FUNCTION leasehold_outbox_insert(
        p_topic text, p_ordering_key text, p_data bytea, p_names text[], p_values text[],
        p_key text, p_origin text
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        next_seq bigint := 0;
    BEGIN
        IF p_ordering_key <> '' THEN
            -- Held to the end of the transaction; the next statement's snapshot is taken after
            -- it, so it sees what the key's previous writer committed.
            PERFORM pg_advisory_xact_lock(hashtext(p_topic), hashtext(p_ordering_key));
            SELECT coalesce(max(seq), 0) + 1 INTO next_seq FROM leasehold_outbox
                WHERE topic = p_topic AND ordering_key = p_ordering_key;
        END IF;
        INSERT INTO leasehold_outbox
            (topic, ordering_key, seq, data, attribute_names, attribute_values, message_key)
            VALUES (p_topic, p_ordering_key, next_seq, p_data, p_names, p_values, p_key);
        IF p_origin IS NOT NULL THEN
            PERFORM pg_notify('leasehold_outbox', p_origin);
        END IF;
    END
    $$;",
];

/// The schema version this code writes.
pub(crate) const VERSION: i32 = STEPS.len() as i32;

/// The advisory lock that serializes migrations (an arbitrary constant: "leasehold" in ASCII).
const LOCK: i64 = 0x6c65_6173_6568_6f6c;

/// What went wrong migrating.
#[derive(Debug)]
pub(crate) enum MigrateError {
    Database(tokio_postgres::Error),
    /// The database was migrated by a newer Leasehold.
    Newer(i32),
}

impl From<tokio_postgres::Error> for MigrateError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Database(e)
    }
}

/// Creates or migrates the tables; returns the version the database had.
pub(crate) async fn migrate(client: &mut Client) -> Result<i32, MigrateError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS leasehold_schema (version integer NOT NULL)")
        .await?;
    let found: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM leasehold_schema",
            &[],
        )
        .await?
        .get(0);
    if found > VERSION {
        return Err(MigrateError::Newer(found));
    }
    for step in &STEPS[found as usize..] {
        tx.batch_execute(step).await?;
    }
    if found < VERSION {
        tx.execute("DELETE FROM leasehold_schema", &[]).await?;
        tx.execute(
            "INSERT INTO leasehold_schema (version) VALUES ($1)",
            &[&VERSION],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(found)
}
