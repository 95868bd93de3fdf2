//! [`AuthError`]: why a push's token was refused, the status it is answered with, and the
//! short reason its metrics and logs name.
//!
//! Uses nothing of this crate.

/// Why a push's token was refused. The push is answered with [`status`](Self::status) before
/// its body is read, nothing runs, and Pub/Sub redelivers the message (a refused push is a
/// nack). Neither the token nor any claim's value is in the message: each names the check that
/// failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization` header, or one of another scheme than `Bearer`: answered 401.
    #[error("no bearer token")]
    Missing,
    /// The bearer token is empty, or not three base64url segments with a JSON header and
    /// claims: answered 401.
    #[error("the bearer token is not a JWT")]
    Malformed,
    /// The token's header names another algorithm than RS256 (`none`, HS256, IAP's ES256):
    /// answered 403.
    #[error("the token is not signed with RS256")]
    WrongAlgorithm,
    /// The token's header has no `kid`, or one that is not among Google's keys: answered 403.
    #[error("the token's signing key is not one of Google's")]
    UnknownKey,
    /// The signature does not verify with the key of the token's `kid`: answered 403.
    #[error("the token's signature does not verify")]
    BadSignature,
    /// `aud` is not the configured audience: answered 403.
    #[error("the token is for another audience")]
    WrongAudience,
    /// `iss` is not `accounts.google.com` (or `https://accounts.google.com`): answered 403.
    #[error("the token is not issued by accounts.google.com")]
    WrongIssuer,
    /// `exp` is missing or past (beyond the clock skew): answered 403.
    #[error("the token has expired")]
    Expired,
    /// `nbf` or `iat` is in the future (beyond the clock skew), or not a time: answered 403.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `email` is not the configured push service account: answered 403.
    #[error("the token is not for the push service account")]
    WrongEmail,
    /// `email_verified` is missing or not `true`: answered 403.
    #[error("the token's email is not verified")]
    EmailNotVerified,
    /// Cloud Run removed the token's signature after verifying it (a service that requires
    /// authentication), and the check was not built
    /// [`verified_by_cloud_run`](crate::TokenCheck::verified_by_cloud_run): answered 403.
    #[error(
        "the token's signature was removed by Cloud Run (authentication required): use \
         verified_by_cloud_run"
    )]
    SignatureRemoved,
    /// Google's verifier refused the token for a reason of its own: answered 403.
    #[error("the token was refused by Google's verifier")]
    Refused,
    /// Google's signing keys could not be fetched in time (network, HTTP error, unreadable
    /// key set): answered 503, and Pub/Sub retries the push later.
    #[error("Google's signing keys are unavailable")]
    KeysUnavailable,
}

impl AuthError {
    /// The HTTP status the push is answered with.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::Missing | AuthError::Malformed => 401,
            AuthError::KeysUnavailable => 503,
            _ => 403,
        }
    }

    /// A short name for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::WrongAlgorithm => "algorithm",
            AuthError::UnknownKey => "unknown_key",
            AuthError::BadSignature => "signature",
            AuthError::WrongAudience => "audience",
            AuthError::WrongIssuer => "issuer",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::WrongEmail => "email",
            AuthError::EmailNotVerified => "email_not_verified",
            AuthError::SignatureRemoved => "signature_removed",
            AuthError::Refused => "refused",
            AuthError::KeysUnavailable => "keys_unavailable",
        }
    }
}
