//! The load generator of the server sides, in the parent process (one thread): `C` keep-alive
//! HTTP/1.1 connections, each sending one push and waiting for its answer before the next (a
//! closed loop: C pushes outstanding at most), every push the wrapped envelope as Pub/Sub
//! documents it with a message id of its own and, when the side takes one, the run's token in
//! `Authorization: Bearer`. One push first, alone (the server's first: it fetches the keys),
//! then a warm-up on the connections, then the measured pushes; its own CPU is measured too.
//!
//! Uses tokio's TCP streams, the harness's CPU clock, and nothing of `leasehold`.

use super::PATH;
use crate::harness::PAYLOAD_BYTES;
use crate::harness::clock::cpu_seconds;
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One push request, its message id rewritten in place for every push.
#[derive(Clone)]
struct Request {
    bytes: Vec<u8>,
    /// Where the two copies of the id are (Pub/Sub writes `messageId` and `message_id`).
    ids: [usize; 2],
}

/// Digits of every message id: fixed, so the content length is too.
const ID_DIGITS: usize = 16;

impl Request {
    /// A wrapped push as Pub/Sub documents it, for `subscription`, with `token` if any.
    fn new(subscription: &str, token: Option<&str>) -> Self {
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD.encode([b'x'; PAYLOAD_BYTES]);
        let id = "0".repeat(ID_DIGITS);
        let body = format!(
            r#"{{"message":{{"data":"{data}","messageId":"{id}","message_id":"{id}","publishTime":"2026-12-01T10:00:00.000Z","publish_time":"2026-12-01T10:00:00.000Z"}},"subscription":"{subscription}"}}"#
        );
        let authorization =
            token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
        let head = format!(
            "POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             user-agent: APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)\r\n\
             {authorization}content-length: {}\r\n\r\n",
            body.len()
        );
        let bytes = format!("{head}{body}").into_bytes();
        let first = head.len() + body.find(&id).expect("the id");
        let second = first + id.len() + body[first - head.len() + id.len()..].find(&id).unwrap();
        Self {
            bytes,
            ids: [first, second],
        }
    }

    /// The request for message `id`.
    fn with_id(&mut self, id: u64) -> &[u8] {
        let digits = format!("{id:0ID_DIGITS$}");
        for at in self.ids {
            self.bytes[at..at + ID_DIGITS].copy_from_slice(digits.as_bytes());
        }
        &self.bytes
    }
}

/// What one connection saw.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) no_content: u64,
    pub(crate) other: u64,
    pub(crate) reconnects: u64,
}

/// Reads one response; its status and whether the server keeps the connection.
async fn response(
    stream: &mut tokio::net::TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<(u16, bool)> {
    let eof = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end]).map_err(|_| eof())?;
            let mut lines = head.split("\r\n");
            let status = lines
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|s| s.parse().ok())
                .ok_or_else(eof)?;
            let (mut length, mut keep) = (0usize, true);
            for line in lines {
                let Some((name, value)) = line.split_once(':') else {
                    continue;
                };
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().map_err(|_| eof())?;
                } else if name.eq_ignore_ascii_case("connection") {
                    keep = !value.trim().eq_ignore_ascii_case("close");
                }
            }
            let total = end + 4 + length;
            while buffer.len() < total {
                if stream.read_buf(buffer).await? == 0 {
                    return Err(eof());
                }
            }
            buffer.drain(..total);
            return Ok((status, keep));
        }
        if stream.read_buf(buffer).await? == 0 {
            return Err(eof());
        }
    }
}

async fn connect(port: u16) -> tokio::net::TcpStream {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the push endpoint");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    stream
}

/// When the measured pushes end, once the warm-up is over and the server's window open.
type Go = tokio::sync::watch::Receiver<Option<Instant>>;

/// One push, alone on a connection of its own: whether it was answered 204.
async fn first_push(port: u16, request: &mut Request, ids: &Cell<u64>) -> bool {
    let mut stream = connect(port).await;
    let id = ids.get();
    ids.set(id + 1);
    let mut buffer = Vec::with_capacity(4096);
    let answered = async {
        stream.write_all(request.with_id(id)).await?;
        response(&mut stream, &mut buffer).await
    }
    .await;
    matches!(answered, Ok((204, _)))
}

/// One keep-alive connection, one push at a time: until `warm_until`, then (on the same
/// connection) from the moment `go` gives the end until that end.
async fn pusher(
    port: u16,
    mut request: Request,
    ids: Rc<Cell<u64>>,
    warm_until: Instant,
    warmed: Rc<tokio::sync::Barrier>,
    mut go: Go,
) -> Tally {
    let mut stream = connect(port).await;
    let mut buffer = Vec::with_capacity(4096);
    let mut tally = Tally::default();
    let mut until = warm_until;
    for measured in [false, true] {
        if measured {
            warmed.wait().await;
            let end = *go.wait_for(Option::is_some).await.expect("the end");
            until = end.expect("an end");
            tally = Tally::default();
        }
        while Instant::now() < until {
            let id = ids.get();
            ids.set(id + 1);
            let answered = async {
                stream.write_all(request.with_id(id)).await?;
                response(&mut stream, &mut buffer).await
            }
            .await;
            let keep = match answered {
                Ok((status, keep)) => {
                    if status == 204 {
                        tally.no_content += 1;
                    } else {
                        tally.other += 1;
                    }
                    keep
                }
                Err(_) => {
                    tally.other += 1;
                    false
                }
            };
            if !keep {
                stream = connect(port).await;
                buffer.clear();
                tally.reconnects += 1;
            }
        }
    }
    tally
}

/// What a push run's load did: its tallies summed, its wall time and the load generator's CPU.
pub(crate) struct Load {
    pub(crate) tally: Tally,
    pub(crate) elapsed: f64,
    pub(crate) cpu: f64,
}

/// One push alone, then `connections` pushers warming up for `warm_up`, then `open_window()`
/// (the server's measured window opens), then pushing for `duration` on the same connections.
/// Every push is for `subscription`, with `token` if any.
pub(crate) async fn load(
    port: u16,
    (subscription, token): (&str, Option<&str>),
    ids: &Rc<Cell<u64>>,
    connections: usize,
    (warm_up, duration): (Duration, Duration),
    open_window: impl AsyncFnOnce(),
) -> Load {
    let request = Request::new(subscription, token);
    if !first_push(port, &mut request.clone(), ids).await {
        eprintln!("the first push, alone, was not answered 204");
    }
    let warm_until = Instant::now() + warm_up;
    let warmed = Rc::new(tokio::sync::Barrier::new(connections + 1));
    let (end, go) = tokio::sync::watch::channel(None);
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            actix_rt::spawn(pusher(
                port,
                request.clone(),
                ids.clone(),
                warm_until,
                warmed.clone(),
                go.clone(),
            ))
        })
        .collect();
    warmed.wait().await;
    open_window().await;
    let cpu = cpu_seconds();
    let began = Instant::now();
    end.send_replace(Some(began + duration));
    let mut tally = Tally::default();
    for t in tasks {
        let t = t.await.expect("a pusher");
        tally.no_content += t.no_content;
        tally.other += t.other;
        tally.reconnects += t.reconnects;
    }
    Load {
        tally,
        elapsed: began.elapsed().as_secs_f64(),
        cpu: cpu_seconds() - cpu,
    }
}
