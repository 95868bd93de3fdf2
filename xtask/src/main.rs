//! `cargo xtask`: Leasehold's developer tasks, in Rust so they run wherever cargo does.
//!
//! `cargo xtask test` is the one command that runs every test on a fresh machine: it finds or
//! installs what the tests drive (Google's Pub/Sub and Spanner emulators, Chromium, Prometheus,
//! PostgreSQL), then runs `cargo test`. `.ci/run` is `cargo xtask ci`.
//!
//! Layout: `parts.rs` holds the rules (what each part is, how the tests find it, which package
//! brings it; pure, tested on a fake machine), `setup.rs` the setup (install what is missing, or
//! say what to run), `system.rs` this machine, its apt-get and cargo install, `fuzz.rs` the fuzz
//! targets CI builds and runs, and this file the tasks.

mod fuzz;
mod parts;
mod setup;
mod system;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

const USAGE: &str = "\
Usage: cargo xtask TASK [ARGS]

Tasks:
  setup          check what the tests need (Google's Pub/Sub and Spanner emulators, Chromium,
                 promtool and prometheus, PostgreSQL, cargo fuzz), install what is missing
                 with apt-get (as root) or cargo install, or say exactly what to run and exit 1
  test [ARGS]    setup, then `cargo test ARGS` (its exit code is passed through)
  ci             setup, then what CI checks: cargo fmt --check, clippy with -D warnings,
                 rustdoc with -D warnings, the benchmarks built, xtask's own tests, the fuzz
                 targets built (nightly) and each run a fixed number of inputs, cargo test
  fuzz           setup, then only CI's fuzz steps: the targets built, each run its inputs
  help           this text

Instead of installing, the tests take PUBSUB_EMULATOR_HOST (a running Pub/Sub emulator),
LEASEHOLD_PUBSUB_EMULATOR (its launcher), SPANNER_EMULATOR_HOST (a running Spanner emulator),
LEASEHOLD_SPANNER_EMULATOR (its emulator_main), DATABASE_URL (a running PostgreSQL) or
LEASEHOLD_POSTGRES_BIN (the directory of initdb, postgres and pg_isready).
XTASK_NO_INSTALL=1 checks only: nothing is installed, and what is missing is reported.
";

/// What `cargo xtask` was asked to do.
#[derive(Debug, PartialEq, Eq)]
enum Task {
    /// Print the usage.
    Help,
    /// Find or install what the tests need.
    Setup,
    /// Setup, then `cargo test` with these arguments.
    Test(Vec<String>),
    /// Setup, then every check CI makes.
    Ci,
    /// Setup, then CI's fuzz steps alone.
    Fuzz,
}

impl Task {
    fn parse(args: &[String]) -> Result<Task, String> {
        let extra = || match args.get(1) {
            None => Ok(()),
            Some(arg) => Err(format!("`{}` takes no arguments (got `{arg}`)", args[0])),
        };
        match args.first().map(String::as_str) {
            None | Some("help" | "--help" | "-h") => Ok(Task::Help),
            Some("setup") => extra().map(|()| Task::Setup),
            Some("ci") => extra().map(|()| Task::Ci),
            Some("fuzz") => extra().map(|()| Task::Fuzz),
            Some("test") => Ok(Task::Test(args[1..].to_vec())),
            Some(other) => Err(format!("unknown task `{other}`")),
        }
    }
}

/// One cargo command of a task.
#[derive(Debug, PartialEq, Eq)]
struct Step {
    /// cargo's arguments.
    args: Vec<String>,
    /// Environment set for it.
    env: Vec<(&'static str, &'static str)>,
    /// The rustup toolchain it runs on (`rustup run TOOLCHAIN cargo ...`); `None`: the cargo
    /// that runs this task.
    toolchain: Option<&'static str>,
}

impl Step {
    fn cargo(args: &[&str]) -> Step {
        Step {
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            toolchain: None,
        }
    }

