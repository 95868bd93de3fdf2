use super::*;
use futures::FutureExt;
use leasehold_test_support::issuer;
use serde_json::json;
use std::panic::AssertUnwindSafe;

use issuer::{AUDIENCE, EMAIL, Issuer, claims, with, without};

fn check_of(issuer: &Issuer) -> TokenCheck {
    TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(issuer.jwks_url())
}

fn bearer_of(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

/// Checks `token`, expecting `expected` (and its status), and that neither the token, nor any
/// part of it, nor the email it names is in the error's Display or Debug.
async fn refused(check: &TokenCheck, token: &str, expected: AuthError, status: u16) {
    let got = check.check(Some(&bearer_of(token))).await;
    assert_eq!(got, Err(expected.clone()), "{}", expected.reason());
    assert_eq!(expected.status(), status, "{expected:?}");
    assert_clean(&expected, token);
}

fn assert_clean(error: &AuthError, token: &str) {
    let email = token
        .split('.')
        .nth(1)
        .and_then(|c| URL_SAFE_NO_PAD.decode(c).ok())
        .and_then(|c| serde_json::from_slice::<Value>(&c).ok())
        .and_then(|c| c["email"].as_str().map(str::to_string));
    for shown in [error.to_string(), format!("{error:?}")] {
        for part in token.split('.').filter(|p| p.len() > 3) {
            assert!(!shown.contains(part), "{shown}");
        }
        if let Some(email) = &email {
            assert!(!shown.contains(email.as_str()), "{shown}");
        }
        assert!(!shown.contains(EMAIL), "{shown}");
    }
}

#[tokio::test]
async fn a_good_token_is_accepted_with_either_issuer_spelling_and_the_keys_are_cached() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    for iss in ["https://accounts.google.com", "accounts.google.com"] {
        let token = issuer.token(with(claims(), "iss", json!(iss)));
        assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()), "{iss}");
    }
    // The scheme in any case.
    let token = issuer.token(claims());
    let header = format!("bearer {token}").into_bytes();
    assert_eq!(check.check(Some(&header)).await, Ok(()));
    assert_eq!(
        issuer.fetches(),
        2,
        "the key set's kids read once, the verifier's fetch once, then both cached"
    );
    // Clones share the verifier and its cache.
    assert_eq!(check.clone().check(Some(&bearer_of(&token))).await, Ok(()));
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn times_within_the_clock_skew_are_accepted() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let now = issuer::now();
    let claims = with(with(claims(), "iat", json!(now + 5)), "nbf", json!(now + 5));
    let token = issuer.token(claims);
    assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
    let strict = check.with_clock_skew(Duration::ZERO);
    refused(&strict, &token, AuthError::NotYetValid, 403).await;
}

#[tokio::test]
async fn another_audience_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let wrong = AuthError::WrongAudience;
    let other = with(
        claims(),
        "aud",
        json!("https://elsewhere.example.test/push"),
    );
    refused(&check, &issuer.token(other), wrong.clone(), 403).await;
    // Google's verifier passes a token with no aud at all; an array is not one audience.
    refused(
        &check,
        &issuer.token(without(claims(), "aud")),
        wrong.clone(),
        403,
    )
    .await;
    let both = with(
        claims(),
        "aud",
        json!([AUDIENCE, "https://other.example.test"]),
    );
    refused(&check, &issuer.token(both), wrong, 403).await;
}

#[tokio::test]
async fn another_issuer_is_refused_iap_included() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    for iss in [
        json!("https://cloud.google.com/iap"),
        json!("https://evil.example.test"),
        json!(["accounts.google.com"]),
    ] {
        let token = issuer.token(with(claims(), "iss", iss));
        refused(&check, &token, AuthError::WrongIssuer, 403).await;
    }
    // Google's verifier passes a token with no iss at all.
    let token = issuer.token(without(claims(), "iss"));
    refused(&check, &token, AuthError::WrongIssuer, 403).await;
}

#[tokio::test]
async fn another_email_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    for email in [
        json!("someone-else@leasehold-test.iam.gserviceaccount.com"),
        json!(EMAIL.to_uppercase()),
        json!(null),
    ] {
        let token = issuer.token(with(claims(), "email", email));
        refused(&check, &token, AuthError::WrongEmail, 403).await;
    }
    refused(
        &check,
        &issuer.token(without(claims(), "email")),
        AuthError::WrongEmail,
        403,
    )
    .await;
}

