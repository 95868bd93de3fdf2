//! Publishing through the transactional outbox in PostgreSQL: from a handler's transaction
//! (`PgTransaction::publish`) and from an application's own transaction ([`publish`]). Each
//! writes one row of `leasehold_outbox` through `leasehold_outbox_insert` (schema step 3), in the
//! caller's transaction: it is sent by a relay once that transaction commits, and never if it
//! rolls back.
//!
//! It uses `transaction`, and from outside `store/`, `driver` (this process's name in
//! notifications).

use super::transaction::PgTransaction;
use crate::driver::origin;
use leasehold_actors::error::{Cause, OutboxError};
use leasehold_actors::store::{OutboxMessage, PreparedMessage, Publisher};
use tokio_postgres::types::ToSql;

/// Writes one outbox row (its ordering key's place given under the key's transaction lock) and,
/// unless `$7` is null, notifies the relays' channel with it, delivered at the commit.
const INSERT: &str = "SELECT leasehold_outbox_insert($1, $2, $3, $4, $5, $6, $7)";

/// The parameters of [`INSERT`] for `m`, whose payload is `data`; `notify` the notification's
/// payload (`None`: no notification).
fn params<'a>(
    m: &'a PreparedMessage,
    data: &'a &'a [u8],
    notify: &'a Option<&'a str>,
) -> [&'a (dyn ToSql + Sync); 7] {
    [
        &m.topic,
        &m.ordering_key,
        data,
        &m.attribute_names,
        &m.attribute_values,
        &m.key,
        notify,
    ]
}

fn database(e: tokio_postgres::Error) -> OutboxError {
    OutboxError::Database(Cause::new(e))
}

impl PgTransaction {
    /// Publishes `message` through the outbox: written in this transaction, sent by a relay
    /// (`leasehold-relay`) once it commits, never if it rolls back.
    ///
    /// Its key ([`OUTBOX_KEY_ATTRIBUTE`](leasehold_actors::store::OUTBOX_KEY_ATTRIBUTE)) is
    /// its own ([`OutboxMessage::key`]), or `<subscription>/<message id>/<place>`, the same at
    /// every run of the handler for this message. In a batch's transaction name the message it
    /// is published for with [`OutboxMessage::for_message`] (or give it a key). One round trip;
    /// with an ordering key, this transaction holds the key's lock until it ends, so that one
    /// key's messages are sent in the order their transactions committed. Its commit wakes this
    /// process's relays, and other processes' through `NOTIFY` unless the store says not to
    /// ([`PostgresStore::notify_relays`](crate::PostgresStore::notify_relays)).
    pub async fn publish(&mut self, message: OutboxMessage) -> Result<(), OutboxError> {
        let prepared = message.prepare(Publisher::Handler {
            subscription: &self.subscription,
            claimed: &self.message_ids,
            places: &mut self.places,
        })?;
        let insert = self.prepare_cached(INSERT).await.map_err(database)?;
        let data: &[u8] = &prepared.data;
        // Named after this process: its own relays are woken by the commit itself.
        let notify = self.notify.then(origin);
        self.execute(&insert, &params(&prepared, &data, &notify))
            .await
            .map_err(database)?;
        Ok(())
    }
}

/// Publishes `message` through the outbox in an application's own transaction (an HTTP
/// endpoint that stores an order and publishes `OrderPlaced`), on any `tokio_postgres` client or
/// transaction of a database `PostgresStore` migrated: sent by a relay once that transaction
/// commits, never if it rolls back. Without a key of its own the message gets a random one,
/// fixed in its row (the same on every copy a relay sends). The commit notifies the relays
/// (`NOTIFY`), in this process and others.
///
/// ```no_run
/// # async fn f(pool: leasehold_postgres::deadpool_postgres::Pool) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold::OutboxMessage;
/// let mut client = pool.get().await?;
/// let tx = client.transaction().await?;
/// tx.execute("INSERT INTO orders (id) VALUES ($1)", &[&7_i64]).await?;
/// let placed = OutboxMessage::new("projects/p/topics/orders-placed", r#"{"order":7}"#).key("order-7");
/// leasehold_postgres::publish(&*tx, placed).await?;
/// tx.commit().await?; // the relays wake (LISTEN) and send it
/// # Ok(()) }
/// ```
pub async fn publish<C>(client: &C, message: OutboxMessage) -> Result<(), OutboxError>
where
    C: tokio_postgres::GenericClient + Sync,
{
    let prepared = message.prepare(Publisher::Application)?;
    let data: &[u8] = &prepared.data;
    // Named after no process: this one's relays are not woken by this commit otherwise.
    client
        .execute(INSERT, &params(&prepared, &data, &Some("")))
        .await
        .map_err(database)?;
    Ok(())
}
