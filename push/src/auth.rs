//! Who sent a push: the OIDC token Pub/Sub attaches to an authenticated push, checked with
//! Google's own ID-token verifier before anything of the request's body is read.
//!
//! Owns the token rules (signature, `aud`, `iss`, `exp`/`nbf`/`iat`, `email`,
//! `email_verified`, RS256 only) and [`AuthError`]. May use `google-cloud-auth` (and the
//! `jsonwebtoken` errors it returns); nothing else of this crate.
//!
//! Google's verifier checks the signature against Google's keys, `aud`, `exp` and the email; a
//! check here does the rest, which it leaves open for a push:
//!
//! - It takes the algorithm from the token's own header, so it would take an ES256 token (the
//!   keys of Identity-Aware Proxy): anything but RS256, Pub/Sub's algorithm, is refused first.
//! - Its issuers include `https://cloud.google.com/iap`, and it passes a token with no `iss` or
//!   no `aud` at all: `iss` must be one of the two spellings of `accounts.google.com`, `aud`
//!   one string equal to the audience.
//! - It does not read `nbf`: neither `nbf` nor `iat` may be past now and the clock skew.
//! - It panics (a `serde_json::Map` index) on a signed token without `email` or
//!   `email_verified`: the claims are read here before it sees them.
//! - Its key cache fails a verification that overlaps another's key fetch: see
//!   [`TokenCheck`].
//!
//! - A token whose `kid` is not among the keys makes it fetch Google's key set again, each
//!   time: a flood of such tokens would be a flood of fetches, every check queued behind them.
//!   Here the key set's `kid`s are read first (again only for a `kid` not in it, and not while
//!   the last read is younger than [`UNKNOWN_KID_REFETCH`]), and a token of an unknown `kid`
//!   never reaches the verifier.
//!
//! So the claims are checked twice: on the token as sent, before the verifier (a refusal costs
//! no key fetch, and the verifier only sees tokens it cannot panic on), and on the claims the
//! verifier returns (the decision rests on signed claims).
//!
//! A token that passed is kept, by its SHA-256, until its `exp` (`auth/cache.rs`): sent again,
//! its claims are read and checked as above, then its signature is not verified again. The
//! time rule every check applies is `auth/times.rs`.
//!
//! On Cloud Run with authentication required, Cloud Run's front end verifies the token itself
//! and passes it on with its signature replaced by `SIGNATURE_REMOVED_BY_GOOGLE`: such a token
//! is refused ([`AuthError::SignatureRemoved`]) unless the check was built
//! [`verified_by_cloud_run`](TokenCheck::verified_by_cloud_run), and then only its claims are
//! checked.

mod cache;
mod error;
mod times;

pub use cache::{DEFAULT_TOKEN_CACHE, MAX_TOKEN_LIFE};
pub use error::AuthError;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use google_cloud_auth::credentials::idtoken::verifier::{self, Builder, Verifier};
use jsonwebtoken::errors::ErrorKind;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use times::{in_time, now};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The `iss` of a Google-signed ID token, either spelling.
const ISSUERS: [&str; 2] = ["accounts.google.com", "https://accounts.google.com"];

/// A JSON object: a JWT's header, or its claims.
type Object = Map<String, Value>;

/// The only signing algorithm of Pub/Sub's tokens.
const ALGORITHM: &str = "RS256";

/// How far a token's times may be off, as Google's verifier defaults it.
const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(10);

/// How long a check waits for Google's keys when none is configured.
const DEFAULT_KEY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after a fetch of Google's keys for an unknown `kid` another unknown `kid` is refused
/// without a fetch. Google publishes a new key well before it signs with it.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(30);

/// What Cloud Run puts in place of the signature of a token it verified itself.
const SIGNATURE_REMOVED: &str = "SIGNATURE_REMOVED_BY_GOOGLE";

/// Where Google publishes the keys of its ID tokens (RS256), as its verifier reads them.
const GOOGLE_KEYS: &str = "https://www.googleapis.com/oauth2/v3/certs";

/// The `kid`s of Google's key set as last read, and when.
#[derive(Debug, Default)]
struct Kids {
    known: HashSet<String>,
    read_at: Option<Instant>,
}

/// The `kid`s of the key set at `url`.
async fn key_ids(url: &str) -> Result<HashSet<String>, reqwest::Error> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<Key>,
    }
    #[derive(serde::Deserialize)]
    struct Key {
        kid: Option<String>,
    }
    let set: Set = reqwest::get(url).await?.error_for_status()?.json().await?;
    Ok(set.keys.into_iter().filter_map(|k| k.kid).collect())
}

