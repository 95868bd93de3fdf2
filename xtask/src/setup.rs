//! `cargo xtask setup`: every part the tests need is looked for; the missing ones are installed
//! with apt-get when this process can, and otherwise the run stops, saying exactly what to run.
//! Nothing is skipped silently: a part that is neither found nor installed fails the setup.

use crate::parts::{Machine, Part, Probe, apt_lines};

/// Set (to anything but empty or `0`): install nothing, only check and say what to run, as a
/// machine without root would.
pub const NO_INSTALL_ENV: &str = "XTASK_NO_INSTALL";

/// What installs packages.
pub trait Installer {
    /// Runs `apt-get` with `args`; whether it exited 0.
    fn apt_get(&mut self, args: &[&str]) -> bool;
    /// Runs `cargo` with `args` (`install ...`); whether it exited 0.
    fn cargo_install(&mut self, args: &[&str]) -> bool;
}

/// Why this process does not install what is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoInstall {
    /// `XTASK_NO_INSTALL` is set.
    Disabled,
    /// `apt-get` is not on `PATH`.
    NoAptGet,
    /// Not root, so apt-get would be refused.
    NotRoot,
}

impl NoInstall {
    fn reason(self) -> &'static str {
        match self {
            NoInstall::Disabled => "XTASK_NO_INSTALL is set",
            NoInstall::NoAptGet => "apt-get is not on this machine",
            NoInstall::NotRoot => "not running as root",
        }
    }
}

/// Whether this process may install with apt-get.
pub fn installer(machine: &impl Machine) -> Result<(), NoInstall> {
    if machine
        .var(NO_INSTALL_ENV)
        .is_some_and(|v| !v.is_empty() && v != "0")
    {
        Err(NoInstall::Disabled)
    } else if !machine.on_path("apt-get") {
        Err(NoInstall::NoAptGet)
    } else if !machine.is_root() {
        Err(NoInstall::NotRoot)
    } else {
        Ok(())
    }
}

/// Whether this process may install a crate with `cargo install`: unless `XTASK_NO_INSTALL` is
/// set (no root needed).
pub fn cargo_installer(machine: &impl Machine) -> Result<(), NoInstall> {
    match installer(machine) {
        Err(NoInstall::Disabled) => Err(NoInstall::Disabled),
        _ => Ok(()),
    }
}

/// A part the tests need that is not there after the setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Missing, and not installed: why not.
    NotInstalled {
        /// The part.
        part: Part,
        /// Why it was not installed (the reason no install was tried, or what failed).
        why: String,
    },
    /// There, or overridden, but unusable as it is: what to change. Installing would not help.
    Unusable {
        /// The part.
        part: Part,
        /// What is wrong, and what to change.
        fix: String,
    },
}

/// Looks for every part and installs the missing ones when it can: `apt-get update` once,
/// before the first Debian package and only when one is needed, then one install per part
/// (`apt-get install`, or `cargo install` for a crate, which needs no root), each followed by a
/// second look. Returns where each part was found, or every problem left.
pub fn setup<M: Machine + Installer>(machine: &mut M) -> Result<Vec<(Part, String)>, Vec<Problem>> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let (mut from_debian, mut from_crates_io) = (Vec::new(), Vec::new());
    for part in Part::ALL {
        match part.probe(machine) {
            Probe::Found(at) => {
                println!("xtask: {}: found ({at})", part.name());
                found.push((part, at));
            }
            Probe::Unusable(fix) => problems.push(Problem::Unusable { part, fix }),
            Probe::Missing if part.installed_with_cargo() => from_crates_io.push(part),
            Probe::Missing => from_debian.push(part),
        }
    }
    let mut looked_again =
        |machine: &mut M, part: Part, ran: bool, command: String| match part.probe(machine) {
            Probe::Found(at) => {
                println!("xtask: {}: installed ({at})", part.name());
                found.push((part, at));
            }
            Probe::Unusable(fix) => problems.push(Problem::Unusable { part, fix }),
            Probe::Missing => problems.push(Problem::NotInstalled {
                part,
                why: if ran {
                    format!("`{command}` ran but {} is still not found", part.package())
                } else {
                    format!("`{command}` failed")
                },
            }),
        };
    let mut refused = Vec::new();
    if !from_debian.is_empty() {
        match installer(machine) {
            Err(no) => refused.extend(from_debian.iter().map(|&part| (part, no))),
            Ok(()) => {
                println!("xtask: apt-get update (once, before the first install)");
                if !machine.apt_get(&["update"]) {
                    // The lists already on the machine may still do: go on, and say so if an
                    // install then fails.
                    println!(
                        "xtask: apt-get update failed; trying the installs with the lists there are"
                    );
                }
                for part in from_debian {
                    println!(
                        "xtask: {} is missing ({}): installing {}'s package {}",
                        part.name(),
                        part.needed_by(),
                        part.repository().unwrap_or("Debian"),
                        part.package()
                    );
                    let args = part.install_args();
                    println!("xtask: + apt-get {}", args.join(" "));
                    let ran = machine.apt_get(&args);
                    looked_again(machine, part, ran, format!("apt-get {}", args.join(" ")));
                }
            }
        }
    }
    for part in from_crates_io {
        if let Err(no) = cargo_installer(machine) {
            refused.push((part, no));
            continue;
        }
        println!(
            "xtask: {} is missing ({}): installing the crate {} from crates.io",
            part.name(),
            part.needed_by(),
            part.package()
        );
        let args = part.cargo_install_args();
        println!("xtask: + cargo {}", args.join(" "));
        let ran = machine.cargo_install(&args);
        looked_again(machine, part, ran, format!("cargo {}", args.join(" ")));
    }
    problems.extend(refused.into_iter().map(|(part, no)| Problem::NotInstalled {
        part,
        why: no.reason().to_string(),
    }));
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    }
}

