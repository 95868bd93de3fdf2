//! Starts a throwaway PostgreSQL cluster on a free local port, for examples and tests.
//!
//! `initdb` into a temporary directory, then `postgres` on a free port, tied to this process: a
//! watchdog shell stops the server and deletes the directory when the [`LocalPostgres`] is
//! dropped, and also when this process dies without dropping it (our end of its stdin closes).
//! PostgreSQL refuses to run as root: run as root, the cluster belongs to the `postgres` user
//! that Debian's package creates.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The database an application already runs: used instead of starting one.
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";
/// Overrides where PostgreSQL's programs (`initdb`, `postgres`, `pg_isready`) are looked for.
pub const POSTGRES_BIN_ENV: &str = "LEASEHOLD_POSTGRES_BIN";
/// Where Debian's packages put each version's programs.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// How long the server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

const INSTALL_HINT: &str = "install PostgreSQL (Debian: apt-get install postgresql-15), \
    point LEASEHOLD_POSTGRES_BIN at the directory holding initdb and postgres, \
    or set DATABASE_URL=postgres://user@host:port/db to use a database that is already running";

/// A local PostgreSQL could not be started.
///
/// Nothing ran against it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// PostgreSQL's programs were not found.
    #[error("PostgreSQL was not found: {INSTALL_HINT}")]
    NotFound,
    /// A program failed.
    #[error("{program} failed: {reason}")]
    Failed {
        /// The program that was run.
        program: PathBuf,
        /// What went wrong, with its output when there was some.
        reason: String,
    },
}

/// A PostgreSQL server this process started, in a temporary directory.
#[derive(Debug)]
pub struct LocalPostgres {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
}

/// The user that owns the cluster when we are root.
struct Owner {
    uid: u32,
    gid: u32,
}