#[tokio::test]
async fn an_email_not_verified_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let not = AuthError::EmailNotVerified;
    for verified in [json!(false), json!("true"), json!(1)] {
        let token = issuer.token(with(claims(), "email_verified", verified));
        refused(&check, &token, not.clone(), 403).await;
    }
    let token = issuer.token(without(claims(), "email_verified"));
    refused(&check, &token, not, 403).await;
}

/// Why the claims are read before Google's verifier sees them: a signed token for the right
/// audience without `email_verified` makes it panic (`claims["email_verified"]` on a
/// `serde_json::Map`). If this fails, google-cloud-auth fixed it; the check above still holds.
#[tokio::test]
async fn googles_verifier_panics_on_a_token_without_email_verified() {
    let issuer = Issuer::start().await;
    let verifier = Builder::new([AUDIENCE])
        .with_email(EMAIL)
        .with_jwks_url(issuer.jwks_url())
        .build();
    let token = issuer.token(without(claims(), "email_verified"));
    let verified = AssertUnwindSafe(verifier.verify(&token))
        .catch_unwind()
        .await;
    assert!(verified.is_err(), "expected the verifier to panic");
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let now = issuer::now();
    let old = with(
        with(claims(), "iat", json!(now - 7200)),
        "exp",
        json!(now - 3600),
    );
    refused(&check, &issuer.token(old), AuthError::Expired, 403).await;
    let past_skew = with(claims(), "exp", json!(now - 11));
    refused(&check, &issuer.token(past_skew), AuthError::Expired, 403).await;
    refused(
        &check,
        &issuer.token(without(claims(), "exp")),
        AuthError::Expired,
        403,
    )
    .await;
    let text = with(claims(), "exp", json!("tomorrow"));
    refused(&check, &issuer.token(text), AuthError::Expired, 403).await;
}

#[tokio::test]
async fn a_token_not_valid_yet_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let later = issuer::now() + 600;
    for name in ["nbf", "iat"] {
        let token = issuer.token(with(claims(), name, json!(later)));
        refused(&check, &token, AuthError::NotYetValid, 403).await;
        let token = issuer.token(with(claims(), name, json!("soon")));
        refused(&check, &token, AuthError::NotYetValid, 403).await;
    }
}

#[tokio::test]
async fn a_bad_signature_is_refused() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let bad = AuthError::BadSignature;
    refused(
        &check,
        &issuer::garbage_signature(claims()),
        bad.clone(),
        403,
    )
    .await;
    // A good token's signature on other claims.
    let good = issuer.token(claims());
    let other = issuer.token(with(claims(), "sub", json!("someone-else")));
    let signature = good.rsplit('.').next().unwrap();
    let (head, _) = other.rsplit_once('.').unwrap();
    refused(&check, &format!("{head}.{signature}"), bad, 403).await;
}

#[tokio::test]
async fn any_algorithm_but_rs256_is_refused_before_a_key_is_fetched() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let wrong = AuthError::WrongAlgorithm;
    refused(&check, &issuer::unsigned(claims()), wrong.clone(), 403).await;
    let confused = issuer::hs256_with_public_key(claims());
    refused(&check, &confused, wrong.clone(), 403).await;
    assert!(!confused.contains(issuer::public_pem()));
    for header in [
        json!({"alg": "ES256", "kid": issuer::KID}),
        json!({"alg": "rs256", "kid": issuer::KID}),
        json!({"kid": issuer::KID}),
    ] {
        let token = issuer::signed_with_header(header, claims());
        refused(&check, &token, wrong.clone(), 403).await;
    }
    assert_eq!(issuer.fetches(), 0);
}