/// What the verifier says when its key set has no key of the token's `kid` (a load-cert error,
/// like a failed fetch, but the token's fault): a key retired after [`TokenCheck`] last read
/// the set. (A `kid` missing from the set as read here is refused before the verifier sees
/// it.)
const NO_MATCHING_KID: &str = "did not contain a matching `kid`";

/// Checks the push's `Authorization: Bearer <token>`.
///
/// Cheap to clone; clones share one verifier, so one cache of Google's keys. The verifier sits
/// behind a [`tokio::sync::Mutex`] and checks run one at a time through it: its key cache
/// (google-cloud-auth 1.19) takes its lock with `try_write` and holds it across the fetch of
/// the key set, so a second verification during a fetch fails ("failed to obtain lock")
/// instead of waiting. Each check holds the mutex for one verification, which is CPU only once
/// the keys are cached, and waits at most [`with_key_timeout`](Self::with_key_timeout) for it.
#[derive(Clone)]
pub struct TokenCheck {
    audience: String,
    service_account: String,
    jwks_url: Option<String>,
    clock_skew: Duration,
    key_timeout: Duration,
    cloud_run: bool,
    verifier: Arc<Mutex<Verifier>>,
    kids: Arc<parking_lot::Mutex<Kids>>,
    /// Held while the key set is read for an unknown `kid`.
    refresh: Arc<Mutex<()>>,
    /// Tokens verified before, until their `exp`.
    verified: Arc<parking_lot::Mutex<cache::Verified>>,
}

impl TokenCheck {
    /// Tokens for `audience` (the subscription's `--push-auth-token-audience`, or the push
    /// endpoint's URL when none was set), signed by Google for `service_account` (the
    /// subscription's `--push-auth-service-account`).
    pub fn new(audience: impl Into<String>, service_account: impl Into<String>) -> Self {
        let (audience, service_account) = (audience.into(), service_account.into());
        Self {
            verifier: build(&audience, &service_account, None, DEFAULT_CLOCK_SKEW),
            audience,
            service_account,
            jwks_url: None,
            clock_skew: DEFAULT_CLOCK_SKEW,
            key_timeout: DEFAULT_KEY_TIMEOUT,
            cloud_run: false,
            kids: Arc::default(),
            refresh: Arc::default(),
            verified: Arc::new(parking_lot::Mutex::new(cache::Verified::new(
                DEFAULT_TOKEN_CACHE,
            ))),
        }
    }

    /// Takes a token whose signature Cloud Run removed (`SIGNATURE_REMOVED_BY_GOOGLE`) after
    /// verifying it itself, checking only its claims (audience, issuer, times, email). For a
    /// Cloud Run service that requires authentication (deployed without
    /// `--allow-unauthenticated`), where every request has passed Cloud Run's own check of the
    /// token and its invoker permission; nowhere a request can reach the process another way.
    /// A token that still has its signature is verified in full.
    pub fn verified_by_cloud_run(mut self) -> Self {
        self.cloud_run = true;
        self
    }

    /// Reads the signing keys from `url` instead of Google's (tests).
    pub fn with_jwks_url(mut self, url: impl Into<String>) -> Self {
        self.jwks_url = Some(url.into());
        self.rebuild();
        self
    }

    /// How far a token's `exp`, `nbf` and `iat` may be off, in whole seconds. Default 10 s.
    pub fn with_clock_skew(mut self, skew: Duration) -> Self {
        self.clock_skew = skew;
        self.rebuild();
        self
    }

    /// How long a check waits for the verifier, its fetch of Google's keys included (the
    /// verifier's own fetch has no timeout), before the push is answered 503. Default 10 s.
    pub fn with_key_timeout(mut self, timeout: Duration) -> Self {
        self.key_timeout = timeout;
        self
    }

    /// How many verified tokens are kept, each until its `exp` (at most an hour), so that a
    /// token sent again is not verified again: its claims are still checked on every push,
    /// only the signature is not. Default [`DEFAULT_TOKEN_CACHE`]; 0 keeps none, and every push
    /// is verified in full. Only a token that passed every check is kept, by its SHA-256.
    pub fn with_token_cache(mut self, entries: usize) -> Self {
        self.verified = Arc::new(parking_lot::Mutex::new(cache::Verified::new(entries)));
        self
    }

    /// The audience tokens must name.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The service account tokens must be for.
    pub fn service_account(&self) -> &str {
        &self.service_account
    }

