//! The child processes the sides run in, both ends of the conversation: starting this binary
//! (or another build's) in a child mode and reading its lines ([`child`], [`child_of`],
//! [`expect_line`], [`field`]), and, in the child, the parent's commands on stdin
//! ([`stdin_lines`]) and the measured window they open and close ([`serve_window`]).
//!
//! Uses tokio's processes and a thread of its own for stdin.

use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A child's stdout, line by line.
pub(crate) type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// A child of this binary in one of its modes, its stdin and stdout piped.
pub(crate) fn child(host: &str, mode: &[&str]) -> tokio::process::Child {
    let this = std::env::current_exe().expect("this benchmark's executable");
    child_of(&this, host, mode)
}

/// A child of `program` (this benchmark's binary, or another build's) in one of its modes.
pub(crate) fn child_of(
    program: &std::path::Path,
    host: &str,
    mode: &[&str],
) -> tokio::process::Child {
    tokio::process::Command::new(program)
        .args(mode)
        .env("PUBSUB_EMULATOR_HOST", host)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start a child of this benchmark")
}

/// A child's stdout as [`Lines`].
pub(crate) fn lines(child: &mut tokio::process::Child) -> Lines {
    BufReader::new(child.stdout.take().expect("piped stdout")).lines()
}

/// Lines of a child's stdout, skipping to the one that starts with `prefix`: the rest of it.
pub(crate) async fn expect_line(lines: &mut Lines, prefix: &str) -> String {
    let wait = async {
        while let Some(line) = lines.next_line().await.expect("the child's stdout") {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_string();
            }
        }
        panic!("the child ended before {prefix:?}");
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("no {prefix:?} from the child within 120 s"))
}

/// Waits a while for a child that has said what it had to say to exit, and kills it when it
/// does not, so that it takes no CPU from the next run.
pub(crate) async fn reap(mut child: tokio::process::Child) {
    if tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// The field `name` of a `RESULT` line.
pub(crate) fn field(line: &str, name: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// In a server child: answers the parent's commands on stdin until EOF. `start` opens the
/// measured window (answered `STARTED`), `stop` closes it, answered with the `RESULT` line of
/// the messages `count()` grew by in the window (and `refused()`, the pushes refused in it).
pub(crate) async fn serve_window(count: impl Fn() -> u64, refused: impl Fn() -> u64) {
    let mut commands = stdin_lines();
    let mut window = None;
    while let Some(command) = commands.recv().await {
        match command.trim() {
            "start" => {
                window = Some((super::clock::Clock::start(), count(), refused()));
                println!("STARTED");
            }
            "stop" => {
                let (clock, counted, refused_before) = window.take().expect("stop after start");
                let messages = count() - counted;
                let refused = refused() - refused_before;
                println!("RESULT {} refused={refused}", clock.result(messages));
            }
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// In a child: lines from stdin, read on a thread of their own (EOF ends the channel).
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}
