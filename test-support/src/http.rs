//! Plain HTTP/1.1 requests to a local server, blocking: for the tests of the service's
//! endpoints (read them on a thread of their own when the server's work runs on the test's).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request (but for a `GET`, `body` is sent as JSON, with its length); the status and the
/// body, or `None` when nothing answered within 5 s.
pub fn http(address: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let content = if method == "GET" {
        String::new()
    } else {
        format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        )
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{content}\r\n{body}"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// A `GET`.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    http(address, "GET", path, "")
}
