//! What a record in `leasehold_progress` says: the outcome it holds, written and read, and the
//! two conditions on it that every statement shares: the record counts (its message finished),
//! or a claim takes it over.
//!
//! It uses no other module of the crate. The conditions are macros that expand to string
//! literals, so that the statements are built from them with `concat!` at compile time.

use leasehold_actors::store::Completed;

/// The condition that the record `$p` (`"p."`, or `""` for the table's own columns) counts: its
/// message finished (acked or dropped) and the record has not expired. Exactly the records that
/// [`taken_over!`] does not hold for.
macro_rules! finished {
    ($p:literal) => {
        concat!($p, "expires_at >= now() AND ", $p, "outcome <> 'claimed'")
    };
}

/// The condition that a claim takes the record `$p` over: it expired, or it was committed still
/// claimed (by a handler that ran `COMMIT` itself).
macro_rules! taken_over {
    ($p:literal) => {
        concat!($p, "expires_at < now() OR ", $p, "outcome = 'claimed'")
    };
}

pub(crate) use {finished, taken_over};

/// How an outcome is written in a record.
pub(crate) fn completed_text(completed: Completed) -> &'static str {
    match completed {
        Completed::Acked => "acked",
        Completed::Dropped => "dropped",
    }
}

/// The outcome a record holds, if it is one (`claimed` is not).
pub(crate) fn completed(outcome: &str) -> Option<Completed> {
    match outcome {
        "acked" => Some(Completed::Acked),
        "dropped" => Some(Completed::Dropped),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_reads_back_as_written_and_a_claim_is_none() {
        for outcome in [Completed::Acked, Completed::Dropped] {
            assert_eq!(completed(completed_text(outcome)), Some(outcome));
        }
        assert_eq!(completed("claimed"), None);
    }

    #[test]
    fn the_conditions_name_the_record_they_are_given() {
        assert_eq!(
            finished!("p."),
            "p.expires_at >= now() AND p.outcome <> 'claimed'"
        );
        assert_eq!(
            finished!(""),
            "expires_at >= now() AND outcome <> 'claimed'"
        );
        assert_eq!(
            taken_over!("p."),
            "p.expires_at < now() OR p.outcome = 'claimed'"
        );
    }
}
