//! Starts Google's Pub/Sub emulator on a free local port, for examples and tests.
//!
//! The emulator is tied to this process: it is stopped when the [`Emulator`] is dropped, and also
//! when this process dies without dropping it (a watchdog shell stops it when our end of its
//! stdin pipe closes), so no emulator outlives the test run that started it.

use crate::Connection;
pub use crate::connection::EMULATOR_HOST_ENV;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian package `google-cloud-cli-pubsub-emulator` puts the launcher.
const DEBIAN_LAUNCHER: &str =
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";
/// Overrides where the launcher is looked for.
pub const LAUNCHER_ENV: &str = "LEASEHOLD_PUBSUB_EMULATOR";
/// How long the JVM may take to start answering: a cold start on a loaded 2-core machine takes
/// several seconds.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// What to do when the emulator is missing, shown to whoever runs the tests or examples.
const INSTALL_HINT: &str = "install Google's Pub/Sub emulator (Debian package \
    google-cloud-cli-pubsub-emulator, or `gcloud components install pubsub-emulator`), \
    point LEASEHOLD_PUBSUB_EMULATOR at its cloud-pubsub-emulator launcher, \
    or set PUBSUB_EMULATOR_HOST=host:port to use an emulator that is already running";

/// The emulator could not be started.
///
/// Nothing ran against it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulatorError {
    /// No launcher was found.
    #[error("the Pub/Sub emulator was not found: {INSTALL_HINT}")]
    NotFound,
    /// The launcher could not be run, or exited early.
    #[error("the Pub/Sub emulator at {launcher} failed to start: {reason}")]
    Failed {
        /// The launcher that was run.
        launcher: PathBuf,
        /// What went wrong, with the emulator's output when there was some.
        reason: String,
    },
}

/// A running emulator this process started.
#[derive(Debug)]
pub struct Emulator {
    child: Child,
    stdin: Option<ChildStdin>,
    host: String,
}

impl Emulator {
    /// Starts the emulator on a free port and waits until it answers.
    pub fn start() -> Result<Self, EmulatorError> {
        let launcher = find_launcher().ok_or(EmulatorError::NotFound)?;
        let failed = |reason: String| EmulatorError::Failed {
            launcher: launcher.clone(),
            reason,
        };
        let port = free_port().map_err(|e| failed(format!("no free port: {e}")))?;
        let log = std::env::temp_dir().join(format!("leasehold-emulator-{port}.log"));
        // The shell starts the emulator, then blocks reading stdin; when our end closes (drop or
        // death of this process) it stops the emulator and deletes its log, unless it was told
        // `keep` (a start that failed: the error names the log). In a process group of its own,
        // so that a Ctrl-C in a terminal, which reaches the whole foreground group, does not end
        // the shell before it could stop the emulator.
        let script = r#"
            "$0" --host=127.0.0.1 --port="$1" >"$2" 2>&1 &
            pid=$!
            read -r answer
            kill "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            [ "$answer" = keep ] || rm -f "$2"
            exit 0
        "#;
        let mut command = Command::new("sh");
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command
            .arg("-c")
            .arg(script)
            .arg(&launcher)
            .arg(port.to_string())
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let stdin = child.stdin.take();
        let mut emulator = Self {
            child,
            stdin,
            host: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if answers(&emulator.host) {
                return Ok(emulator);
            }
            let exited = emulator.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                if let Some(mut stdin) = emulator.stdin.take() {
                    let _ = writeln!(stdin, "keep");
                }
                let output = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: String = output.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                return Err(failed(format!(
                    "{} (log {}):\n{tail}",
                    if exited {
                        "it exited"
                    } else {
                        "it did not answer in time"
                    },
                    log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `host:port` of the emulator.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// A connection to it.
    pub fn connection(&self) -> Connection {
        Connection::emulator(&self.host)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // Closing stdin makes the watchdog shell stop the emulator and exit.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An emulator to use: the one `PUBSUB_EMULATOR_HOST` names, or one started now.
#[derive(Debug)]
pub enum EmulatorHost {
    /// `PUBSUB_EMULATOR_HOST` was set: use that emulator, which someone else runs.
    FromEnv(String),
    /// Started by this process; stopped when dropped.
    Started(Emulator),
}

impl EmulatorHost {
    /// `PUBSUB_EMULATOR_HOST` when set, else a newly started emulator.
    pub fn from_env_or_start() -> Result<Self, EmulatorError> {
        match std::env::var(EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => Ok(Self::FromEnv(host.trim().to_string())),
            _ => Emulator::start().map(Self::Started),
        }
    }

    /// `host:port`.
    pub fn host(&self) -> &str {
        match self {
            Self::FromEnv(host) => host,
            Self::Started(e) => e.host(),
        }
    }

    /// A connection to it.
    pub fn connection(&self) -> Connection {
        Connection::emulator(self.host())
    }
}

fn find_launcher() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(LAUNCHER_ENV) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("cloud-pubsub-emulator"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from(DEBIAN_LAUNCHER)).filter(|p| Path::new(p).is_file()))
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether an HTTP GET of `/` gets an answer: the emulator's REST side says "Ok" when ready.
fn answers(host: &str) -> bool {
    let Ok(addr) = host.parse::<SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    matches!(s.read(&mut buf), Ok(n) if n >= 12 && buf.starts_with(b"HTTP/1."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_says_how_to_install_or_point_at_one() {
        let text = EmulatorError::NotFound.to_string();
        assert!(text.contains("google-cloud-cli-pubsub-emulator"), "{text}");
        assert!(text.contains("PUBSUB_EMULATOR_HOST"), "{text}");
    }
}
