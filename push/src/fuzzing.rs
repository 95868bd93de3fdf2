//! Only built with `--cfg fuzzing` (which `cargo fuzz` sets): the crate's readers of network
//! input, reachable from the fuzz targets in the repository's `fuzz/` with nothing of the
//! runtime around them. Not an API: hidden, and absent from every other build.
//!
//! Owns nothing. Uses the envelope and the token check.

use crate::auth::{AuthError, TokenCheck};
use crate::envelope::{self, EnvelopeError};
use bytes::Bytes;

/// What a push that was read holds, for the targets' checks.
#[derive(Debug)]
pub struct Read {
    /// The message id.
    pub message_id: String,
    /// The payload's length.
    pub data_len: usize,
    /// How many attributes.
    pub attributes: usize,
    /// The attributes' names and values, their lengths added up.
    pub attribute_bytes: usize,
    /// The ordering key.
    pub ordering_key: String,
    /// The delivery attempt.
    pub delivery_attempt: Option<u32>,
}

fn read(pushed: envelope::Pushed) -> Read {
    Read {
        attribute_bytes: pushed
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum(),
        attributes: pushed.attributes.len(),
        message_id: pushed.message_id,
        data_len: pushed.data.len(),
        ordering_key: pushed.ordering_key,
        delivery_attempt: pushed.delivery_attempt,
    }
}

/// A wrapped push's body, read for `subscription`, as the endpoint reads it.
pub fn wrapped(body: &[u8], subscription: &str) -> Result<Read, EnvelopeError> {
    envelope::wrapped(body, subscription).map(read)
}

/// An unwrapped push (its body and its `(lower-case name, value)` headers), read for
/// `subscription`, as the endpoint reads it.
pub fn unwrapped<'h>(
    body: &[u8],
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    subscription: &str,
) -> Result<Read, EnvelopeError> {
    envelope::unwrapped(Bytes::copy_from_slice(body), headers, subscription).map(read)
}

/// An `Authorization` header's value checked by `check`, as the endpoint checks it.
pub async fn check(check: &TokenCheck, authorization: Option<&[u8]>) -> Result<(), AuthError> {
    check.check(authorization).await
}

/// How many verified tokens `check` keeps now.
pub fn verified_tokens(check: &TokenCheck) -> usize {
    check.verified_tokens()
}
