//! The child processes every end-to-end side runs in: the arguments of one run ([`Row`]),
//! starting a side and reading its `RESULT` line ([`measure`]), and the rounds of one table row,
//! each side on a fresh subscription in an order that rotates ([`rotate`]).
//!
//! Uses tokio's processes and the subscriptions of [`topics`](super::topics); which command
//! starts which side is the caller's.

use super::topics::Admin;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// What a side reports about itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) per_second: f64,
    pub(crate) cpu_us_per_message: f64,
    pub(crate) peak_rss_kb: f64,
    /// The Rust sides only (the counting allocator).
    pub(crate) allocations_per_message: Option<f64>,
}

/// A side's outcome in one run: its figures, or what went wrong.
pub(crate) type Outcome = Result<Measured, String>;

/// Parses `per_second=.. cpu_us_per_message=.. peak_rss_kb=.. [allocations_per_message=..]`.
fn parse(line: &str) -> Outcome {
    let field = |name: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    let required = |name: &str| field(name).ok_or_else(|| format!("no {name} in: {line}"));
    Ok(Measured {
        per_second: required("per_second")?,
        cpu_us_per_message: required("cpu_us_per_message")?,
        peak_rss_kb: required("peak_rss_kb")?,
        allocations_per_message: field("allocations_per_message"),
    })
}

/// The last line of a failed side's stderr that says what happened: not indented (a stack
/// frame) and not a hint.
fn last_word(stderr: &str) -> Option<String> {
    let line = stderr.lines().rev().find(|l| {
        !l.trim().is_empty()
            && !l.starts_with(char::is_whitespace)
            && !l.starts_with("note: ")
            && !l.starts_with("(Use `node")
    })?;
    Some(line.chars().take(200).collect())
}

/// Starts `command`, waits at most `timeout` for its RESULT line, then for it to exit
/// (killing it when it does not within a few seconds, so that it takes no CPU from the next
/// side). A side that exits without a result, or takes too long, is an error, not a panic.
pub(crate) async fn measure(mut command: tokio::process::Command, timeout: Duration) -> Outcome {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("could not start {:?}: {e}", command.as_std().get_program()))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = actix_rt::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let result = tokio::time::timeout(timeout, async {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix("RESULT ") {
                return Some(rest.to_string());
            }
        }
        None
    })
    .await;
    match result {
        Ok(Some(line)) => {
            if tokio::time::timeout(Duration::from_secs(15), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
            errors.abort();
            parse(&line)
        }
        Ok(None) => {
            let status = child.wait().await.map_err(|e| e.to_string())?;
            let stderr = errors.await.unwrap_or_default();
            Err(format!(
                "exited ({status}) without a result{}",
                last_word(&stderr)
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default()
            ))
        }
        Err(_) => {
            let _ = child.kill().await;
            errors.abort();
            Err(format!("no result within {} s: killed", timeout.as_secs()))
        }
    }
}

/// How long a side may take before it is killed and counted as failed: far more than the
/// slowest side needs (a few thousand messages per second at one stream).
pub(crate) fn side_timeout(messages: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(5 * messages as u64)
}

/// The arguments of one table row's runs, the same for every side: the emulator, the
/// messages, the streams, the delivery type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(crate) host: &'a str,
    pub(crate) messages: usize,
    pub(crate) streams: usize,
    pub(crate) exactly_once: bool,
}

impl Row<'_> {
    /// The delivery type, as the tables name it.
    pub(crate) fn delivery(&self) -> &'static str {
        if self.exactly_once {
            "exactly-once"
        } else {
            "at-least-once"
        }
    }

    /// Adds this row's arguments, and `subscription`, to a side's command.
    pub(crate) fn configure(&self, command: &mut tokio::process::Command, subscription: &str) {
        command
            .args(["--subscription", subscription])
            .args(["--messages", &self.messages.to_string()])
            .args(["--streams", &self.streams.to_string()])
            .env("PUBSUB_EMULATOR_HOST", self.host);
        if self.exactly_once {
            command.arg("--exactly-once");
        }
    }
}

/// `reps` rounds of one row: in each, every one of `sides` on a fresh subscription of its own,
/// started by `command` and named by `name` when it fails, in an order that rotates from one
/// round to the next, so that drift on the machine hits all alike. The outcomes of each side,
/// in the order of `sides`.
pub(crate) async fn rotate<S: Copy>(
    admin: &Admin,
    row: Row<'_>,
    reps: usize,
    sides: &[S],
    command: impl Fn(S) -> tokio::process::Command,
    name: impl Fn(S) -> String,
) -> Vec<Vec<Outcome>> {
    let mut outcomes: Vec<Vec<Outcome>> = sides.iter().map(|_| Vec::new()).collect();
    for rep in 0..reps {
        for i in 0..sides.len() {
            let at = (rep + i) % sides.len();
            let side = sides[at];
            let made = admin.prepare(row.messages, row.exactly_once).await;
            let mut command = command(side);
            row.configure(&mut command, &made.subscription);
            let result = measure(command, side_timeout(row.messages)).await;
            if let Err(why) = &result {
                eprintln!(
                    "{} failed ({}, {} stream(s)): {why}",
                    name(side),
                    row.delivery(),
                    row.streams
                );
            }
            outcomes[at].push(result);
            admin.cleanup(made).await;
        }
    }
    outcomes
}