    /// `cargo fuzz` with `args`, on the nightly toolchain.
    fn fuzz(args: Vec<String>) -> Step {
        Step {
            args,
            env: Vec::new(),
            toolchain: Some("nightly"),
        }
    }
}

/// The fuzz steps of CI: one nightly build of every target, then each target's runs, what they
/// find put under `fuzz_scratch`.
fn fuzz_steps(fuzz_scratch: &str) -> Vec<Step> {
    let runs = fuzz::TARGETS
        .iter()
        .map(|target| Step::fuzz(fuzz::run(target, fuzz_scratch)));
    std::iter::once(Step::fuzz(fuzz::build()))
        .chain(runs)
        .collect()
}

/// Where the fuzz runs of this task put the inputs they find (not the repository's corpus).
fn fuzz_scratch() -> PathBuf {
    std::env::temp_dir().join(format!("leasehold-fuzz-{}", std::process::id()))
}

/// What CI checks after the setup, in order; the first failure ends the run. The fuzz runs put
/// what they find under `fuzz_scratch`.
fn ci_steps(fuzz_scratch: &str) -> Vec<Step> {
    let mut steps = vec![
        Step::cargo(&["fmt", "--check"]),
        // The fuzz targets are a workspace of their own (fuzz/).
        Step::cargo(&["fmt", "--check", "--manifest-path", "fuzz/Cargo.toml"]),
        // `--workspace`: the default members and xtask, which plain `cargo` commands leave out.
        Step::cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
        Step {
            env: vec![("RUSTDOCFLAGS", "-D warnings")],
            ..Step::cargo(&[
                "doc",
                "--no-deps",
                "--workspace",
                "--all-features",
                "--quiet",
            ])
        },
        // The benchmarks are compiled (unoptimized, sharing the test build) but not run: figures
        // come from `cargo bench` on a quiet machine, see BENCHMARKS.md.
        Step::cargo(&["test", "--benches", "--no-run", "--quiet"]),
        Step::cargo(&["test", "--quiet", "--package", "xtask"]),
    ];
    // The fuzz targets (fuzz/, xtask/src/fuzz.rs): one nightly build, then each for a fixed
    // number of inputs.
    steps.extend(fuzz_steps(fuzz_scratch));
    // The README's test command: unit tests, then the integration tests against the real
    // Pub/Sub and Spanner emulators, Chromium, Prometheus and PostgreSQL.
    steps.push(Step::cargo(&["test"]));
    steps
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = match Task::parse(&args) {
        Ok(task) => task,
        Err(e) => {
            eprintln!("xtask: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let steps = match task {
        Task::Help => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Task::Setup => Vec::new(),
        Task::Test(extra) => {
            let mut step = Step::cargo(&["test"]);
            step.args.extend(extra);
            vec![step]
        }
        Task::Ci => ci_steps(&fuzz_scratch().display().to_string()),
        Task::Fuzz => fuzz_steps(&fuzz_scratch().display().to_string()),
    };
    if let Err(code) = set_up() {
        return code;
    }
    let mut code = ExitCode::SUCCESS;
    for step in steps {
        let status = run(&step);
        if !status.success() {
            code = ExitCode::from(exit_code(status));
            break;
        }
    }
    let _ = std::fs::remove_dir_all(fuzz_scratch());
    code
}

/// The setup, printing what is found and installed, or what to run; `Err` holds the exit code.
fn set_up() -> Result<(), ExitCode> {
    let mut machine = system::System;
    match setup::setup(&mut machine) {
        Ok(_) => {
            println!("xtask: every part the tests need is here");
            Ok(())
        }
        Err(problems) => {
            use parts::Machine;
            let apt = machine.on_path("apt-get");
            eprint!("{}", setup::report(&problems, apt, !machine.is_root()));
            Err(ExitCode::FAILURE)
        }
    }
}

/// Runs `step` with this cargo, in the workspace root, and says so first.
fn run(step: &Step) -> ExitStatus {
    let env: String = step
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v:?} "))
        .collect();
    let mut command = match step.toolchain {
        Some(toolchain) => {
            println!(
                "xtask: + {env}rustup run {toolchain} cargo {}",
                step.args.join(" ")
            );
            // rustup's cargo of that toolchain; this task's own CARGO would be stable's.
            let mut command = Command::new("rustup");
            command
                .args(["run", toolchain, "cargo"])
                .env_remove("CARGO");
            command
        }
        None => {
            println!("xtask: + {env}cargo {}", step.args.join(" "));
            Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
        }
    };
    command
        .args(&step.args)
        .envs(step.env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run cargo: {e}");
            std::process::exit(1)
        })
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ is inside the workspace")
        .to_path_buf()
}