    /// A fresh verifier (and key cache) for the settings changed by a builder step.
    fn rebuild(&mut self) {
        let url = self.jwks_url.as_deref();
        self.verifier = build(&self.audience, &self.service_account, url, self.clock_skew);
        self.kids = Arc::default();
        let capacity = self.verified.lock().capacity();
        self.verified = Arc::new(parking_lot::Mutex::new(cache::Verified::new(capacity)));
    }

    /// Checks an `Authorization` header's value (`None`: no header).
    pub(crate) async fn check(&self, authorization: Option<&[u8]>) -> Result<(), AuthError> {
        let token = bearer(authorization)?;
        let (header, claims) = decode(token)?;
        if header.get("alg").and_then(Value::as_str) != Some(ALGORITHM) {
            return Err(AuthError::WrongAlgorithm);
        }
        if !header.get("kid").is_some_and(Value::is_string) {
            return Err(AuthError::UnknownKey);
        }
        self.claims(&claims)?;
        if token.rsplit('.').next() == Some(SIGNATURE_REMOVED) {
            // Cloud Run's front end verified it; the claims were checked above.
            return if self.cloud_run {
                Ok(())
            } else {
                Err(AuthError::SignatureRemoved)
            };
        }
        // Verified before: the claims above were read from the very bytes that were verified.
        let digest = self.cached(token);
        if let Some(digest) = &digest
            && self.verified.lock().hit(digest, now(), self.skew())
        {
            return Ok(());
        }
        let kid = header
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let signed = self.verify_of(kid, token).await?;
        self.claims(&signed)?;
        if let (Some(digest), Some(exp)) = (digest, signed.get("exp").and_then(Value::as_f64)) {
            self.verified.lock().insert(digest, exp, now(), self.skew());
        }
        Ok(())
    }

    /// How many verified tokens are kept now.
    #[cfg(fuzzing)]
    pub(crate) fn verified_tokens(&self) -> usize {
        self.verified.lock().len()
    }

    /// The token's digest when verified tokens are kept.
    fn cached(&self, token: &str) -> Option<cache::Digest> {
        self.verified.lock().enabled().then(|| cache::digest(token))
    }

    /// The clock skew in whole seconds, as the verifier's leeway.
    fn skew(&self) -> f64 {
        self.clock_skew.as_secs() as f64
    }

    /// Verifies a token of `kid` when `kid` is in Google's key set as last read here; the set
    /// is read again, one check at a time, for a `kid` not in it, but not while the last read
    /// is younger than [`UNKNOWN_KID_REFETCH`]. A token of an unknown `kid` thus never reaches
    /// the verifier, which would fetch the key set for each.
    async fn verify_of(&self, kid: &str, token: &str) -> Result<Object, AuthError> {
        if !self.kids.lock().known.contains(kid) {
            self.learn(kid).await?;
        }
        let verified = self.verify(token).await;
        if verified == Err(AuthError::UnknownKey) {
            // Retired since the set was read: not taken as known again until it is read anew.
            self.kids.lock().known.remove(kid);
        }
        verified
    }

    /// Reads Google's key set again if `kid` is not in it and the last read is old enough;
    /// `Ok` once `kid` is in it.
    async fn learn(&self, kid: &str) -> Result<(), AuthError> {
        let Ok(_gate) = tokio::time::timeout(self.key_timeout, self.refresh.lock()).await else {
            return Err(AuthError::KeysUnavailable);
        };
        {
            let kids = self.kids.lock();
            if kids.known.contains(kid) {
                // Read by the check this one waited for (a cold start's burst).
                return Ok(());
            }
            if kids
                .read_at
                .is_some_and(|at| at.elapsed() < UNKNOWN_KID_REFETCH)
            {
                return Err(AuthError::UnknownKey);
            }
        }
        let url = self.jwks_url.as_deref().unwrap_or(GOOGLE_KEYS);
        let read = tokio::time::timeout(self.key_timeout, key_ids(url)).await;
        let known = match read {
            Ok(Ok(known)) => known,
            Ok(Err(e)) => {
                // The error names the URL and the HTTP status, nothing of the token.
                tracing::warn!(error = %e, "push token check: Google's key set could not be read");
                return Err(AuthError::KeysUnavailable);
            }
            Err(_elapsed) => {
                tracing::warn!(timeout = ?self.key_timeout,
                    "push token check: no answer reading Google's key set");
                return Err(AuthError::KeysUnavailable);
            }
        };
        let mut kids = self.kids.lock();
        kids.known = known;
        kids.read_at = Some(Instant::now());
        if kids.known.contains(kid) {
            Ok(())
        } else {
            Err(AuthError::UnknownKey)
        }
    }

