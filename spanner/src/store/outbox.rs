//! Publishing through the transactional outbox in Spanner: `SpannerTransaction::publish`
//! buffers one row of `leasehold_outbox`, written with the handler's writes at the commit and
//! sent by a relay once committed; nothing of it exists if the transaction aborts or rolls
//! back. An ordering key's place is its last place plus one, read in the transaction: two
//! transactions that publish on one key read the same rows, so Spanner commits one after the
//! other (or aborts one), and the places follow the commits.
//!
//! It uses `error`, `transaction` and `progress`.

use super::error::client_error;
use super::progress::SpannerStore;
use super::transaction::SpannerTransaction;
use crate::schema::OUTBOX_TABLE;
use gcloud_gax::grpc::Status;
use gcloud_spanner::mutation::insert;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::value::CommitTimestamp;
use leasehold_actors::error::{Cause, OutboxError, StoreError};
use leasehold_actors::store::{OutboxMessage, PreparedMessage, Publisher};
use std::sync::Arc;

/// The columns an outbox row is written with, in order.
const COLUMNS: [&str; 11] = [
    "id",
    "topic",
    "ordering_key",
    "seq",
    "data",
    "attribute_names",
    "attribute_values",
    "message_key",
    "created_at",
    "pending_shard",
    "attempts",
];
/// Shards of the pending index's key (its first column): waiting rows spread over splits.
const PENDING_SHARDS: i64 = 16;
/// The hint the Spanner emulator needs to read through a null-filtered index (it cannot tell
/// that the query's conditions exclude the nulls); Spanner itself ignores it.
macro_rules! emulator_hint {
    () => {
        "@{spanner_emulator.disable_query_null_filtered_index_check=true} "
    };
}
pub(crate) use emulator_hint;

/// An ordering key's last place, through its unique index.
const LAST_SEQ: &str = concat!(
    emulator_hint!(),
    "SELECT MAX(seq) FROM leasehold_outbox@{FORCE_INDEX=leasehold_outbox_order}
    WHERE topic = @topic AND ordering_key = @key"
);

fn database(status: Status) -> OutboxError {
    OutboxError::Database(Cause::new(status))
}

impl SpannerStore {
    /// Begins a read-write transaction of the application's own (an HTTP endpoint that stores
    /// an order and publishes `OrderPlaced`), not a handler's: write and
    /// [`publish`](SpannerTransaction::publish) through it, then
    /// [`commit`](SpannerTransaction::commit) it (this process's relays wake) or roll it back.
    /// Spanner may abort it ([`StoreError::Aborted`] from the commit, or a statement's
    /// `ABORTED`): then nothing of it is kept, and it is yours to run again.
    ///
    /// ```no_run
    /// # async fn f(store: leasehold_spanner::SpannerStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::OutboxMessage;
    /// let mut tx = store.transaction().await?;
    /// tx.publish(OutboxMessage::new("projects/p/topics/orders-placed", "7").key("order-7")).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction(&self) -> Result<SpannerTransaction, StoreError> {
        let tx = self
            .client
            .begin_read_write_transaction()
            .await
            .map_err(client_error)?;
        let mut tx = SpannerTransaction::new(tx, Arc::from(""), self.outbox.clone());
        tx.application = true;
        Ok(tx)
    }
}

impl SpannerTransaction {
    /// Publishes `message` through the outbox: its row is written with this transaction's
    /// commit and sent by a relay (`leasehold-relay`) once committed; an abort or a rollback
    /// leaves nothing. Its key is its own ([`OutboxMessage::key`]), or
    /// `<subscription>/<message id>/<place>`, the same at every run of the handler for the
    /// message (a run after an abort included). In a batch's transaction, name the message it is
    /// published for with [`OutboxMessage::for_message`] (or give it a key). In an application's
    /// own transaction ([`SpannerStore::transaction`](crate::SpannerStore::transaction)), a
    /// message without a key gets a random one, fixed in its row.
    ///
    /// No round trip without an ordering key (a mutation, sent with the commit); with one, a
    /// read of the key's last place (the first publish on that key in this transaction).
    pub async fn publish(&mut self, message: OutboxMessage) -> Result<(), OutboxError> {
        let publisher = if self.application {
            Publisher::Application
        } else {
            Publisher::Handler {
                subscription: &self.subscription,
                claimed: &self.message_ids,
                places: &mut self.places,
            }
        };
        let prepared = message.prepare(publisher)?;
        let seq = self.next_seq(&prepared).await?;
        let row = row(&prepared, seq);
        self.buffer_write(vec![row]);
        self.published += 1;
        Ok(())
    }

    /// The place of the next row of `m`'s ordering key (0 without one).
    async fn next_seq(&mut self, m: &PreparedMessage) -> Result<i64, OutboxError> {
        if m.ordering_key.is_empty() {
            return Ok(0);
        }
        let key = (m.topic.clone(), m.ordering_key.clone());
        let last = match self.last_seqs.get(&key) {
            Some(last) => *last,
            None => {
                let mut read = Statement::new(LAST_SEQ);
                read.add_param("topic", &m.topic);
                read.add_param("key", &m.ordering_key);
                let rows = self.query(read).await.map_err(database)?;
                rows.first()
                    .map(|r| r.column::<Option<i64>>(0))
                    .transpose()
                    .map_err(|e| OutboxError::Database(Cause::new(e)))?
                    .flatten()
                    .unwrap_or(0)
            }
        };
        self.last_seqs.insert(key, last + 1);
        Ok(last + 1)
    }
}

/// The mutation that writes `m`'s row at place `seq`, with a random id (no hot spot) and the
/// commit's timestamp.
fn row(m: &PreparedMessage, seq: i64) -> gcloud_googleapis::spanner::v1::Mutation {
    let id = fastrand::i64(1..);
    let ordering_key = (!m.ordering_key.is_empty()).then(|| m.ordering_key.clone());
    let data: &[u8] = &m.data;
    insert(
        OUTBOX_TABLE,
        &COLUMNS,
        &[
            &id,
            &m.topic,
            &ordering_key,
            &seq,
            &data,
            &m.attribute_names,
            &m.attribute_values,
            &m.key,
            &CommitTimestamp::new(),
            &id.rem_euclid(PENDING_SHARDS),
            &0_i64,
        ],
    )
}
