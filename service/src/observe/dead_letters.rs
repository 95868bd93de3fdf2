//! The status page's dead-letter and replay sections: a subscription's dead-letter topic, what
//! was dead-lettered recently and why (id, attempt, cause; never a payload), the command that
//! replays it, and the key's latest replay.
//!
//! Uses [`super::html`] to write, [`super::running`] and [`super::replays`] to read.

use crate::observe::html::{ago, escape};
use crate::observe::replays::command_line;
use crate::observe::running::Running;
use leasehold::status::{FailureKind, FailureRecord};
use std::fmt::Write;
use std::time::SystemTime;

const DEAD_LETTERED_SHOWN: usize = 20;

/// Why a message was dead-lettered, from the failures recorded for its last attempt: `drop()`
/// nacked on the last attempt, or a nack on it (a retry, an error, a panic, a release at a
/// stop), which Pub/Sub dead-letters as well; with what else was recorded for that attempt.
fn dead_lettered(failures: &[FailureRecord]) -> Vec<(&FailureRecord, String)> {
    let mut shown = Vec::new();
    for f in failures.iter().rev() {
        let cause = failures.iter().find(|o| {
            o.message_id == f.message_id
                && o.attempt == f.attempt
                && !matches!(
                    o.kind,
                    FailureKind::DeadLettered | FailureKind::RetriedOnLastAttempt
                )
        });
        let why = match (f.kind, cause) {
            (FailureKind::DeadLettered, Some(c)) => {
                format!("drop() on the last attempt, after a {}", c.kind.as_str())
            }
            (FailureKind::DeadLettered, None) => "drop() on the last attempt".to_string(),
            (FailureKind::RetriedOnLastAttempt, Some(c)) => {
                format!("retried on the last attempt after a {}", c.kind.as_str())
            }
            (FailureKind::RetriedOnLastAttempt, None) => {
                "retried on the last attempt (retry(), retry_after or a stop)".to_string()
            }
            _ => continue,
        };
        shown.push((f, why));
        if shown.len() == DEAD_LETTERED_SHOWN {
            break;
        }
    }
    shown
}

/// The dead-letter section of a subscription with a dead-letter policy: its topic, what was
/// dead-lettered recently (id, attempt, why; never a payload) and the command that replays it.
pub(super) fn dead_letters(page: &mut String, running: &Running) {
    let subscription = &running.subscription;
    let Some(topic) = subscription
        .info()
        .and_then(|i| i.dead_letter_topic.clone())
    else {
        return;
    };
    let key = escape(&running.key);
    let from = running.dead_letter_subscription.as_deref();
    let _ = write!(
        page,
        r#"<h3>Dead letters</h3>
<table class="dead-letters">
<tr><th>dead-letter topic</th><td class="dead-letter-topic">{topic}</td></tr>
<tr><th>after attempt</th><td>{limit}</td></tr>
<tr><th>replayed from</th><td class="dead-letter-subscription">{from}</td></tr>
<tr><th>replay</th><td class="replay-command"><code>{command}</code>, then without <code>--dry-run</code></td></tr>
</table>
"#,
        topic = escape(&topic),
        limit = subscription
            .max_attempts()
            .map_or("-".to_string(), |l| l.to_string()),
        from = from.map_or(
            "not configured: set dead_letter_subscription, or pass --from".to_string(),
            escape
        ),
        command = escape(&command_line(&running.key, from)),
    );
    let failures = subscription.recent_failures();
    let shown = dead_lettered(&failures);
    if shown.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"dead-lettered\">Nothing dead-lettered recently by {key}.</p>"
        );
        return;
    }
    page.push_str(
        "<table class=\"dead-lettered\"><tr><th>when</th><th>message id</th><th>attempt</th>\
         <th>why</th></tr>\n",
    );
    for (f, why) in shown {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ago(f.at),
            escape(&f.message_id),
            f.attempt.map_or("-".to_string(), |a| a.to_string()),
            escape(&why)
        );
    }
    page.push_str("</table>\n");
    page.push_str(
        "<p class=\"dead-lettered\"><small>The ids are the messages' ids on this subscription: the \
         copies on the dead-letter topic have ids of their own, which a dry run lists with the \
         original's publish time.</small></p>\n",
    );
}

/// The key's latest replay: this process's own, or one a `replay KEY` process on this machine
/// reports; where it takes from and where it is.
pub(super) fn replay(page: &mut String, running: &Running) {
    let Some(r) = running.replay_report() else {
        return;
    };
    let _ = write!(
        page,
        r#"<h3>Replay {state}{dry}</h3>
<table class="replay">
<tr><th>from</th><td>{from}</td></tr>
<tr><th>process</th><td>{pid}, last report {ago} s ago</td></tr>
<tr><th>replayed, still failing, running</th><td class="replay-progress">{replayed}, {failing}, {running}</td></tr>
<tr><th>left out by the filter, not taken, released, listed</th><td>{filtered}, {not_taken}, {released}, {listed}</td></tr>
</table>
"#,
        state = r.state(),
        dry = if r.dry_run { " (dry run)" } else { "" },
        from = escape(&r.from),
        pid = r.pid,
        ago = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .saturating_sub(r.updated),
        replayed = r.replayed,
        failing = r.still_failing,
        running = r.running,
        filtered = r.filtered,
        not_taken = r.not_taken,
        released = r.released,
        listed = r.listed,
    );
}
