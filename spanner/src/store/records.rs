//! What a claim row holds and how it is keyed: the shard of a message id, the row's key, the
//! outcome's text, and the mutation that writes a finished message's row.
//!
//! It uses no other module of the store.

use gcloud_googleapis::spanner::v1::Mutation;
use gcloud_spanner::key::Key;
use gcloud_spanner::mutation::insert;
use gcloud_spanner::value::CommitTimestamp;
use leasehold_actors::store::Completed;

/// Shards of the key space: the leading key column takes 0 to `SHARDS - 1`.
pub(crate) const SHARDS: u32 = 64;

/// The columns of a claim row, in the order the mutation writes them.
pub(crate) const COLUMNS: [&str; 5] = [
    "shard",
    "subscription",
    "message_id",
    "outcome",
    "committed_at",
];

/// The shard of `message_id`: a CRC-32 of its bytes, so every replica (and every version of
/// Leasehold) finds a message's row under the same key.
pub(crate) fn shard(message_id: &str) -> i64 {
    i64::from(crc32fast::hash(message_id.as_bytes()) % SHARDS)
}

/// The key of `message_id`'s row for `subscription`.
pub(crate) fn key(subscription: &str, message_id: &str) -> Key {
    Key::composite(&[&shard(message_id), &subscription, &message_id])
}

/// The outcome as the row keeps it.
pub(crate) fn outcome_text(completed: Completed) -> &'static str {
    match completed {
        Completed::Acked => "acked",
        Completed::Dropped => "dropped",
    }
}

/// The outcome a row keeps, if it is one Leasehold wrote.
pub(crate) fn completed(text: &str) -> Option<Completed> {
    match text {
        "acked" => Some(Completed::Acked),
        "dropped" => Some(Completed::Dropped),
        _ => None,
    }
}

/// Writes the row of a finished message at the commit, stamped with the commit's timestamp.
/// An insert: if another transaction committed the same message first, the commit fails
/// (`ALREADY_EXISTS`) and nothing of this one is kept.
pub(crate) fn finished(subscription: &str, message_id: &str, completed: Completed) -> Mutation {
    insert(
        super::super::schema::TABLE,
        &COLUMNS,
        &[
            &shard(message_id),
            &subscription,
            &message_id,
            &outcome_text(completed),
            &CommitTimestamp::new(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread_consecutive_ids() {
        // A CRC-32 of the id's bytes: the same on every replica and every version.
        assert_eq!(shard("123"), i64::from(crc32fast::hash(b"123") % 64));
        let shards: std::collections::HashSet<i64> = (10_000_000u64..10_000_064)
            .map(|n| shard(&n.to_string()))
            .collect();
        assert!(
            shards.len() > 32,
            "64 consecutive ids fell in {} shards",
            shards.len()
        );
        assert!(shards.iter().all(|s| (0..64).contains(s)));
    }

    #[test]
    fn outcomes_round_trip_and_nothing_else_is_one() {
        for c in [Completed::Acked, Completed::Dropped] {
            assert_eq!(completed(outcome_text(c)), Some(c));
        }
        assert_eq!(completed("claimed"), None);
    }
}
