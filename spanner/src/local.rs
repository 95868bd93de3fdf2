//! Starts Google's Spanner emulator on a free local port, for examples and tests, and creates
//! an instance and a database in it.
//!
//! The emulator's server (`emulator_main`, from Debian's `google-cloud-cli-spanner-emulator`)
//! runs under a watchdog shell tied to this process: the shell stops the emulator when the
//! [`LocalSpanner`] is dropped, and also when this process dies without dropping it (our end
//! of its stdin closes). It keeps its data in memory only.

use crate::endpoint::{Endpoint, SPANNER_EMULATOR_HOST_ENV};
use crate::error::SpannerError;
use gcloud_gax::grpc::Code;
use gcloud_googleapis::spanner::admin::database::v1::CreateDatabaseRequest;
use gcloud_googleapis::spanner::admin::instance::v1::{CreateInstanceRequest, Instance};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Overrides where the emulator's server (`emulator_main`) is looked for.
pub const SPANNER_EMULATOR_BIN_ENV: &str = "LEASEHOLD_SPANNER_EMULATOR";
/// Where Debian's `google-cloud-cli-spanner-emulator` puts it.
const DEBIAN_PATH: &str = "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main";
/// How long the emulator may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

const INSTALL_HINT: &str = "install Google's Spanner emulator (Debian: apt-get install \
    google-cloud-cli-spanner-emulator, or `cargo xtask setup`), point \
    LEASEHOLD_SPANNER_EMULATOR at its emulator_main, or set SPANNER_EMULATOR_HOST=host:port to \
    use an emulator that is already running";

