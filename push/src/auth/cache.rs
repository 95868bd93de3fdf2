//! Tokens already verified, kept until they expire, so that a token Pub/Sub sends again (it
//! reuses one for up to an hour) costs a hash and a lookup instead of an RSA verification.
//!
//! Owns [`Verified`], plain data with pure methods: the clock is passed in. Uses `sha2` and
//! `times.rs`'s rule, the one every check applies; nothing else of this crate.
//!
//! What keeps it safe:
//! - Only a token that passed the whole check (Google's verifier, then the claims) goes in, so
//!   nothing an attacker makes up enters it, however many distinct tokens they send: each is
//!   verified, as without a cache, and refused.
//! - An entry is the SHA-256 of the whole token (header, claims and signature), never the
//!   token: a token that differs in one byte, its signature included, is another entry, and
//!   none is verified by being like one that was.
//! - A hit only spares the signature: the check still reads the token's claims each time
//!   (audience, issuer, email, `exp`, `nbf`, `iat`), and the entry's own `exp` is checked
//!   again here.
//! - It is bounded ([`DEFAULT_TOKEN_CACHE`] entries). When it is full, the entries past their
//!   `exp` go first, then the one that expires soonest.

use super::times::in_time;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::time::Duration;

/// How many verified tokens a [`TokenCheck`](super::TokenCheck) keeps by default. Pub/Sub's
/// push servers each reuse a token for up to an hour, so even a busy subscription sends a few
/// hundred distinct tokens an hour; an entry is about 80 bytes, so the whole cache under 100 KB.
pub const DEFAULT_TOKEN_CACHE: usize = 1024;

/// The longest a verified token is kept, whatever its `exp` says: the hour that Google's ID
/// tokens live. A signed token that claimed to live longer is verified again after it.
pub const MAX_TOKEN_LIFE: Duration = Duration::from_secs(3600);

/// The SHA-256 of a whole token.
pub(crate) type Digest = [u8; 32];

/// The digest of `token`.
pub(crate) fn digest(token: &str) -> Digest {
    Sha256::digest(token.as_bytes()).into()
}

/// Verified tokens by digest, each with the time (seconds since the epoch) it may be used to.
#[derive(Debug, Default)]
pub(crate) struct Verified {
    until: HashMap<Digest, f64>,
    capacity: usize,
    /// Checks answered from the cache, and tokens verified and put in: for the tests.
    pub(crate) hits: u64,
    pub(crate) inserted: u64,
}

impl Verified {
    /// A cache of at most `capacity` tokens (0: none is kept).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// Whether it keeps anything.
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// How many tokens it may hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many tokens it holds.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether `token` was verified and may still be used at `now` (with `skew`, as the check's
    /// `exp` rule). An entry past its time is removed.
    pub(crate) fn hit(&mut self, token: &Digest, now: f64, skew: f64) -> bool {
        let Some(&until) = self.until.get(token) else {
            return false;
        };
        if in_time(Some(until), [], now, skew).is_err() {
            self.until.remove(token);
            return false;
        }
        self.hits += 1;
        true
    }

    /// Keeps `token`, verified at `now` with `exp` as its expiry, until then (at most
    /// [`MAX_TOKEN_LIFE`]). When full, the entries past their time go first, then the one
    /// whose time ends soonest (this one, if that is it).
    pub(crate) fn insert(&mut self, token: Digest, exp: f64, now: f64, skew: f64) {
        if !self.enabled() {
            return;
        }
        let until = exp.min(now + MAX_TOKEN_LIFE.as_secs_f64());
        if self.until.len() >= self.capacity && !self.until.contains_key(&token) {
            self.until
                .retain(|_, until| in_time(Some(*until), [], now, skew).is_ok());
            if self.until.len() >= self.capacity {
                let soonest = self
                    .until
                    .iter()
                    .min_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(digest, until)| (*digest, *until));
                match soonest {
                    Some((digest, earliest)) if earliest < until => {
                        self.until.remove(&digest);
                    }
                    _ => return,
                }
            }
        }
        self.until.insert(token, until);
        self.inserted += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_800_000_000.0;
    const SKEW: f64 = 10.0;

