//! What the push tests share: the endpoint served on a free port, a push subscription on the
//! emulator pointing at it, and a plain HTTP client for requests shaped like Pub/Sub's.

#![allow(dead_code)]

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer};
use google_cloud_pubsub::model::{PushConfig, RetryPolicy, Subscription};
use leasehold_push::PushEndpoint;
use leasehold_test_support::free_port;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The endpoint's path in these tests.
pub const PATH: &str = "/push";

/// An endpoint served on 127.0.0.1, stopped by [`Served::stop`].
pub struct Served {
    pub port: u16,
    handle: ServerHandle,
}

impl Served {
    /// Serves `endpoint` on a free port (one worker: the tests are small).
    pub fn start(endpoint: &PushEndpoint) -> Self {
        let port = free_port();
        let endpoint = endpoint.clone();
        let server = HttpServer::new(move || {
            let endpoint = endpoint.clone();
            App::new().configure(move |c| endpoint.configure(c))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(("127.0.0.1", port))
        .expect("bind the push endpoint")
        .run();
        let handle = server.handle();
        actix_rt::spawn(server);
        Self { port, handle }
    }

    /// The URL Pub/Sub pushes to.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{PATH}", self.port)
    }

    pub async fn stop(self) {
        self.handle.stop(false).await;
    }

    /// Sends one request and reads the status and the body (`Connection: close`).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        request(self.port, method, path, headers, body).await
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port`; the status and the body.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the endpoint");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = Vec::new();
    // The server may close before reading a body it refused: what was answered is still read.
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// A wrapped push body as Pub/Sub documents it.
pub fn envelope(subscription: &str, id: &str, data: &[u8], attempt: Option<u32>) -> Vec<u8> {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    let attempt = attempt.map_or(String::new(), |n| format!(r#", "deliveryAttempt": {n}"#));
    format!(
        r#"{{"message": {{"data": "{data}", "messageId": "{id}", "publishTime": "2026-12-01T10:00:00.000Z", "attributes": {{"kind": "test"}}}}, "subscription": "{subscription}"{attempt}}}"#
    )
    .into_bytes()
}

/// A push subscription spec pointing at `url`, redelivering a nack after 1 to 2 s.
pub fn push_to(url: String) -> impl FnOnce(Subscription) -> Subscription {
    move |s| {
        s.set_push_config(PushConfig::new().set_push_endpoint(url))
            .set_retry_policy(
                RetryPolicy::new()
                    .set_minimum_backoff(wkt(Duration::from_secs(1)))
                    .set_maximum_backoff(wkt(Duration::from_secs(2))),
            )
    }
}

fn wkt(d: Duration) -> google_cloud_wkt::Duration {
    google_cloud_wkt::Duration::clamp(d.as_secs() as i64, 0)
}