/// The Spanner emulator could not be started.
///
/// Nothing ran against it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The emulator was not found.
    #[error("the Spanner emulator was not found: {INSTALL_HINT}")]
    NotFound,
    /// It did not start.
    #[error("the Spanner emulator ({program}) failed: {reason}")]
    Failed {
        /// The program that was run.
        program: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// A Spanner emulator this process started.
#[derive(Debug)]
pub struct LocalSpanner {
    child: Child,
    stdin: Option<ChildStdin>,
    program: PathBuf,
    port: u16,
}

impl LocalSpanner {
    /// Starts the emulator on a free port and waits until it accepts connections.
    pub fn start() -> Result<Self, LaunchError> {
        let program = find_emulator().ok_or(LaunchError::NotFound)?;
        let failed = |reason: String| LaunchError::Failed {
            program: program.clone(),
            reason,
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| failed(format!("no free port: {e}")))?
            .port();
        // The shell starts the emulator, then reads commands on stdin: `stop` kills it (its data
        // is lost: it keeps none on disk), `start` starts a new one on the same port. When our
        // end closes it stops the emulator and exits.
        let script = r#"
            serve() { "$bin" --host_port "127.0.0.1:$port" >/dev/null 2>&1 & pid=$!; }
            halt() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }
            bin="$0" port="$1"
            serve
            while read -r command; do
                case "$command" in
                    stop) halt ;;
                    start) [ -z "$pid" ] && serve ;;
                esac
            done
            halt
            exit 0
        "#;
        let mut watchdog = Command::new("sh");
        // A process group of its own: a Ctrl-C in a terminal would end the shell before it
        // could stop the emulator.
        watchdog.process_group(0);
        let child = watchdog
            .arg("-c")
            .arg(script)
            .arg(&program)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let mut emulator = Self {
            child,
            stdin: None,
            program: program.clone(),
            port,
        };
        emulator.stdin = emulator.child.stdin.take();
        emulator.wait_until(true)?;
        Ok(emulator)
    }

    /// The emulator's `host:port`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where to reach it.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Emulator(self.host())
    }

    /// Kills the emulator and returns once it no longer accepts connections: everything in it
    /// is lost (it keeps nothing on disk). For fault tests.
    pub fn stop_server(&mut self) -> Result<(), LaunchError> {
        self.command("stop")?;
        self.wait_until(false)
    }

    /// Starts a new, empty emulator on the same port and returns once it accepts connections.
    pub fn start_server(&mut self) -> Result<(), LaunchError> {
        self.command("start")?;
        self.wait_until(true)
    }

    fn command(&mut self, command: &str) -> Result<(), LaunchError> {
        use std::io::Write;
        let failed = |reason: String| LaunchError::Failed {
            program: self.program.clone(),
            reason,
        };
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| failed("the watchdog is gone".into()))?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| failed(format!("the watchdog is gone: {e}")))
    }

    /// Waits until the port accepts connections (`ready`) or not.
    fn wait_until(&mut self, ready: bool) -> Result<(), LaunchError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let address = ([127, 0, 0, 1], self.port).into();
        loop {
            let accepts = TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok();
            if accepts == ready {
                return Ok(());
            }
            let exited = self.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                let what = match (exited, ready) {
                    (true, _) => "its watchdog exited",
                    (false, true) => "it did not accept connections in time",
                    (false, false) => "it did not stop in time",
                };
                return Err(LaunchError::Failed {
                    program: self.program.clone(),
                    reason: what.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LocalSpanner {
    fn drop(&mut self) {
        // Closing stdin makes the watchdog stop the emulator and exit.
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

/// An emulator to use: the one `SPANNER_EMULATOR_HOST` names, or one started now.
#[derive(Debug)]
pub enum SpannerHost {
    /// `SPANNER_EMULATOR_HOST` was set: use that emulator, which someone else runs.
    FromEnv(String),
    /// Started by this process; stopped when dropped.
    Started(LocalSpanner),
}

impl SpannerHost {
    /// `SPANNER_EMULATOR_HOST` when set, else a newly started local emulator.
    pub fn from_env_or_start() -> Result<Self, LaunchError> {
        match std::env::var(SPANNER_EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => Ok(Self::FromEnv(host.trim().to_string())),
            _ => LocalSpanner::start().map(Self::Started),
        }
    }

    /// Where to reach it.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            Self::FromEnv(host) => Endpoint::Emulator(host.clone()),
            Self::Started(local) => local.endpoint(),
        }
    }
}

/// Creates the instance and the database of `database` (`projects/P/instances/I/databases/D`)
/// at `endpoint`, each unless it exists, and waits until they are ready. For the emulator
/// (its instance config is `emulator-config`) and for examples; on Google Cloud, create them
/// as you create any other.
pub async fn create_database(endpoint: &Endpoint, database: &str) -> Result<(), SpannerError> {
    crate::error::check_name(database)?;
    let parts: Vec<String> = database.split('/').map(str::to_string).collect();
    let (project, instance, name) = (parts[1].clone(), parts[3].clone(), parts[5].clone());
    let endpoint = endpoint.clone();
    crate::driver::on_driver(async move {
        let admin = crate::schema::admin_client(&endpoint).await?;
        let parent = format!("projects/{project}");
        let created = admin
            .instance()
            .create_instance(
                CreateInstanceRequest {
                    parent: parent.clone(),
                    instance_id: instance.clone(),
                    instance: Some(Instance {
                        name: format!("{parent}/instances/{instance}"),
                        config: format!("{parent}/instanceConfigs/emulator-config"),
                        display_name: instance.clone(),
                        node_count: 1,
                        ..Default::default()
                    }),
                },
                None,
            )
            .await;
        match created {
            Ok(mut operation) => {
                operation.wait(None).await.map_err(SpannerError::client)?;
            }
            Err(status) if status.code() == Code::AlreadyExists => {}
            Err(status) => return Err(SpannerError::client(status)),
        }
        let created = admin
            .database()
            .create_database(
                CreateDatabaseRequest {
                    parent: format!("{parent}/instances/{instance}"),
                    create_statement: format!("CREATE DATABASE `{name}`"),
                    ..Default::default()
                },
                None,
            )
            .await;
        match created {
            Ok(mut operation) => {
                operation.wait(None).await.map_err(SpannerError::client)?;
                Ok(())
            }
            Err(status) if status.code() == Code::AlreadyExists => Ok(()),
            Err(status) => Err(SpannerError::client(status)),
        }
    })
    .await
}

/// `emulator_main`: `LEASEHOLD_SPANNER_EMULATOR`, else Debian's path, else beside the
/// `gcloud` found on `PATH` (its SDK's `bin/cloud_spanner_emulator`).
fn find_emulator() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(SPANNER_EMULATOR_BIN_ENV) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let debian = PathBuf::from(DEBIAN_PATH);
    if debian.is_file() {
        return Some(debian);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).find_map(|dir| {
        let gcloud = std::fs::canonicalize(dir.join("gcloud")).ok()?;
        let sdk_bin = gcloud.parent()?;
        let emulator = sdk_bin.join("cloud_spanner_emulator").join("emulator_main");
        emulator.is_file().then_some(emulator)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_says_how_to_install_or_point_at_one() {
        let text = LaunchError::NotFound.to_string();
        assert!(text.contains("google-cloud-cli-spanner-emulator"), "{text}");
        assert!(text.contains("SPANNER_EMULATOR_HOST"), "{text}");
    }
}