/// What to tell someone whose setup left `problems`: each part and why the tests need it, the
/// apt-get lines to run (with `sudo` when not root), the settings that stand in for a part,
/// and that no test was run.
pub fn report(problems: &[Problem], apt: bool, sudo: bool) -> String {
    let mut text = String::from("xtask: cannot run the tests:\n");
    let mut to_install = Vec::new();
    for problem in problems {
        match problem {
            Problem::NotInstalled { part, why } => {
                text += &format!(
                    "  {} is missing ({}); not installed: {why}.\n",
                    part.name(),
                    part.needed_by()
                );
                to_install.push(*part);
            }
            Problem::Unusable { part, fix } => text += &format!("  {}: {fix}.\n", part.name()),
        }
    }
    let (crates, to_install): (Vec<Part>, Vec<Part>) = to_install
        .into_iter()
        .partition(|p| p.installed_with_cargo());
    for part in &crates {
        text += &format!("Run:\n    cargo {}\n", part.cargo_install_args().join(" "));
    }
    if !to_install.is_empty() {
        if apt {
            text += "Run:\n";
            for line in apt_lines(&to_install, sudo) {
                text += &format!("    {line}\n");
            }
        } else {
            text += "Install these Debian packages (or your system's equivalent):\n";
            for part in &to_install {
                let recommends = if part.with_recommends() {
                    ""
                } else {
                    " (without its recommends)"
                };
                text += &format!("    {}{recommends}\n", part.package());
            }
        }
        for part in &to_install {
            if let Some(repository) = part.repository() {
                text += &format!(
                    "  ({} comes from {repository}: add it to apt's sources first.)\n",
                    part.package()
                );
            }
        }
        let instead: Vec<_> = to_install
            .iter()
            .filter_map(|p| Some((p, p.instead()?)))
            .collect();
        if !instead.is_empty() {
            text += "Or, instead of installing:\n";
            for (part, how) in instead {
                text += &format!("    {}: {how}\n", part.name());
            }
        }
    }
    text += "Then run `cargo xtask test` again. No test was run.\n";
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::fake::Fake;

    /// A fake machine whose apt-get records its calls and, on an install, puts in the files
    /// (or running programs) the package brings.
    struct Apt {
        machine: Fake,
        calls: Vec<String>,
        broken: Vec<&'static str>,
    }

    impl Machine for Apt {
        fn var(&self, name: &str) -> Option<String> {
            self.machine.var(name)
        }
        fn is_file(&self, path: &std::path::Path) -> bool {
            self.machine.is_file(path)
        }
        fn real_path(&self, path: &std::path::Path) -> Option<std::path::PathBuf> {
            self.machine.real_path(path)
        }
        fn runs(&self, program: &str) -> bool {
            self.machine.runs(program)
        }
        fn path_dirs(&self) -> Vec<std::path::PathBuf> {
            self.machine.path_dirs()
        }
        fn dir_names(&self, dir: &std::path::Path) -> Vec<String> {
            self.machine.dir_names(dir)
        }
        fn is_root(&self) -> bool {
            self.machine.is_root()
        }
        fn has_user(&self, name: &str) -> bool {
            self.machine.has_user(name)
        }
        fn has_toolchain(&self, name: &str) -> bool {
            self.machine.has_toolchain(name)
        }
    }

    impl Installer for Apt {
        fn cargo_install(&mut self, args: &[&str]) -> bool {
            self.calls.push(format!("cargo {}", args.join(" ")));
            let package = *args.last().unwrap();
            if self.broken.contains(&package) {
                return false;
            }
            self.machine.running.insert("cargo-fuzz");
            true
        }

        fn apt_get(&mut self, args: &[&str]) -> bool {
            self.calls.push(args.join(" "));
            let package = *args.last().unwrap();
            if self.broken.contains(&package) {
                return false;
            }
            match package {
                "chromium" => self.machine.running.extend(["chromium"]),
                "prometheus" => self.machine.running.extend(["promtool", "prometheus"]),
                "postgresql-15" => {
                    self.machine = std::mem::take(&mut self.machine).with_files(&[
                        "/usr/lib/postgresql/15/bin/initdb",
                        "/usr/lib/postgresql/15/bin/postgres",
                        "/usr/lib/postgresql/15/bin/pg_isready",
                    ]);
                    self.machine.users.insert("postgres");
                }
                _ => {}
            }
            true
        }
    }

    fn fresh_root_machine() -> Apt {
        let mut machine = Fake::default().with_files(&["/usr/bin/apt-get"]);
        machine.path = vec!["/usr/bin".into()];
        machine.root = true;
        machine.toolchains.insert("nightly");
        // The emulators are there: their packages come from Google's repository.
        machine
            .vars
            .insert("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085");
        machine
            .vars
            .insert("SPANNER_EMULATOR_HOST", "127.0.0.1:9010");
        Apt {
            machine,
            calls: Vec::new(),
            broken: Vec::new(),
        }
    }

    /// `apt` with every part a Debian package brings already there (PostgreSQL through
    /// `DATABASE_URL`).
    fn with_debians_parts(mut apt: Apt) -> Apt {
        apt.machine
            .running
            .extend(["chromium", "promtool", "prometheus"]);
        apt.machine.vars.insert("DATABASE_URL", "postgres://db/t");
        apt
    }

    #[test]
    fn a_fresh_machine_is_updated_once_then_each_missing_package_installed() {
        let mut apt = fresh_root_machine();
        let found = setup(&mut apt).expect("set up");
        assert_eq!(
            apt.calls,
            [
                "update",
                "install -y chromium",
                "install -y --no-install-recommends prometheus",
                "install -y postgresql-15",
                "cargo install --locked cargo-fuzz",
            ]
        );
        assert_eq!(found.len(), Part::ALL.len());
    }

    #[test]
    fn nothing_missing_means_no_apt_get_at_all() {
        let mut apt = fresh_root_machine();
        apt.machine
            .running
            .extend(["chromium", "promtool", "prometheus", "cargo-fuzz"]);
        apt.machine.vars.insert("DATABASE_URL", "postgres://db/t");
        setup(&mut apt).expect("set up");
        assert!(apt.calls.is_empty(), "{:?}", apt.calls);
    }

    #[test]
    fn a_failed_install_is_a_problem_and_the_others_still_install() {
        let mut apt = fresh_root_machine();
        apt.broken.push("chromium");
        let problems = setup(&mut apt).unwrap_err();
        assert_eq!(
            problems,
            [Problem::NotInstalled {
                part: Part::Chromium,
                why: "`apt-get install -y chromium` failed".into()
            }]
        );
        assert_eq!(apt.calls.len(), 5, "{:?}", apt.calls);
    }

    #[test]
    fn without_root_nothing_is_installed_and_every_missing_part_is_reported() {
        let mut apt = fresh_root_machine();
        apt.machine.root = false;
        let problems = setup(&mut apt).unwrap_err();
        assert_eq!(
            apt.calls,
            ["cargo install --locked cargo-fuzz"],
            "a crate needs no root"
        );
        assert_eq!(problems.len(), 3);
        assert!(problems.iter().all(
            |p| matches!(p, Problem::NotInstalled { why, .. } if why == "not running as root")
        ));
    }

    #[test]
    fn no_install_is_honored_even_as_root_and_apt_get_missing_is_said() {
        let mut apt = fresh_root_machine();
        apt.machine.vars.insert(NO_INSTALL_ENV, "1");
        assert_eq!(installer(&apt), Err(NoInstall::Disabled));
        apt.machine.vars.insert(NO_INSTALL_ENV, "0");
        assert_eq!(installer(&apt), Ok(()));
        apt.machine.path.clear();
        assert_eq!(installer(&apt), Err(NoInstall::NoAptGet));
    }

    #[test]
    fn the_report_says_what_to_run_with_sudo_and_what_to_set_instead() {
        let problems = [
            Problem::NotInstalled {
                part: Part::Emulator,
                why: "not running as root".into(),
            },
            Problem::NotInstalled {
                part: Part::Prometheus,
                why: "not running as root".into(),
            },
            Problem::Unusable {
                part: Part::Postgres,
                fix: "LEASEHOLD_POSTGRES_BIN=\"/x\" is wrong".into(),
            },
        ];
        let text = report(&problems, true, true);
        assert!(
            text.contains("Prometheus (promtool and prometheus) is missing (the alert rules"),
            "{text}"
        );
        assert!(text.contains("    sudo apt-get update\n"), "{text}");
        assert!(
            text.contains("    sudo apt-get install -y google-cloud-cli-pubsub-emulator\n"),
            "{text}"
        );
        assert!(
            text.contains("    sudo apt-get install -y --no-install-recommends prometheus\n"),
            "{text}"
        );
        assert!(text.contains("Google Cloud's apt repository"), "{text}");
        assert!(text.contains("PUBSUB_EMULATOR_HOST=host:port"), "{text}");
        assert!(
            text.contains("LEASEHOLD_POSTGRES_BIN=\"/x\" is wrong"),
            "{text}"
        );
        assert!(
            !text.contains("postgresql-15"),
            "an unusable part is not installed over: {text}"
        );
        assert!(text.ends_with("No test was run.\n"), "{text}");
    }

    #[test]
    fn a_missing_spanner_emulator_is_reported_with_its_package_and_what_to_set_instead() {
        let mut apt = with_debians_parts(fresh_root_machine());
        apt.machine.vars.remove("SPANNER_EMULATOR_HOST");
        apt.machine.running.insert("cargo-fuzz");
        apt.machine.root = false;
        let problems = setup(&mut apt).unwrap_err();
        assert_eq!(
            problems,
            [Problem::NotInstalled {
                part: Part::SpannerEmulator,
                why: "not running as root".into()
            }]
        );
        let text = report(&problems, true, true);
        assert!(
            text.contains("the Spanner emulator is missing (the Spanner store is tested"),
            "{text}"
        );
        assert!(
            text.contains("    sudo apt-get install -y google-cloud-cli-spanner-emulator\n"),
            "{text}"
        );
        assert!(
            text.contains("(google-cloud-cli-spanner-emulator comes from Google Cloud's apt"),
            "{text}"
        );
        assert!(text.contains("SPANNER_EMULATOR_HOST=host:port"), "{text}");
        assert!(text.contains("LEASEHOLD_SPANNER_EMULATOR"), "{text}");
    }

    #[test]
    fn without_apt_get_the_report_names_the_packages() {
        let problems = [Problem::NotInstalled {
            part: Part::Prometheus,
            why: "apt-get is not on this machine".into(),
        }];
        let text = report(&problems, false, false);
        assert!(!text.contains("apt-get install"), "{text}");
        assert!(
            text.contains("    prometheus (without its recommends)\n"),
            "{text}"
        );
    }

    #[test]
    fn cargo_fuzz_is_installed_with_cargo_unless_installing_is_off_and_the_report_says_how() {
        let mut apt = with_debians_parts(fresh_root_machine());
        setup(&mut apt).expect("set up");
        assert_eq!(apt.calls, ["cargo install --locked cargo-fuzz"]);

        let mut apt = with_debians_parts(fresh_root_machine());
        apt.machine.vars.insert(NO_INSTALL_ENV, "1");
        let problems = setup(&mut apt).unwrap_err();
        assert!(apt.calls.is_empty(), "{:?}", apt.calls);
        assert_eq!(
            problems,
            [Problem::NotInstalled {
                part: Part::CargoFuzz,
                why: "XTASK_NO_INSTALL is set".into()
            }]
        );
        let text = report(&problems, true, true);
        assert!(
            text.contains("cargo fuzz is missing (CI builds the fuzz targets"),
            "{text}"
        );
        assert!(
            text.contains("    cargo install --locked cargo-fuzz\n"),
            "{text}"
        );
        assert!(!text.contains("apt-get"), "{text}");

        apt.broken.push("cargo-fuzz");
        apt.machine.vars.remove(NO_INSTALL_ENV);
        let problems = setup(&mut apt).unwrap_err();
        assert_eq!(
            problems,
            [Problem::NotInstalled {
                part: Part::CargoFuzz,
                why: "`cargo install --locked cargo-fuzz` failed".into()
            }]
        );
    }
}