#[tokio::test]
async fn unknown_kids_are_refused_with_one_read_of_the_key_set_per_window() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    // A flood of tokens with made-up kids: one read of the key set, no fetch by the verifier.
    for i in 0..20 {
        let unknown = issuer::with_kid(&format!("made-up-{i}"), claims());
        refused(&check, &unknown, AuthError::UnknownKey, 403).await;
    }
    assert_eq!(issuer.fetches(), 1);
    let no_kid = issuer::signed_with_header(json!({"alg": "RS256"}), claims());
    refused(&check, &no_kid, AuthError::UnknownKey, 403).await;
    assert_eq!(issuer.fetches(), 1);
    // Google's kid was in the set read for the flood: a good token still passes at once.
    let good = issuer.token(claims());
    assert_eq!(check.check(Some(&bearer_of(&good))).await, Ok(()));
    assert_eq!(issuer.fetches(), 2, "the verifier's own fetch of the key");
}

#[tokio::test]
async fn concurrent_checks_of_a_new_kid_read_the_key_set_once() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let tokens: Vec<_> = (0..8).map(|_| bearer_of(&issuer.token(claims()))).collect();
    let results = futures::future::join_all(tokens.iter().map(|t| check.check(Some(t)))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        issuer.fetches(),
        2,
        "one read of the kids, one fetch by the verifier"
    );
}

#[tokio::test]
async fn a_token_whose_signature_cloud_run_removed_is_taken_only_when_told() {
    let issuer = Issuer::start().await;
    let stripped = |claims| {
        let token = issuer.token(claims);
        let (signed, _signature) = token.rsplit_once('.').unwrap();
        format!("{signed}.SIGNATURE_REMOVED_BY_GOOGLE")
    };
    let check = check_of(&issuer);
    refused(
        &check,
        &stripped(claims()),
        AuthError::SignatureRemoved,
        403,
    )
    .await;
    let cloud_run = check_of(&issuer).verified_by_cloud_run();
    assert_eq!(
        cloud_run.check(Some(&bearer_of(&stripped(claims())))).await,
        Ok(())
    );
    // Only the signature is left to Cloud Run: the claims are still checked.
    let elsewhere = with(claims(), "aud", json!("https://elsewhere.test"));
    refused(
        &cloud_run,
        &stripped(elsewhere),
        AuthError::WrongAudience,
        403,
    )
    .await;
    let other = with(claims(), "email", json!("someone@else.test"));
    refused(&cloud_run, &stripped(other), AuthError::WrongEmail, 403).await;
    // A token that kept its signature is verified in full.
    refused(
        &cloud_run,
        &issuer::garbage_signature(claims()),
        AuthError::BadSignature,
        403,
    )
    .await;
    assert_eq!(issuer.fetches(), 2, "a stripped token costs no fetch");
}

#[tokio::test]
async fn no_bearer_token_is_401() {
    let check = TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(issuer::unreachable_url().await);
    for header in [None, Some(&b"Basic dXNlcjpwYXNz"[..]), Some(b"Bearer")] {
        let expected = if header == Some(b"Bearer") {
            AuthError::Malformed
        } else {
            AuthError::Missing
        };
        let got = check.check(header).await;
        assert_eq!(got, Err(expected.clone()), "{header:?}");
        assert_eq!(expected.status(), 401);
    }
}

#[tokio::test]
async fn a_malformed_token_is_401() {
    let check = TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(issuer::unreachable_url().await);
    let good = issuer::token(claims());
    let (head, _) = good.rsplit_once('.').unwrap();
    let not_json = format!("{}.{head}", URL_SAFE_NO_PAD.encode("not json"));
    for token in [
        "".to_string(),
        "   ".to_string(),
        "one-segment".to_string(),
        head.to_string(),
        format!("{good}.extra"),
        format!("{head}.not*base64"),
        format!("{head}.c2ln="),
        format!("@@.{good}").replacen('.', "", 1),
        not_json,
        format!("{}.{head}", URL_SAFE_NO_PAD.encode("[1,2]")),
        "\u{e9}t\u{e9}".to_string(),
    ] {
        let got = check.check(Some(&bearer_of(&token))).await;
        assert_eq!(got, Err(AuthError::Malformed), "{token:?}");
    }
    assert_eq!(
        check.check(Some(b"Bearer \xff\xfe")).await,
        Err(AuthError::Malformed)
    );
    assert_eq!(AuthError::Malformed.status(), 401);
}

