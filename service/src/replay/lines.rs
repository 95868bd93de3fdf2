//! What a replay prints: a dry run's line per candidate, the progress text, and the summary.
//! Never a payload, never an attribute value of the publisher's.
//!
//! Uses the runtime's replay types only.

use leasehold::replay::{Candidate, ReplayProgress};
use std::time::SystemTime;

/// One line of a dry run's list: never a payload, never an attribute value of the publisher's.
pub fn candidate_line(c: &Candidate) -> String {
    let time = |t: Option<SystemTime>| {
        t.map_or("-".to_string(), |t| {
            humantime::format_rfc3339_millis(t).to_string()
        })
    };
    format!(
        "{id}  published {published}  source {source}  delivery count {count}  first published {first}  {size} bytes  attribute keys [{keys}]",
        id = c.message_id,
        published = time(c.publish_time),
        source = c.source_subscription.as_deref().unwrap_or("-"),
        count = c
            .source_delivery_count
            .map_or("-".to_string(), |n| n.to_string()),
        first = c.source_publish_time.as_deref().unwrap_or("-"),
        size = c.size,
        keys = c.attribute_keys.join(", "),
    )
}

/// The summary line of a run.
pub fn summary_line(key: &str, end: &ReplayProgress) -> String {
    let mut line = format!(
        "{key}: replayed {}, still failing {}, left out by the filter {}, not taken {}, released {}",
        end.replayed, end.still_failing, end.filtered, end.not_taken, end.released,
    );
    if end.listed > 0 {
        line.push_str(&format!(", listed {}", end.listed));
    }
    if end.failed_acks > 0 {
        line.push_str(&format!(", refused acks {}", end.failed_acks));
    }
    line.push_str(&format!(
        "; left on the dead-letter subscription: {} of those this run saw{}",
        end.left(),
        if end.cancelled { " (cancelled)" } else { "" }
    ));
    line
}

pub(super) fn progress_text(p: &ReplayProgress) -> String {
    format!(
        "replayed {}, still failing {}, running {}, filtered {}, listed {}",
        p.replayed, p.still_failing, p.running, p.filtered, p.listed
    )
}