    /// Google's verifier, one check at a time, within the key timeout.
    async fn verify(&self, token: &str) -> Result<Object, AuthError> {
        let verified = tokio::time::timeout(self.key_timeout, async {
            self.verifier.lock().await.verify(token).await
        })
        .await;
        match verified {
            Ok(Ok(claims)) => Ok(claims),
            Ok(Err(e)) => Err(refusal(&e)),
            Err(_elapsed) => {
                tracing::warn!(timeout = ?self.key_timeout,
                    "push token check: no answer from the verifier (fetching Google's keys)");
                Err(AuthError::KeysUnavailable)
            }
        }
    }

    /// The claims' rules, checked on the token as sent and again on the verified claims.
    fn claims(&self, claims: &Object) -> Result<(), AuthError> {
        let text = |name| claims.get(name).and_then(Value::as_str);
        let time = |name| claims.get(name).map(Value::as_f64);
        if text("aud") != Some(self.audience.as_str()) {
            return Err(AuthError::WrongAudience);
        }
        if !text("iss").is_some_and(|iss| ISSUERS.contains(&iss)) {
            return Err(AuthError::WrongIssuer);
        }
        let not_before = ["nbf", "iat"].into_iter().filter_map(time);
        in_time(time("exp").flatten(), not_before, now(), self.skew())?;
        if text("email") != Some(self.service_account.as_str()) {
            return Err(AuthError::WrongEmail);
        }
        if claims.get("email_verified") != Some(&Value::Bool(true)) {
            return Err(AuthError::EmailNotVerified);
        }
        Ok(())
    }
}

/// The settings; not the verifier, whose key cache would print every cached key.
impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCheck")
            .field("audience", &self.audience)
            .field("service_account", &self.service_account)
            .field("jwks_url", &self.jwks_url)
            .field("clock_skew", &self.clock_skew)
            .field("key_timeout", &self.key_timeout)
            .field("verified_by_cloud_run", &self.cloud_run)
            .field("token_cache", &self.verified.lock().capacity())
            .finish_non_exhaustive()
    }
}

/// Google's verifier for tokens of `audience` and `email`.
fn build(
    audience: &str,
    email: &str,
    jwks_url: Option<&str>,
    clock_skew: Duration,
) -> Arc<Mutex<Verifier>> {
    let mut builder = Builder::new([audience])
        .with_email(email)
        .with_clock_skew(clock_skew);
    if let Some(url) = jwks_url {
        builder = builder.with_jwks_url(url);
    }
    Arc::new(Mutex::new(builder.build()))
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(header: Option<&[u8]>) -> Result<&str, AuthError> {
    let header = header.ok_or(AuthError::Missing)?;
    let (scheme, token) = match header.iter().position(|&b| b == b' ') {
        Some(space) => (&header[..space], &header[space + 1..]),
        None => (header, &b""[..]),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(AuthError::Missing);
    }
    let token = std::str::from_utf8(token)
        .map_err(|_| AuthError::Malformed)?
        .trim_matches(' ');
    if token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

/// A JWT's header and claims, unverified: three base64url segments, the first two JSON
/// objects. The signature is only decoded.
fn decode(token: &str) -> Result<(Object, Object), AuthError> {
    let segment = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| AuthError::Malformed);
    let object =
        |s: &str| serde_json::from_slice::<Object>(&segment(s)?).map_err(|_| AuthError::Malformed);
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed);
    };
    segment(signature)?;
    Ok((object(header)?, object(claims)?))
}

/// What a refusal of Google's verifier means for the push.
fn refusal(e: &verifier::Error) -> AuthError {
    if e.is_load_cert() {
        if e.to_string().contains(NO_MATCHING_KID) {
            return AuthError::UnknownKey;
        }
        // The fetch's error names the key set's URL and HTTP status, nothing of the token.
        tracing::warn!(error = %e, "push token check: Google's signing keys could not be read");
        return AuthError::KeysUnavailable;
    }
    if e.is_decode() {
        return AuthError::Malformed;
    }
    let kind = std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<jsonwebtoken::errors::Error>())
        .map(|jwt| jwt.kind());
    match kind {
        Some(ErrorKind::InvalidSignature) => AuthError::BadSignature,
        Some(ErrorKind::ExpiredSignature) => AuthError::Expired,
        Some(ErrorKind::ImmatureSignature) => AuthError::NotYetValid,
        Some(ErrorKind::InvalidAudience) => AuthError::WrongAudience,
        Some(ErrorKind::InvalidIssuer) => AuthError::WrongIssuer,
        Some(ErrorKind::InvalidAlgorithm) => AuthError::WrongAlgorithm,
        _ => AuthError::Refused,
    }
}

#[cfg(test)]
mod tests;