#[tokio::test]
async fn keys_that_cannot_be_fetched_are_503() {
    let token = issuer::token(claims());
    let down = TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(issuer::unreachable_url().await);
    refused(&down, &token, AuthError::KeysUnavailable, 503).await;
    for status in [500, 404] {
        let failing = Issuer::failing(status).await;
        refused(&check_of(&failing), &token, AuthError::KeysUnavailable, 503).await;
        assert_eq!(failing.fetches(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_fetch_without_an_answer_is_503_after_the_key_timeout() {
    let silent = Issuer::silent().await;
    let check = check_of(&silent).with_key_timeout(Duration::from_secs(3));
    let token = issuer::token(claims());
    let started = tokio::time::Instant::now();
    refused(&check, &token, AuthError::KeysUnavailable, 503).await;
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[tokio::test]
async fn two_concurrent_checks_both_pass() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let (a, b) = (issuer.token(claims()), issuer.token(claims()));
    let (a, b) = (bearer_of(&a), bearer_of(&b));
    let (first, second) = futures::join!(check.check(Some(&a)), check.check(Some(&b)));
    assert_eq!((first, second), (Ok(()), Ok(())));
    assert_eq!(
        issuer.fetches(),
        2,
        "the kids read once, the verifier's keys once"
    );
}

/// Why the verifier is behind a mutex: alone, the second of two concurrent verifications fails
/// while the first fetches the keys. If this fails, google-cloud-auth fixed it.
#[tokio::test]
async fn googles_verifier_fails_a_verification_during_another_ones_key_fetch() {
    let issuer = Issuer::start().await;
    let verifier = Builder::new([AUDIENCE])
        .with_email(EMAIL)
        .with_jwks_url(issuer.jwks_url())
        .build();
    let token = issuer.token(claims());
    let (first, second) = futures::join!(verifier.verify(&token), verifier.verify(&token));
    assert!(first.is_ok(), "{first:?}");
    let second = second.expect_err("the second fails on the cache's try_write");
    assert!(second.is_load_cert(), "{second:?}");
    assert!(
        second.to_string().contains("failed to obtain lock"),
        "{second}"
    );
}

/// What the check's cache of verified tokens holds: (entries, hits, inserted).
fn cache_of(check: &TokenCheck) -> (usize, u64, u64) {
    let cache = check.verified.lock();
    (cache.len(), cache.hits, cache.inserted)
}

#[tokio::test]
async fn a_token_verified_once_is_not_verified_again_and_its_claims_still_are() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let token = issuer.token(claims());
    for _ in 0..3 {
        assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
    }
    assert_eq!(cache_of(&check), (1, 2, 1), "verified once, then two hits");
    // Clones share it.
    assert_eq!(check.clone().check(Some(&bearer_of(&token))).await, Ok(()));
    assert_eq!(cache_of(&check).1, 3);
    // The same header and claims with another signature are another token: verified, refused.
    let (signed, _) = token.rsplit_once('.').unwrap();
    let garbage = issuer::garbage_signature(claims());
    let (_, signature) = garbage.rsplit_once('.').unwrap();
    let forged = format!("{signed}.{signature}");
    refused(&check, &forged, AuthError::BadSignature, 403).await;
    // The claims of a cached token are checked on each use: elsewhere, the same token is
    // another audience's, and another account's.
    let elsewhere =
        TokenCheck::new("https://elsewhere.example.test", EMAIL).with_jwks_url(issuer.jwks_url());
    refused(&elsewhere, &token, AuthError::WrongAudience, 403).await;
    assert_eq!(cache_of(&check), (1, 3, 1));
}

#[tokio::test]
async fn a_refused_token_never_enters_the_cache() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer);
    let now = issuer::now();
    let cases = [
        (issuer::garbage_signature(claims()), AuthError::BadSignature),
        (
            issuer.token(with(claims(), "aud", json!("https://other.test"))),
            AuthError::WrongAudience,
        ),
        (
            issuer.token(with(claims(), "exp", json!(now - 60))),
            AuthError::Expired,
        ),
        (
            issuer.token(with(claims(), "nbf", json!(now + 600))),
            AuthError::NotYetValid,
        ),
        (
            issuer.token(without(claims(), "email_verified")),
            AuthError::EmailNotVerified,
        ),
        (issuer::with_kid("made-up", claims()), AuthError::UnknownKey),
        (issuer::unsigned(claims()), AuthError::WrongAlgorithm),
    ];
    for _round in 0..2 {
        for (token, expected) in &cases {
            refused(&check, token, expected.clone(), 403).await;
        }
    }
    assert_eq!(cache_of(&check), (0, 0, 0));
    // Nor does a token whose signature Cloud Run removed: it was never verified here.
    let cloud_run = check_of(&issuer).verified_by_cloud_run();
    let good = issuer.token(claims());
    let (signed, _) = good.rsplit_once('.').unwrap();
    let stripped = bearer_of(&format!("{signed}.SIGNATURE_REMOVED_BY_GOOGLE"));
    assert_eq!(cloud_run.check(Some(&stripped)).await, Ok(()));
    assert_eq!(cache_of(&cloud_run), (0, 0, 0));
}

#[tokio::test]
async fn a_cached_token_is_refused_once_it_expires() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer).with_clock_skew(Duration::ZERO);
    let token = issuer.token(with(claims(), "exp", json!(issuer::now() + 2)));
    assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
    assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
    assert_eq!(cache_of(&check).1, 1, "a hit while it is valid");
    // Polled with a deadline: the token expires within three seconds of wall time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match check.check(Some(&bearer_of(&token))).await {
            Err(AuthError::Expired) => break,
            Ok(()) => assert!(tokio::time::Instant::now() < deadline, "never expired"),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_cache_is_bounded_however_many_good_tokens_come() {
    let issuer = Issuer::start().await;
    let check = check_of(&issuer).with_token_cache(8);
    let now = issuer::now();
    for n in 0..40 {
        let token = issuer.token(with(claims(), "exp", json!(now + 600 + n)));
        assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
        assert!(cache_of(&check).0 <= 8);
    }
    assert_eq!(cache_of(&check), (8, 0, 40));
    // The latest (the longest to live) stayed; the first went.
    let last = issuer.token(with(claims(), "exp", json!(now + 600 + 39)));
    assert_eq!(check.check(Some(&bearer_of(&last))).await, Ok(()));
    assert_eq!(cache_of(&check).1, 1);
}

