//! One round's end, from what the sends answered: which rows are sent, which failed and how
//! long each waits, what is counted, and what is logged (per topic and kind, never per row).

use crate::rules::failure::{FAILURE_KINDS, FailureKind};
use crate::rules::options::RelayOptions;
use leasehold::store::{FailedRow, OutboxRow};
use std::collections::{BTreeMap, HashMap};

/// What one row's send answered.
pub type Sent = Result<(), FailureKind>;

/// What a round does with its rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Rows Pub/Sub took.
    pub sent: Vec<i64>,
    /// Rows whose send failed, each with its wait.
    pub failed: Vec<FailedRow>,
    /// Failed rows by kind, in [`FAILURE_KINDS`]' order.
    pub failures: [u64; FAILURE_KINDS.len()],
    /// Failed rows by topic and kind: one log line each.
    pub by_topic: BTreeMap<(String, FailureKind), u64>,
}

/// Settles `rows` with `answers` (one each, in the same order; rows without an answer count as
/// [`FailureKind::Unavailable`]: their sends did not end in time). A row held back behind a
/// failed row of its ordering key waits as long as that row, so the key goes on in order.
pub fn settle(rows: &[OutboxRow], answers: &[Sent], options: &RelayOptions) -> Settled {
    let mut settled = Settled::default();
    // The wait of each key's first failed row in this round.
    let mut key_waits: HashMap<(&str, &str), std::time::Duration> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        let answer = answers
            .get(i)
            .copied()
            .unwrap_or(Err(FailureKind::Unavailable));
        let kind = match answer {
            Ok(()) => {
                settled.sent.push(row.id);
                continue;
            }
            Err(kind) => kind,
        };
        let failures = row.attempts.saturating_add(1);
        let key = (row.topic.as_str(), row.ordering_key.as_str());
        let retry_after = match (kind, key_waits.get(&key)) {
            (_, Some(wait)) if !row.ordering_key.is_empty() => *wait,
            _ => kind.retry_after(failures, options),
        };
        if !row.ordering_key.is_empty() {
            key_waits.entry(key).or_insert(retry_after);
        }
        let index = FAILURE_KINDS.iter().position(|k| *k == kind).unwrap_or(0);
        settled.failures[index] += 1;
        *settled
            .by_topic
            .entry((row.topic.clone(), kind))
            .or_default() += 1;
        settled.failed.push(FailedRow {
            id: row.id,
            retry_after,
            reason: kind.reason(),
        });
    }
    settled
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn row(id: i64, topic: &str, key: &str, attempts: u32) -> OutboxRow {
        OutboxRow::new(
            id,
            topic.into(),
            bytes::Bytes::new(),
            Vec::new(),
            key.into(),
            id,
            format!("k{id}"),
            SystemTime::UNIX_EPOCH,
            attempts,
        )
    }

    #[test]
    fn a_round_marks_what_was_sent_and_keeps_every_failure_with_its_wait() {
        let rows = [
            row(1, "projects/p/topics/a", "", 0),
            row(2, "projects/p/topics/a", "k", 2),
            row(3, "projects/p/topics/a", "k", 0),
            row(4, "projects/p/topics/missing", "", 0),
            row(5, "projects/p/topics/a", "", 0),
        ];
        let answers = [
            Ok(()),
            Err(FailureKind::Unavailable),
            Err(FailureKind::OrderingKeyPaused),
            Err(FailureKind::TopicMissing),
        ];
        let settled = settle(&rows, &answers, &RelayOptions::default());
        assert_eq!(settled.sent, [1]);
        let waits: Vec<(i64, u64, &str)> = settled
            .failed
            .iter()
            .map(|f| (f.id, f.retry_after.as_secs(), f.reason))
            .collect();
        assert_eq!(
            waits,
            [
                (2, 4, "unavailable"),
                // Behind row 2 in its key: it waits as long, whatever its own count.
                (3, 4, "ordering_key_paused"),
                (4, 60, "topic_missing"),
                // No answer: its send did not end in time.
                (5, 1, "unavailable"),
            ]
        );
        assert_eq!(settled.failures, [2, 1, 0, 0, 1]);
        assert_eq!(
            settled.by_topic[&(
                "projects/p/topics/missing".to_string(),
                FailureKind::TopicMissing
            )],
            1
        );
        assert!(
            settled
                .failed
                .iter()
                .all(|f| f.retry_after > Duration::ZERO)
        );
    }
}
