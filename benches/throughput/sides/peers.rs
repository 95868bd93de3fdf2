//! The peers: Google's Python and Node subscribers (`benches/peers/subscriber.py`,
//! `subscriber.js`) and the community Rust crate `gcloud-pubsub` (`benches/peers/gcloud/`),
//! installed into `target/bench-peers/` when missing: a virtualenv from `requirements.txt`, a
//! node_modules from `package.json` and its lock, a `cargo build --release --locked` of the
//! crate's own project. An install is reused while those files are unchanged.
//!
//! Uses `python3`, `npm`, `node` and `cargo` as child processes, and nothing else of this
//! benchmark.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Which peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Google's Python subscriber.
    Python,
    /// Google's Node subscriber.
    Node,
    /// The community Rust crate `gcloud-pubsub`: a cargo project of its own, built here.
    Gcloud,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Python => "Python",
            Kind::Node => "Node",
            Kind::Gcloud => "gcloud-pubsub",
        }
    }

    /// What could not be done when a peer cannot run.
    fn failed(self) -> &'static str {
        match self {
            Kind::Python | Kind::Node => "could not be installed",
            Kind::Gcloud => "could not be built",
        }
    }
}

/// An installed peer.
pub(crate) struct Peer {
    pub(crate) kind: Kind,
    program: PathBuf,
    /// The script the interpreter runs; `None` for a compiled peer.
    script: Option<PathBuf>,
    env: Vec<(&'static str, PathBuf)>,
}

impl Peer {
    /// The command that runs this peer's subscriber, without its run's arguments.
    pub(crate) fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        if self.kind == Kind::Python {
            command.arg("-u");
        }
        command.args(&self.script);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// `subscriber --version`: the versions it runs with. Also the proof that it loads.
    fn versions(&self) -> Result<String, String> {
        let mut command = Command::new(&self.program);
        command.args(&self.script).arg("--version");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        let out = run(&mut command, Duration::from_secs(60))?;
        Ok(out.lines().next().unwrap_or("").trim().to_string())
    }
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers")
}

/// `target/bench-peers`, in the target directory this benchmark was built in
/// (`target/release/deps/throughput-…`).
fn root() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .filter(|target| target.join("CACHEDIR.TAG").is_file())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("bench-peers")
}

/// Installs (or finds) each peer and prints one line for each: its versions, or why it
/// could not be installed. Returns those that can run.
pub(crate) fn setup() -> Vec<Peer> {
    let root = root();
    let mut ready = Vec::new();
    for kind in [Kind::Python, Kind::Node, Kind::Gcloud] {
        match install(kind, &root).and_then(|(peer, how)| Ok((peer.versions()?, peer, how))) {
            Ok((versions, peer, how)) => {
                println!("peer {}: {versions} ({how})", kind.name());
                ready.push(peer);
            }
            Err(why) => println!(
                "peer {}: {}, so it is left out of the end-to-end table: {why}",
                kind.name(),
                kind.failed()
            ),
        }
    }
    ready
}

/// What an install was made from: when it changes, the install is made anew.
fn manifest(files: &[PathBuf]) -> Result<String, String> {
    let mut text = String::new();
    for file in files {
        if file.is_file() {
            text +=
                &std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        }
    }
    Ok(text)
}

const MARKER: &str = ".leasehold-installed-from";