    fn token(n: u32) -> Digest {
        digest(&format!("header.claims-{n}.signature"))
    }

    #[test]
    fn a_verified_token_is_a_hit_until_its_exp_and_the_skew() {
        let mut cache = Verified::new(4);
        cache.insert(token(1), NOW + 60.0, NOW, SKEW);
        assert!(cache.hit(&token(1), NOW, SKEW));
        assert!(
            cache.hit(&token(1), NOW + 60.0 + SKEW, SKEW),
            "within the skew"
        );
        assert!(!cache.hit(&token(1), NOW + 60.0 + SKEW + 1.0, SKEW));
        assert_eq!(cache.len(), 0, "an entry past its time is removed");
        assert!(!cache.hit(&token(2), NOW, SKEW), "never inserted");
        assert_eq!(cache.hits, 2);
    }

    #[test]
    fn one_byte_of_difference_is_another_token() {
        let mut cache = Verified::new(4);
        let good = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2lnbmF0dXJl";
        cache.insert(digest(good), NOW + 60.0, NOW, SKEW);
        let mut other = good.to_string();
        other.pop();
        other.push('M');
        assert!(!cache.hit(&digest(&other), NOW, SKEW));
        assert!(!cache.hit(&digest(&good[..good.len() - 1]), NOW, SKEW));
        assert!(cache.hit(&digest(good), NOW, SKEW));
    }

    #[test]
    fn an_entry_lives_no_longer_than_googles_tokens_do() {
        let mut cache = Verified::new(4);
        cache.insert(token(1), NOW + 365.0 * 86_400.0, NOW, SKEW);
        assert!(cache.hit(&token(1), NOW + MAX_TOKEN_LIFE.as_secs_f64(), SKEW));
        assert!(!cache.hit(
            &token(1),
            NOW + MAX_TOKEN_LIFE.as_secs_f64() + SKEW + 1.0,
            SKEW
        ));
    }

    #[test]
    fn full_it_drops_the_expired_then_the_soonest_to_expire() {
        let mut cache = Verified::new(3);
        cache.insert(token(1), NOW + 100.0, NOW, SKEW);
        cache.insert(token(2), NOW + 20.0, NOW, SKEW);
        cache.insert(token(3), NOW + 300.0, NOW, SKEW);
        // Full: token 2 expires soonest and goes.
        cache.insert(token(4), NOW + 200.0, NOW, SKEW);
        assert_eq!(cache.len(), 3);
        assert!(!cache.hit(&token(2), NOW, SKEW));
        // One that would expire before every entry is not kept, and takes nobody's place.
        cache.insert(token(5), NOW + 50.0, NOW, SKEW);
        assert!(!cache.hit(&token(5), NOW, SKEW));
        assert!(cache.hit(&token(1), NOW, SKEW));
        // Later, token 1 has expired: it goes first, though token 6 expires sooner than 3 and 4.
        let later = NOW + 150.0;
        cache.insert(token(6), later + 30.0, later, SKEW);
        assert!(!cache.hit(&token(1), later, SKEW));
        for kept in [3, 4, 6] {
            assert!(cache.hit(&token(kept), later, SKEW), "{kept}");
        }
    }

    #[test]
    fn a_flood_of_distinct_tokens_never_grows_it_past_its_bound() {
        let mut cache = Verified::new(16);
        for n in 0..10_000 {
            cache.insert(token(n), NOW + 60.0 + f64::from(n % 97), NOW, SKEW);
            assert!(cache.len() <= 16);
        }
        assert_eq!(cache.len(), 16);
    }

    #[test]
    fn a_cache_of_no_entries_keeps_nothing() {
        let mut cache = Verified::new(0);
        assert!(!cache.enabled());
        cache.insert(token(1), NOW + 60.0, NOW, SKEW);
        assert!(!cache.hit(&token(1), NOW, SKEW));
        assert_eq!(cache.len(), 0);
    }
}
