//! Who sent a push: the OIDC token Pub/Sub attaches to an authenticated push, checked with
//! Google's own ID-token verifier before anything of the request's body is read.
//!
//! Owns the token rules (signature, `aud`, `iss`, `exp`/`nbf`/`iat`, `email`,
//! `email_verified`, RS256 only) and [`AuthError`]. May use `google-cloud-auth`; nothing else of
//! this crate.

use std::time::Duration;

/// Checks the push's `Authorization: Bearer <token>`.
#[derive(Debug, Clone)]
pub struct TokenCheck {
    audience: String,
    service_account: String,
    jwks_url: Option<String>,
    clock_skew: Duration,
}

impl TokenCheck {
    /// Tokens for `audience` (the subscription's `--push-auth-token-audience`, or the push
    /// endpoint's URL when none was set), signed by Google for `service_account` (the
    /// subscription's `--push-auth-service-account`).
    pub fn new(audience: impl Into<String>, service_account: impl Into<String>) -> Self {
        Self {
            audience: audience.into(),
            service_account: service_account.into(),
            jwks_url: None,
            clock_skew: Duration::from_secs(10),
        }
    }

    /// Reads the signing keys from `url` instead of Google's (tests).
    pub fn with_jwks_url(mut self, url: impl Into<String>) -> Self {
        self.jwks_url = Some(url.into());
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

    /// Checks an `Authorization` header's value (`None`: no header).
    pub(crate) async fn check(&self, authorization: Option<&[u8]>) -> Result<(), AuthError> {
        let _ = (authorization, &self.jwks_url, self.clock_skew);
        Err(AuthError::Missing)
    }
}

/// Why a push's token was refused. The push is answered with [`status`](Self::status) before
/// its body is read, nothing runs, and Pub/Sub redelivers the message (a refused push is a
/// nack). Neither the token nor any claim's value is in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization: Bearer` header: answered 401.
    #[error("no bearer token")]
    Missing,
}

impl AuthError {
    /// The HTTP status the push is answered with.
    pub fn status(&self) -> u16 {
        401
    }

    /// A short name for metrics and logs.
    pub fn reason(&self) -> &'static str {
        "missing"
    }
}