#[tokio::test]
async fn without_a_cache_every_token_is_verified_and_new_settings_start_empty() {
    let issuer = Issuer::start().await;
    let token = issuer.token(claims());
    let off = check_of(&issuer).with_token_cache(0);
    for _ in 0..2 {
        assert_eq!(off.check(Some(&bearer_of(&token))).await, Ok(()));
    }
    assert_eq!(cache_of(&off), (0, 0, 0));
    let check = check_of(&issuer);
    assert_eq!(check.check(Some(&bearer_of(&token))).await, Ok(()));
    let skewed = check.clone().with_clock_skew(Duration::from_secs(5));
    assert_eq!(cache_of(&skewed), (0, 0, 0), "a new verifier, a new cache");
    assert_eq!(cache_of(&check).0, 1);
}

#[test]
fn every_refusal_names_its_check_only() {
    use AuthError::*;
    let all = [
        Missing,
        Malformed,
        WrongAlgorithm,
        UnknownKey,
        BadSignature,
        WrongAudience,
        WrongIssuer,
        Expired,
        NotYetValid,
        WrongEmail,
        EmailNotVerified,
        Refused,
        KeysUnavailable,
    ];
    let mut reasons: Vec<&str> = all.iter().map(AuthError::reason).collect();
    reasons.sort_unstable();
    reasons.dedup();
    assert_eq!(reasons.len(), all.len(), "one reason per variant");
    for e in &all {
        let expected = match e {
            Missing | Malformed => 401,
            KeysUnavailable => 503,
            _ => 403,
        };
        assert_eq!(e.status(), expected, "{e:?}");
        assert_clean(e, &issuer::token(claims()));
    }
}

#[test]
fn a_check_is_clone_send_sync_and_debug_shows_its_settings() {
    fn shareable<T: Clone + Send + Sync + std::fmt::Debug>() {}
    shareable::<TokenCheck>();
    let check = TokenCheck::new(AUDIENCE, EMAIL).with_clock_skew(Duration::from_secs(30));
    let shown = format!("{check:?}");
    assert!(shown.contains(AUDIENCE) && shown.contains("30s"), "{shown}");
    assert!(shown.contains("token_cache: 1024"), "{shown}");
    assert_eq!(
        (check.audience(), check.service_account()),
        (AUDIENCE, EMAIL)
    );
}
