//! A push's `Authorization` header as the endpoint checks it: the scheme, the token's three
//! segments, its header and claims read before the signature, and the verification by Google's
//! verifier against a key set of this process's own (`leasehold_test_support::issuer`, served
//! on 127.0.0.1), through the cache of verified tokens.
//!
//! An input that ends in `.SIGN` is signed first: `.SIGN` becomes the RS256 signature, with the
//! test key, of the token before it, so that the claims of signed tokens are fuzzed too and the
//! checks after the signature are reached.
//!
//! No panic (Google's verifier panics on some signed claims: they must never reach it), no
//! hang, no allocation out of proportion; and a header that passes holds a token an
//! independent reading accepts: `Bearer` in any case, the test key's own signature over the
//! first two segments (RSA PKCS #1 v1.5 signatures are deterministic), RS256 and a `kid` in the
//! header, and claims of the audience, an issuer of Google's, the service account with its
//! email verified, not expired. The cache never holds more than its bound.

#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use leasehold_fuzz::{bound, within};
use leasehold_push::{DEFAULT_TOKEN_CACHE, TokenCheck, fuzzing};
use leasehold_test_support::issuer::{self, AUDIENCE, EMAIL, Issuer};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Duration;

/// What every input is checked with: one runtime (whose thread also serves the key set while
/// a check runs), the key set's server and one check, so that the cache fills across inputs.
struct Checking {
    runtime: tokio::runtime::Runtime,
    check: TokenCheck,
    _issuer: Issuer,
}

fn checking() -> &'static Checking {
    static CHECKING: OnceLock<Checking> = OnceLock::new();
    CHECKING.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let issuer = runtime.block_on(Issuer::start());
        let check = TokenCheck::new(AUDIENCE, EMAIL)
            .with_jwks_url(issuer.jwks_url())
            .with_key_timeout(Duration::from_secs(5));
        Checking {
            runtime,
            check,
            _issuer: issuer,
        }
    })
}

/// The input, with a trailing `.SIGN` replaced by the test key's signature of the token.
fn signed(input: &[u8]) -> Vec<u8> {
    let Some(stem) = input.strip_suffix(b".SIGN") else {
        return input.to_vec();
    };
    let token = stem
        .iter()
        .position(|&b| b == b' ')
        .map_or(stem, |space| &stem[space + 1..]);
    let mut header = stem.to_vec();
    header.push(b'.');
    header.extend_from_slice(issuer::signature(token).as_bytes());
    header
}

/// What an independent reading of a header that passed must find.
fn accepted(header: &[u8]) {
    let text = std::str::from_utf8(header).expect("a header that passed is text");
    let (scheme, token) = text.split_once(' ').expect("a scheme and a token");
    assert!(scheme.eq_ignore_ascii_case("bearer"), "{scheme:?}");
    let token = token.trim_matches(' ');
    let parts: Vec<&str> = token.split('.').collect();
    let [head, claims, signature] = parts[..] else {
        panic!("a token that passed has three segments: {}", parts.len());
    };
    let signing_input = &token[..head.len() + 1 + claims.len()];
    assert_eq!(
        signature,
        issuer::signature(signing_input.as_bytes()),
        "passed without the test key's signature"
    );
    let json = |segment: &str| -> Value {
        let bytes = URL_SAFE_NO_PAD.decode(segment).expect("base64url");
        serde_json::from_slice(&bytes).expect("JSON")
    };
    let (head, claims) = (json(head), json(claims));
    assert_eq!(head["alg"], "RS256");
    assert!(head["kid"].is_string());
    assert_eq!(claims["aud"], AUDIENCE);
    assert!(
        ["accounts.google.com", "https://accounts.google.com"]
            .contains(&claims["iss"].as_str().unwrap_or_default())
    );
    assert_eq!(claims["email"], EMAIL);
    assert_eq!(claims["email_verified"], true);
    let exp = claims["exp"].as_f64().expect("exp");
    assert!(exp + 10.0 >= issuer::now() as f64, "expired: {exp}");
}

fuzz_target!(|input: &[u8]| {
    let checking = checking();
    let header = signed(input);
    let limit = bound(header.len());
    let passed = within(limit, || {
        checking
            .runtime
            .block_on(fuzzing::check(&checking.check, Some(&header)))
    });
    if passed.is_ok() {
        accepted(&header);
    }
    assert!(fuzzing::verified_tokens(&checking.check) <= DEFAULT_TOKEN_CACHE);
});
