//! The time rule of a token's claims (`exp`, `nbf`, `iat` against the clock and its skew),
//! applied to every token as sent, to its verified claims, and to a verified token kept for
//! reuse.
//!
//! Owns [`in_time`] and [`now`]. Uses [`AuthError`](super::error::AuthError) only.

use super::error::AuthError;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the epoch, now.
pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `exp` present, a number, and not before `now` by more than `skew`; each of `not_before` (the
/// `nbf` and `iat` present, `None` when not a number) a number not after `now` by more than
/// `skew`. Times are seconds since the epoch, `skew` whole seconds as the verifier's leeway.
pub(crate) fn in_time(
    exp: Option<f64>,
    not_before: impl IntoIterator<Item = Option<f64>>,
    now: f64,
    skew: f64,
) -> Result<(), AuthError> {
    if !exp.is_some_and(|exp| exp >= now - skew) {
        return Err(AuthError::Expired);
    }
    if not_before
        .into_iter()
        .any(|at| !at.is_some_and(|at| at <= now + skew))
    {
        return Err(AuthError::NotYetValid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_not_before_within_the_skew() {
        let (now, skew) = (1_000.0, 10.0);
        assert_eq!(in_time(Some(990.0), [], now, skew), Ok(()));
        assert_eq!(in_time(Some(989.0), [], now, skew), Err(AuthError::Expired));
        assert_eq!(in_time(None, [], now, skew), Err(AuthError::Expired));
        assert_eq!(in_time(Some(2e3), [Some(1_010.0)], now, skew), Ok(()));
        let late = [Some(900.0), Some(1_011.0)];
        assert_eq!(
            in_time(Some(2e3), late, now, skew),
            Err(AuthError::NotYetValid)
        );
        let not_a_number = [None];
        assert_eq!(
            in_time(Some(2e3), not_a_number, now, skew),
            Err(AuthError::NotYetValid)
        );
        assert_eq!(
            in_time(Some(f64::NAN), [], now, skew),
            Err(AuthError::Expired)
        );
    }
}