/// The exit code to pass on: the child's, or 128 + the signal that ended it, as a shell does.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn no_task_or_help_prints_the_usage() {
        assert_eq!(Task::parse(&[]), Ok(Task::Help));
        assert_eq!(Task::parse(&args(&["help"])), Ok(Task::Help));
        assert_eq!(Task::parse(&args(&["--help"])), Ok(Task::Help));
    }

    #[test]
    fn test_passes_its_arguments_on_and_the_others_take_none() {
        assert_eq!(
            Task::parse(&args(&[
                "test",
                "-p",
                "leasehold-service",
                "--",
                "--nocapture"
            ])),
            Ok(Task::Test(args(&[
                "-p",
                "leasehold-service",
                "--",
                "--nocapture"
            ])))
        );
        assert_eq!(Task::parse(&args(&["setup"])), Ok(Task::Setup));
        assert_eq!(Task::parse(&args(&["fuzz"])), Ok(Task::Fuzz));
        assert!(Task::parse(&args(&["ci", "--fast"])).is_err());
        assert_eq!(
            Task::parse(&args(&["tset"])),
            Err("unknown task `tset`".into())
        );
    }

    #[test]
    fn ci_ends_with_the_full_test_run_after_the_checks() {
        let steps = ci_steps("/tmp/scratch");
        assert_eq!(steps[0].args, ["fmt", "--check"]);
        let doc = steps.iter().find(|s| s.args[0] == "doc").unwrap();
        assert_eq!(doc.env, [("RUSTDOCFLAGS", "-D warnings")]);
        assert_eq!(steps.last().unwrap().args, ["test"]);
        assert_eq!(steps.last().unwrap().toolchain, None);
    }

    #[test]
    fn ci_builds_the_fuzz_targets_on_nightly_then_runs_each_once() {
        let steps = ci_steps("/tmp/scratch");
        let fuzz: Vec<&Step> = steps.iter().filter(|s| s.args[0] == "fuzz").collect();
        assert_eq!(fuzz.len(), 1 + fuzz::TARGETS.len());
        assert_eq!(fuzz[0].args[..2], ["fuzz", "build"]);
        assert!(fuzz.iter().all(|s| s.toolchain == Some("nightly")));
        for (step, target) in fuzz[1..].iter().zip(fuzz::TARGETS) {
            assert_eq!(step.args[..2], ["fuzz", "run"]);
            assert!(step.args.contains(&target.name.to_string()));
            assert!(step.args.contains(&format!("/tmp/scratch/{}", target.name)));
        }
    }

    #[test]
    fn exit_codes_pass_through_and_signals_read_as_a_shell_reads_them() {
        assert_eq!(exit_code(ExitStatus::from_raw(101 << 8)), 101);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }

    #[test]
    fn the_usage_names_every_override_the_setup_honors() {
        for name in [
            "PUBSUB_EMULATOR_HOST",
            "LEASEHOLD_PUBSUB_EMULATOR",
            "SPANNER_EMULATOR_HOST",
            "LEASEHOLD_SPANNER_EMULATOR",
            "DATABASE_URL",
            "LEASEHOLD_POSTGRES_BIN",
            setup::NO_INSTALL_ENV,
        ] {
            assert!(USAGE.contains(name), "{name}");
        }
    }
}