impl LocalPostgres {
    /// Creates a cluster in a new temporary directory, starts it on a free port, and waits
    /// until it accepts connections. The user `leasehold` connects without a password, to the
    /// database `postgres`. It accepts 400 connections (PostgreSQL's default is 100: a few
    /// replicas with full pools reach it).
    pub fn start() -> Result<Self, LaunchError> {
        let bin = find_bin().ok_or(LaunchError::NotFound)?;
        let owner = owner()?;
        let dir = scratch_dir(&owner).map_err(|e| LaunchError::Failed {
            program: bin.join("initdb"),
            reason: format!("no temporary directory: {e}"),
        })?;
        let data = dir.join("data");
        let as_owner = |program: &str| {
            let mut command = Command::new(bin.join(program));
            if let Some(owner) = &owner {
                command.uid(owner.uid).gid(owner.gid);
            }
            command
        };
        let initdb = as_owner("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "leasehold",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .args(["--no-sync", "--no-instructions"])
            .output()
            .map_err(|e| failed(&bin, "initdb", e.to_string()))?;
        if !initdb.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(failed(
                &bin,
                "initdb",
                String::from_utf8_lossy(&initdb.stderr).into_owned(),
            ));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| failed(&bin, "postgres", format!("no free port: {e}")))?
            .port();
        let log = dir.join("server.log");
        // The shell starts the server, then reads commands on stdin: `stop` stops the server
        // (fast shutdown), `start` starts it again on the same port and directory. When our end
        // closes (drop or death of this process) it stops the server and deletes the directory.
        let script = r#"
            serve() {
                "$bin" -D "$data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
                    -c max_connections=400 >>"$log" 2>&1 &
                pid=$!
            }
            halt() {
                [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
                pid=
            }
            bin="$0" data="$1" port="$2" dir="$3" log="$4"
            serve
            while read -r command; do
                case "$command" in
                    stop) halt ;;
                    start) [ -z "$pid" ] && serve ;;
                esac
            done
            halt
            rm -rf "$dir"
            exit 0
        "#;
        let mut watchdog = Command::new("sh");
        // A process group of its own: a Ctrl-C in a terminal reaches the whole foreground group
        // and would end the shell before it could stop the server and delete the directory.
        watchdog.process_group(0);
        if let Some(owner) = &owner {
            watchdog.uid(owner.uid).gid(owner.gid);
        }
        let mut child = watchdog
            .arg("-c")
            .arg(script)
            .arg(bin.join("postgres"))
            .arg(&data)
            .arg(port.to_string())
            .arg(&dir)
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(&bin, "postgres", e.to_string()))?;
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            url: format!("postgres://leasehold@127.0.0.1:{port}/postgres"),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(server);
            }
            let exited = server.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                let mut output = String::new();
                let _ = std::fs::File::open(&log).map(|mut f| f.read_to_string(&mut output));
                return Err(failed(
                    &bin,
                    "postgres",
                    format!(
                        "{} (log {}):\n{output}",
                        if exited {
                            "it exited"
                        } else {
                            "it did not accept connections in time"
                        },
                        log.display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL to connect with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server (fast shutdown: open connections are cut) and returns once it no
    /// longer accepts connections; its data stays. For outage tests.
    pub fn stop_server(&mut self) -> Result<(), LaunchError> {
        self.command("stop")?;
        self.wait_until(false)
    }

    /// Starts the stopped server again on the same port, and returns once it accepts
    /// connections.
    pub fn start_server(&mut self) -> Result<(), LaunchError> {
        self.command("start")?;
        self.wait_until(true)
    }

    fn command(&mut self, command: &str) -> Result<(), LaunchError> {
        use std::io::Write;
        let bin = find_bin().ok_or(LaunchError::NotFound)?;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| failed(&bin, "postgres", "the watchdog is gone".into()))?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| failed(&bin, "postgres", format!("the watchdog is gone: {e}")))
    }

    /// Waits until `pg_isready` says the server accepts connections (`ready`) or not.
    fn wait_until(&mut self, ready: bool) -> Result<(), LaunchError> {
        let bin = find_bin().ok_or(LaunchError::NotFound)?;
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next());
        let port = port.unwrap_or_default().to_string();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let accepts = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port])
                .status()
                .is_ok_and(|s| s.success());
            if accepts == ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let state = if ready {
                    "did not start"
                } else {
                    "did not stop"
                };
                return Err(failed(&bin, "postgres", format!("it {state} in time")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        // Closing stdin makes the watchdog stop the server, delete its directory and exit.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
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

/// A database to use: the one `DATABASE_URL` names, or one started now.
#[derive(Debug)]
pub enum PostgresHost {
    /// `DATABASE_URL` was set: use that database, which someone else runs.
    FromEnv(String),
    /// Started by this process; stopped and deleted when dropped.
    Started(LocalPostgres),
}

impl PostgresHost {
    /// `DATABASE_URL` when set, else a newly started local cluster.
    pub fn from_env_or_start() -> Result<Self, LaunchError> {
        match std::env::var(DATABASE_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Ok(Self::FromEnv(url.trim().to_string())),
            _ => LocalPostgres::start().map(Self::Started),
        }
    }

    /// The URL to connect with.
    pub fn url(&self) -> &str {
        match self {
            Self::FromEnv(url) => url,
            Self::Started(local) => local.url(),
        }
    }
}

fn failed(bin: &Path, program: &str, reason: String) -> LaunchError {
    LaunchError::Failed {
        program: bin.join(program),
        reason,
    }
}

/// The directory with `initdb`, `postgres` and `pg_isready`: `LEASEHOLD_POSTGRES_BIN`, else
/// the newest Debian version, else the directory of `postgres` on `PATH`.
fn find_bin() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    if let Some(dir) = std::env::var_os(POSTGRES_BIN_ENV) {
        return Some(PathBuf::from(dir)).filter(|d| complete(d));
    }
    let debian = std::fs::read_dir(DEBIAN_ROOT).ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let version: u32 = e.file_name().to_str()?.parse().ok()?;
                Some((version, e.path().join("bin")))
            })
            .filter(|(_, bin)| complete(bin))
            .max_by_key(|(version, _)| *version)
            .map(|(_, bin)| bin)
    });
    debian.or_else(|| {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths).find(|dir| complete(dir))
    })
}

/// `None` when we are not root; as root, the `postgres` user (PostgreSQL will not run as root).
fn owner() -> Result<Option<Owner>, LaunchError> {
    let euid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    if euid != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == "postgres").then(|| {
                Some(Owner {
                    uid: fields[2].parse().ok()?,
                    gid: fields[3].parse().ok()?,
                })
            })?
        })
        .map(Some)
        .ok_or_else(|| LaunchError::Failed {
            program: PathBuf::from("initdb"),
            reason: "PostgreSQL will not run as root, and there is no `postgres` user to run \
                     it as: create one (Debian's postgresql package does), run as another user, \
                     or set DATABASE_URL"
                .into(),
        })
}

/// A new empty directory under the temporary directory, owned by `owner` when there is one.
fn scratch_dir(owner: &Option<Owner>) -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let dir =
        std::env::temp_dir().join(format!("leasehold-postgres-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    if let Some(owner) = owner {
        std::os::unix::fs::chown(&dir, Some(owner.uid), Some(owner.gid))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_says_how_to_install_or_point_at_one() {
        let text = LaunchError::NotFound.to_string();
        assert!(text.contains("postgresql-15"), "{text}");
        assert!(text.contains("DATABASE_URL"), "{text}");
    }
}
