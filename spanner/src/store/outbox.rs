//! Publishing through the transactional outbox in Spanner: `SpannerTransaction::publish`
//! buffers one row of `leasehold_outbox`, written with the handler's writes at the commit and
//! sent by a relay once committed; nothing of it exists if the transaction aborts or rolls
//! back. An ordering key's place is its last place plus one, read in the transaction: two
//! transactions that publish on one key read the same rows, so Spanner commits one after the
//! other (or aborts one), and the places follow the commits.
//!
//! It uses `error` and `transaction`.

use super::transaction::SpannerTransaction;
use crate::schema::OUTBOX_TABLE;
use gcloud_gax::grpc::Status;
use gcloud_spanner::mutation::insert;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::value::CommitTimestamp;
use leasehold_actors::error::{Cause, OutboxError};
use leasehold_actors::store::{OutboxMessage, PreparedMessage, Publisher};

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

impl SpannerTransaction {
    /// Publishes `message` through the outbox: its row is written with this transaction's
    /// commit and sent by a relay (`leasehold-relay`) once committed; an abort or a rollback
    /// leaves nothing. Its key is its own ([`OutboxMessage::key`]), or
    /// `<subscription>/<message id>/<place>`, the same at every run of the handler for the
    /// message (a run after an abort included). In a batch's transaction, name the message it is
    /// published for with [`OutboxMessage::for_message`] (or give it a key).
    ///
    /// No round trip without an ordering key (a mutation, sent with the commit); with one, a
    /// read of the key's last place (the first publish on that key in this transaction).
    pub async fn publish(&mut self, message: OutboxMessage) -> Result<(), OutboxError> {
        let prepared = message.prepare(Publisher::Handler {
            subscription: &self.subscription,
            claimed: &self.message_ids,
            places: &mut self.places,
        })?;
        let seq = self.next_seq(&prepared).await?;
        let row = row(&prepared, seq);
        self.buffer_write(vec![row]);
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
