//! A stand-in for Google's ID-token issuer (feature `issuer`): an RSA key of the run's own
//! (generated once per process, never written anywhere, nothing of Google's), its key set
//! served on 127.0.0.1, and tokens signed with it, good ones and crafted ones. For the push
//! crate's token tests and its benchmark.
//!
//! In a tokio runtime (`#[tokio::test]`, `#[actix_rt::test]`):
//!
//! ```ignore
//! use leasehold_test_support::issuer::{self, Issuer};
//! let issuer = Issuer::start().await;
//! let check = TokenCheck::new(issuer::AUDIENCE, issuer::EMAIL).with_jwks_url(issuer.jwks_url());
//! let token = issuer.token(issuer::claims());
//! // Authorization: Bearer {token}
//! ```

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize, PublicKeyComponents};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use aws_lc_rs::{hmac, rand::SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The audience test tokens are for.
pub const AUDIENCE: &str = "https://orders-push.example.test/push/orders";
/// The push service account test tokens are for.
pub const EMAIL: &str = "pusher@leasehold-test.iam.gserviceaccount.com";
/// The `kid` of the test key in the served key set and in [`Issuer::token`]'s header.
pub const KID: &str = "leasehold-test-key-1";

/// The test key: its pair, its JWK and its public key as PEM.
struct TestKey {
    pair: KeyPair,
    jwk: Value,
    public_pem: String,
}

/// Generated on first use, shared by the tests of one binary.
fn key() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let pair = KeyPair::generate(KeySize::Rsa2048).expect("generate the test RSA key");
        let parts = PublicKeyComponents::<Vec<u8>>::from(pair.public_key());
        let jwk = json!({
            "kty": "RSA",
            "alg": "RS256",
            "use": "sig",
            "kid": KID,
            "n": URL_SAFE_NO_PAD.encode(&parts.n),
            "e": URL_SAFE_NO_PAD.encode(&parts.e),
        });
        let der = pair.public_key().as_der().expect("the test key's SPKI");
        let body = STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        let public_pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        );
        TestKey {
            pair,
            jwk,
            public_pem,
        }
    })
}

/// Seconds since the epoch, now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The claims of a good push token, as Pub/Sub sends them: for [`AUDIENCE`] and [`EMAIL`],
/// issued now, valid an hour.
pub fn claims() -> Value {
    let now = now();
    json!({
        "aud": AUDIENCE,
        "azp": "107391093645612345678",
        "email": EMAIL,
        "email_verified": true,
        "exp": now + 3600,
        "iat": now,
        "iss": "https://accounts.google.com",
        "sub": "107391093645612345678",
    })
}

/// `claims` with `name` set to `value`.
pub fn with(mut claims: Value, name: &str, value: Value) -> Value {
    claims[name] = value;
    claims
}

/// `claims` without `name`.
pub fn without(mut claims: Value, name: &str) -> Value {
    claims.as_object_mut().unwrap().remove(name);
    claims
}

fn segment(json: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(json).unwrap())
}

/// `header.claims.signature`, the signature over the first two.
fn assemble(header: &Value, claims: &Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let input = format!("{}.{}", segment(header), segment(claims));
    let signature = URL_SAFE_NO_PAD.encode(sign(input.as_bytes()));
    format!("{input}.{signature}")
}

/// An RS256 signature with the test key, whatever the header says.
fn rs256(input: &[u8]) -> Vec<u8> {
    let pair = &key().pair;
    let mut signature = vec![0; pair.public_modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input,
        &mut signature,
    )
    .expect("sign with the test key");
    signature
}

/// The RS256 signature of `signing_input` (a token's `header.claims`) with the test key, as a
/// token's third segment. PKCS #1 v1.5 signatures are deterministic: one input, one signature.
pub fn signature(signing_input: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(rs256(signing_input))
}

/// A token with `header` as given, signed RS256 with the test key.
pub fn signed_with_header(header: Value, claims: Value) -> String {
    assemble(&header, &claims, rs256)
}

/// A good RS256 token of the test key, its `kid` [`KID`].
pub fn token(claims: Value) -> String {
    signed_with_header(json!({"alg": "RS256", "kid": KID, "typ": "JWT"}), claims)
}

/// An RS256 token of the test key whose header names `kid`.
pub fn with_kid(kid: &str, claims: Value) -> String {
    signed_with_header(json!({"alg": "RS256", "kid": kid, "typ": "JWT"}), claims)
}

/// An unsecured token (`alg: none`, empty signature).
pub fn unsigned(claims: Value) -> String {
    assemble(&json!({"alg": "none", "kid": KID}), &claims, |_| Vec::new())
}

/// The key-confusion token: HS256, its HMAC secret the test key's public PEM (what a verifier
/// that trusts the header and hands it the RSA public key as bytes would check it with).
pub fn hs256_with_public_key(claims: Value) -> String {
    let secret = hmac::Key::new(hmac::HMAC_SHA256, key().public_pem.as_bytes());
    assemble(&json!({"alg": "HS256", "kid": KID}), &claims, |input| {
        hmac::sign(&secret, input).as_ref().to_vec()
    })
}

/// An RS256 header and claims with 256 bytes of garbage as the signature.
pub fn garbage_signature(claims: Value) -> String {
    let header = json!({"alg": "RS256", "kid": KID, "typ": "JWT"});
    assemble(&header, &claims, |_| (0..=255u8).rev().collect())
}

/// The test key's public key as PEM.
pub fn public_pem() -> &'static str {
    &key().public_pem
}

/// A key set URL nothing listens on (a port bound, then closed).
pub async fn unreachable_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/certs")
}

/// What the key-set endpoint answers.
#[derive(Clone)]
enum Answer {
    Keys(Arc<String>),
    Status(u16),
    Silence,
}

/// The key-set endpoint: `GET /certs` on 127.0.0.1, counted. Stops when dropped.
pub struct Issuer {
    url: String,
    fetches: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Issuer {
    /// Serves `{"keys": [the test key's JWK]}`.
    pub async fn start() -> Self {
        let keys = json!({ "keys": [key().jwk.clone()] }).to_string();
        Self::serve(Answer::Keys(Arc::new(keys))).await
    }

    /// Answers every fetch with `status` and no key set.
    pub async fn failing(status: u16) -> Self {
        Self::serve(Answer::Status(status)).await
    }

    /// Accepts every fetch and never answers.
    pub async fn silent() -> Self {
        Self::serve(Answer::Silence).await
    }

    async fn serve(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/certs", listener.local_addr().unwrap());
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&fetches);
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer_one(stream, answer.clone()));
            }
        });
        Self {
            url,
            fetches,
            server,
        }
    }

    /// The key set's URL, for `TokenCheck::with_jwks_url`.
    pub fn jwks_url(&self) -> String {
        self.url.clone()
    }

    /// How many connections fetched the key set so far (one per fetch: each is answered
    /// `Connection: close`).
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// A good RS256 token of the test key: [`token`].
    pub fn token(&self, claims: Value) -> String {
        token(claims)
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Reads one request's head and answers it, closing the connection.
async fn answer_one(mut stream: TcpStream, answer: Answer) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let (status, body) = match answer {
        Answer::Keys(keys) => ("200 OK".to_string(), keys.to_string()),
        Answer::Status(code) => (format!("{code} Test"), "{}".to_string()),
        Answer::Silence => {
            // Hold the connection open until the client gives up.
            let _ = stream.read(&mut buf).await;
            return;
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