fn install(kind: Kind, root: &Path) -> Result<(Peer, String), String> {
    let sources = sources();
    let began = Instant::now();
    let installed_into = |dir: &Path| {
        format!(
            "installed into {} in {:.0} s",
            dir.display(),
            began.elapsed().as_secs_f64()
        )
    };
    let fresh = |dir: &Path| -> Result<(), String> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
    };
    let write = |file: PathBuf, text: &str| {
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))
    };
    let install_timeout = Duration::from_secs(600);
    match kind {
        Kind::Python => {
            let dir = root.join("venv");
            let requirements = sources.join("requirements.txt");
            let made_from = manifest(std::slice::from_ref(&requirements))?;
            let python = dir.join("bin/python");
            let peer = Peer {
                kind,
                program: python.clone(),
                script: Some(sources.join("subscriber.py")),
                env: Vec::new(),
            };
            let installed = std::fs::read_to_string(dir.join(MARKER)).ok();
            if python.is_file() && installed.as_deref() == Some(made_from.as_str()) {
                return Ok((peer, format!("reused {}", dir.display())));
            }
            fresh(&dir)?;
            run(
                Command::new("python3").args(["-m", "venv"]).arg(&dir),
                install_timeout,
            )?;
            run(
                Command::new(&python)
                    .args(["-m", "pip", "install", "--disable-pip-version-check"])
                    .args(["--no-input", "--quiet", "-r"])
                    .arg(&requirements),
                install_timeout,
            )?;
            write(dir.join(MARKER), &made_from)?;
            Ok((peer, installed_into(&dir)))
        }
        Kind::Node => {
            let dir = root.join("node");
            let files = ["package.json", "package-lock.json", ".npmrc"];
            let made_from = manifest(&files.map(|f| sources.join(f)))?;
            let peer = Peer {
                kind,
                program: PathBuf::from("node"),
                script: Some(sources.join("subscriber.js")),
                env: vec![("NODE_PATH", dir.join("node_modules"))],
            };
            let installed = std::fs::read_to_string(dir.join(MARKER)).ok();
            if dir.join("node_modules/@google-cloud/pubsub").is_dir()
                && installed.as_deref() == Some(made_from.as_str())
            {
                return Ok((peer, format!("reused {}", dir.display())));
            }
            fresh(&dir)?;
            for file in files {
                let from = sources.join(file);
                if from.is_file() {
                    std::fs::copy(&from, dir.join(file))
                        .map_err(|e| format!("{}: {e}", from.display()))?;
                }
            }
            // `npm ci` installs exactly what the lock names.
            let how = if dir.join("package-lock.json").is_file() {
                "ci"
            } else {
                "install"
            };
            run(
                Command::new("npm")
                    .args([how, "--no-audit", "--no-fund"])
                    .current_dir(&dir),
                install_timeout,
            )?;
            write(dir.join(MARKER), &made_from)?;
            Ok((peer, installed_into(&dir)))
        }
        Kind::Gcloud => {
            // A cargo project of its own, outside the workspace, with its own lock file and
            // target directory: only this benchmark ever compiles gcloud-pubsub. Cargo
            // itself tells whether the build is up to date (then this takes a second).
            let dir = root.join("gcloud");
            let manifest = sources.join("gcloud/Cargo.toml");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            run(
                Command::new(cargo)
                    .args(["build", "--release", "--locked", "--quiet"])
                    .arg("--manifest-path")
                    .arg(&manifest)
                    .arg("--target-dir")
                    .arg(&dir),
                Duration::from_secs(1800),
            )?;
            let peer = Peer {
                kind,
                program: dir.join("release/leasehold-bench-gcloud-peer"),
                script: None,
                env: Vec::new(),
            };
            Ok((
                peer,
                format!(
                    "cargo build --release --locked into {} in {:.0} s",
                    dir.display(),
                    began.elapsed().as_secs_f64()
                ),
            ))
        }
    }
}

/// Runs `command` to the end (killed after `timeout`) and returns its standard output; on
/// failure, the first line of its output that reports an error.
fn run(command: &mut Command, timeout: Duration) -> Result<String, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{program} took longer than {} s",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("{program}: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if status.success() {
        return Ok(stdout);
    }
    let text = format!("{stderr}\n{stdout}");
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    // npm's first error line is only a code ("npm error code ETARGET"): take the next.
    let first = lines()
        .find(|l| l.to_lowercase().contains("error") && !l.starts_with("npm error code "))
        .or_else(|| lines().next());
    Err(match first {
        Some(line) => format!("{program}: {}", line.chars().take(300).collect::<String>()),
        None => format!("{program} exited with {status}"),
    })
}
