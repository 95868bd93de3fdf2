//! What the tests need from the machine: each part, how it is found (with the same overrides
//! the tests honor), which Debian package (or, for `cargo fuzz`, which crate) brings it, and
//! what to tell someone who must install it by hand.
//!
//! Pure: the machine is read through [`Machine`], so these rules are tested with a fake. The
//! lookups copy the ones the tests make (`src/emulator.rs`, `spanner/src/local.rs`,
//! `postgres/src/local.rs`, `test-support/src/tools.rs`, `service/tests/operator/`): a part
//! found here is a part the tests find.

use std::path::{Path, PathBuf};

/// Where Debian's `google-cloud-cli-pubsub-emulator` puts the launcher.
const DEBIAN_LAUNCHER: &str =
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";
/// Where Debian's `google-cloud-cli-spanner-emulator` puts the Spanner emulator's server.
const DEBIAN_SPANNER_EMULATOR: &str =
    "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main";
/// Where Debian's PostgreSQL packages put each version's programs.
const DEBIAN_POSTGRES_ROOT: &str = "/usr/lib/postgresql";
/// The programs the tests' throwaway PostgreSQL cluster runs.
const POSTGRES_PROGRAMS: [&str; 3] = ["initdb", "postgres", "pg_isready"];

/// What a probe reads from the machine.
pub trait Machine {
    /// An environment variable, `None` when unset.
    fn var(&self, name: &str) -> Option<String>;
    /// Whether `path` is a file.
    fn is_file(&self, path: &Path) -> bool;
    /// `path` with every symbolic link resolved, `None` when it does not exist.
    fn real_path(&self, path: &Path) -> Option<PathBuf>;
    /// Whether `program --version` runs and exits 0 (a bare name is looked up on `PATH`).
    fn runs(&self, program: &str) -> bool;
    /// The directories on `PATH`, in order.
    fn path_dirs(&self) -> Vec<PathBuf>;
    /// The names in a directory; empty when it cannot be read.
    fn dir_names(&self, dir: &Path) -> Vec<String>;
    /// Whether this process runs as root.
    fn is_root(&self) -> bool;
    /// Whether rustup has the toolchain `name` (`nightly`).
    fn has_toolchain(&self, name: &str) -> bool;
    /// Whether a user account named `name` exists.
    fn has_user(&self, name: &str) -> bool;

    /// Whether `name` is a file in a directory on `PATH`.
    fn on_path(&self, name: &str) -> bool {
        self.path_dirs().iter().any(|d| self.is_file(&d.join(name)))
    }
}

/// One thing the tests need from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Google's Pub/Sub emulator: the integration tests run against it.
    Emulator,
    /// Google's Spanner emulator: the Spanner store is tested against it.
    SpannerEmulator,
    /// Headless Chromium: the service's status page is tested in it.
    Chromium,
    /// `promtool` and `prometheus`: the alert rules are tested, and the service scraped, by them.
    Prometheus,
    /// PostgreSQL's programs: the transactional handlers run on a throwaway cluster.
    Postgres,
    /// `cargo fuzz` (the crate `cargo-fuzz`), on the nightly toolchain: CI builds and runs the
    /// fuzz targets with it.
    CargoFuzz,
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// There: where it was found, or the override that stands in for it.
    Found(String),
    /// Not on this machine: installing the part's package brings it.
    Missing,
    /// Something installing cannot fix (an override that points nowhere): what to change.
    Unusable(String),
}

impl Part {
    /// Every part, in the order they are checked and installed.
    pub const ALL: [Part; 6] = [
        Part::Emulator,
        Part::SpannerEmulator,
        Part::Chromium,
        Part::Prometheus,
        Part::Postgres,
        Part::CargoFuzz,
    ];

    /// What it is called in messages.
    pub fn name(self) -> &'static str {
        match self {
            Part::Emulator => "the Pub/Sub emulator",
            Part::SpannerEmulator => "the Spanner emulator",
            Part::Chromium => "Chromium",
            Part::Prometheus => "Prometheus (promtool and prometheus)",
            Part::Postgres => "PostgreSQL",
            Part::CargoFuzz => "cargo fuzz",
        }
    }

    /// Which tests need it.
    pub fn needed_by(self) -> &'static str {
        match self {
            Part::Emulator => "the integration tests run against Google's Pub/Sub emulator",
            Part::SpannerEmulator => {
                "the Spanner store is tested against Google's Spanner emulator"
            }
            Part::Chromium => "the service's status page is tested in headless Chromium",
            Part::Prometheus => {
                "the alert rules are tested with promtool, and a real Prometheus scrapes the service"
            }
            Part::Postgres => "transactional handlers are tested on a throwaway PostgreSQL cluster",
            Part::CargoFuzz => "CI builds the fuzz targets (fuzz/) with libFuzzer and runs them",
        }
    }

    /// The Debian package that brings it (for `cargo fuzz`, the crate).
    pub fn package(self) -> &'static str {
        match self {
            Part::Emulator => "google-cloud-cli-pubsub-emulator",
            Part::SpannerEmulator => "google-cloud-cli-spanner-emulator",
            Part::Chromium => "chromium",
            // Installed without its recommends: the tests start their own server, and the
            // recommended exporters would run as system services.
            Part::Prometheus => "prometheus",
            Part::Postgres => "postgresql-15",
            Part::CargoFuzz => "cargo-fuzz",
        }
    }

    /// Whether it is a crate that `cargo install` brings, rather than a Debian package: no root
    /// needed, and no apt-get.
    pub fn installed_with_cargo(self) -> bool {
        self == Part::CargoFuzz
    }

    /// The `cargo install` arguments that install it, for a part
    /// [installed with cargo](Self::installed_with_cargo).
    pub fn cargo_install_args(self) -> Vec<&'static str> {
        vec!["install", "--locked", self.package()]
    }

    /// Whether its package is installed with its recommended packages.
    pub fn with_recommends(self) -> bool {
        self != Part::Prometheus
    }

    /// Where its package comes from, when not from Debian itself.
    pub fn repository(self) -> Option<&'static str> {
        matches!(self, Part::Emulator | Part::SpannerEmulator)
            .then_some("Google Cloud's apt repository")
    }

    /// What to set instead of installing it, when the tests take one that runs elsewhere.
    pub fn instead(self) -> Option<&'static str> {
        match self {
            Part::Emulator => Some(
                "set PUBSUB_EMULATOR_HOST=host:port to an emulator that is already running, or \
                 LEASEHOLD_PUBSUB_EMULATOR to its cloud-pubsub-emulator launcher",
            ),
            Part::SpannerEmulator => Some(
                "set SPANNER_EMULATOR_HOST=host:port to an emulator that is already running, or \
                 LEASEHOLD_SPANNER_EMULATOR to its emulator_main",
            ),
            Part::Postgres => Some(
                "set DATABASE_URL=postgres://user@host:port/db to a server the tests may use, or \
                 LEASEHOLD_POSTGRES_BIN to the directory holding initdb, postgres and pg_isready",
            ),
            Part::Chromium | Part::Prometheus | Part::CargoFuzz => None,
        }
    }

    /// The `apt-get` arguments that install it.
    pub fn install_args(self) -> Vec<&'static str> {
        let mut args = vec!["install", "-y"];
        if !self.with_recommends() {
            args.push("--no-install-recommends");
        }
        args.push(self.package());
        args
    }

    /// Whether it is on `machine`, as the tests would find it.
    pub fn probe(self, machine: &impl Machine) -> Probe {
        match self {
            Part::Emulator => probe_emulator(machine),
            Part::SpannerEmulator => probe_spanner_emulator(machine),
            Part::Chromium => first_that_runs(
                machine,
                &["chromium", "/usr/bin/chromium", "chromium-browser"],
            ),
            Part::Prometheus => {
                let promtool = first_that_runs(machine, &["promtool", "/usr/bin/promtool"]);
                let server = first_that_runs(machine, &["prometheus", "/usr/bin/prometheus"]);
                match (promtool, server) {
                    (Probe::Found(a), Probe::Found(b)) => Probe::Found(format!("{a}, {b}")),
                    _ => Probe::Missing,
                }
            }
            Part::Postgres => probe_postgres(machine),
            Part::CargoFuzz => {
                if !machine.has_toolchain("nightly") {
                    return Probe::Unusable(
                        "cargo fuzz builds with the nightly toolchain, which rustup does not \
                         have: run `rustup toolchain install nightly`"
                            .to_string(),
                    );
                }
                first_that_runs(machine, &["cargo-fuzz"])
            }
        }
    }
}

fn first_that_runs(machine: &impl Machine, candidates: &[&str]) -> Probe {
    candidates
        .iter()
        .find(|c| machine.runs(c))
        .map_or(Probe::Missing, |c| Probe::Found(c.to_string()))
}

/// As `src/emulator.rs`: `PUBSUB_EMULATOR_HOST` (not blank), else `LEASEHOLD_PUBSUB_EMULATOR`
/// (when set, it alone is looked at), else `cloud-pubsub-emulator` on `PATH`, else Debian's.
fn probe_emulator(machine: &impl Machine) -> Probe {
    if let Some(host) = machine
        .var("PUBSUB_EMULATOR_HOST")
        .filter(|h| !h.trim().is_empty())
    {
        return Probe::Found(format!("PUBSUB_EMULATOR_HOST={}", host.trim()));
    }
    if let Some(launcher) = machine.var("LEASEHOLD_PUBSUB_EMULATOR") {
        return if machine.is_file(Path::new(&launcher)) {
            Probe::Found(format!("LEASEHOLD_PUBSUB_EMULATOR={launcher}"))
        } else {
            Probe::Unusable(format!(
                "LEASEHOLD_PUBSUB_EMULATOR={launcher:?} is not a file: point it at the \
                 cloud-pubsub-emulator launcher, or unset it"
            ))
        };
    }
    if let Some(dir) = machine
        .path_dirs()
        .into_iter()
        .find(|d| machine.is_file(&d.join("cloud-pubsub-emulator")))
    {
        return Probe::Found(dir.join("cloud-pubsub-emulator").display().to_string());
    }
    if machine.is_file(Path::new(DEBIAN_LAUNCHER)) {
        return Probe::Found(DEBIAN_LAUNCHER.to_string());
    }
    Probe::Missing
}

/// As `spanner/src/local.rs`: `SPANNER_EMULATOR_HOST` (not blank), else
/// `LEASEHOLD_SPANNER_EMULATOR` (when set, it alone is looked at), else Debian's
/// `emulator_main`, else `cloud_spanner_emulator/emulator_main` beside the real path of a
/// `gcloud` on `PATH` (its SDK's `bin`).
fn probe_spanner_emulator(machine: &impl Machine) -> Probe {
    if let Some(host) = machine
        .var("SPANNER_EMULATOR_HOST")
        .filter(|h| !h.trim().is_empty())
    {
        return Probe::Found(format!("SPANNER_EMULATOR_HOST={}", host.trim()));
    }
    if let Some(server) = machine.var("LEASEHOLD_SPANNER_EMULATOR") {
        return if machine.is_file(Path::new(&server)) {
            Probe::Found(format!("LEASEHOLD_SPANNER_EMULATOR={server}"))
        } else {
            Probe::Unusable(format!(
                "LEASEHOLD_SPANNER_EMULATOR={server:?} is not a file: point it at the Spanner \
                 emulator's emulator_main, or unset it"
            ))
        };
    }
    if machine.is_file(Path::new(DEBIAN_SPANNER_EMULATOR)) {
        return Probe::Found(DEBIAN_SPANNER_EMULATOR.to_string());
    }
    machine
        .path_dirs()
        .into_iter()
        .find_map(|dir| {
            let gcloud = machine.real_path(&dir.join("gcloud"))?;
            let server = gcloud
                .parent()?
                .join("cloud_spanner_emulator")
                .join("emulator_main");
            machine.is_file(&server).then_some(server)
        })
        .map_or(Probe::Missing, |server| {
            Probe::Found(server.display().to_string())
        })
}

/// As `postgres/src/local.rs`: `DATABASE_URL` (not blank), else `LEASEHOLD_POSTGRES_BIN` (when
/// set, it alone is looked at), else the newest Debian version, else a directory on `PATH`; run
/// as root, the cluster belongs to the `postgres` user, which must exist.
fn probe_postgres(machine: &impl Machine) -> Probe {
    if machine
        .var("DATABASE_URL")
        .is_some_and(|u| !u.trim().is_empty())
    {
        // Not echoed: the URL may hold a password.
        return Probe::Found("DATABASE_URL".to_string());
    }
    let complete = |dir: &Path| {
        POSTGRES_PROGRAMS
            .iter()
            .all(|p| machine.is_file(&dir.join(p)))
    };
    let bin = if let Some(dir) = machine.var("LEASEHOLD_POSTGRES_BIN") {
        if !complete(Path::new(&dir)) {
            return Probe::Unusable(format!(
                "LEASEHOLD_POSTGRES_BIN={dir:?} does not hold initdb, postgres and pg_isready: \
                 point it at the directory that does, or unset it"
            ));
        }
        PathBuf::from(dir)
    } else {
        let root = Path::new(DEBIAN_POSTGRES_ROOT);
        let debian = machine
            .dir_names(root)
            .iter()
            .filter_map(|name| Some((name.parse::<u32>().ok()?, root.join(name).join("bin"))))
            .filter(|(_, bin)| complete(bin))
            .max_by_key(|(version, _)| *version)
            .map(|(_, bin)| bin);
        match debian.or_else(|| machine.path_dirs().into_iter().find(|d| complete(d))) {
            Some(bin) => bin,
            None => return Probe::Missing,
        }
    };
    if machine.is_root() && !machine.has_user("postgres") {
        return Probe::Unusable(format!(
            "PostgreSQL ({}) will not run as root, and there is no `postgres` user to run it as: \
             create one (Debian's postgresql-common package does), run as another user, or set \
             DATABASE_URL",
            bin.display()
        ));
    }
    Probe::Found(bin.display().to_string())
}

/// The `apt-get` command lines that install `parts` (those from Debian), for someone to run by
/// hand: `apt-get update`, then one line for the packages installed with their recommends and
/// one for those without. `sudo` prefixes each line.
pub fn apt_lines(parts: &[Part], sudo: bool) -> Vec<String> {
    if parts.is_empty() {
        return Vec::new();
    }
    let parts: Vec<Part> = parts
        .iter()
        .copied()
        .filter(|p| !p.installed_with_cargo())
        .collect();
    if parts.is_empty() {
        return Vec::new();
    }
    let prefix = if sudo { "sudo apt-get" } else { "apt-get" };
    let packages = |with_recommends: bool| {
        parts
            .iter()
            .filter(|p| p.with_recommends() == with_recommends)
            .map(|p| p.package())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut lines = vec![format!("{prefix} update")];
    let with = packages(true);
    if !with.is_empty() {
        lines.push(format!("{prefix} install -y {with}"));
    }
    let without = packages(false);
    if !without.is_empty() {
        lines.push(format!(
            "{prefix} install -y --no-install-recommends {without}"
        ));
    }
    lines
}

#[cfg(test)]
pub mod fake {
    //! A machine described by hand, for the tests of the rules.

    use super::Machine;
    use std::collections::{HashMap, HashSet};
    use std::path::{Path, PathBuf};

    /// A machine described by hand.
    #[derive(Default)]
    pub struct Fake {
        pub vars: HashMap<&'static str, &'static str>,
        pub files: HashSet<PathBuf>,
        /// Symbolic links: each one's real path.
        pub links: HashMap<PathBuf, PathBuf>,
        pub running: HashSet<&'static str>,
        pub path: Vec<PathBuf>,
        pub root: bool,
        pub users: HashSet<&'static str>,
        pub toolchains: HashSet<&'static str>,
    }

    impl Fake {
        pub fn with_files(mut self, files: &[&str]) -> Self {
            self.files.extend(files.iter().map(PathBuf::from));
            self
        }
    }

    impl Machine for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).map(|v| v.to_string())
        }
        fn is_file(&self, path: &Path) -> bool {
            self.files.contains(path)
        }
        fn real_path(&self, path: &Path) -> Option<PathBuf> {
            match self.links.get(path) {
                Some(target) => self.real_path(target),
                None => self.is_file(path).then(|| path.to_path_buf()),
            }
        }
        fn runs(&self, program: &str) -> bool {
            self.running.contains(program)
        }
        fn path_dirs(&self) -> Vec<PathBuf> {
            self.path.clone()
        }
        fn dir_names(&self, dir: &Path) -> Vec<String> {
            let mut names: Vec<String> = self
                .files
                .iter()
                .filter_map(|f| f.strip_prefix(dir).ok()?.iter().next())
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            names.sort();
            names.dedup();
            names
        }
        fn is_root(&self) -> bool {
            self.root
        }
        fn has_user(&self, name: &str) -> bool {
            self.users.contains(name)
        }
        fn has_toolchain(&self, name: &str) -> bool {
            self.toolchains.contains(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::Fake;
    use super::*;

    fn postgres_15() -> Fake {
        Fake::default().with_files(&[
            "/usr/lib/postgresql/15/bin/initdb",
            "/usr/lib/postgresql/15/bin/postgres",
            "/usr/lib/postgresql/15/bin/pg_isready",
        ])
    }

    #[test]
    fn a_fresh_machine_misses_every_part() {
        let mut machine = Fake::default();
        machine.toolchains.insert("nightly");
        for part in Part::ALL {
            assert_eq!(part.probe(&machine), Probe::Missing, "{part:?}");
        }
    }

    #[test]
    fn the_emulator_host_stands_in_for_the_launcher_but_a_blank_one_does_not() {
        let mut machine = Fake::default();
        machine
            .vars
            .insert("PUBSUB_EMULATOR_HOST", " 127.0.0.1:8085 ");
        assert_eq!(
            Part::Emulator.probe(&machine),
            Probe::Found("PUBSUB_EMULATOR_HOST=127.0.0.1:8085".into())
        );
        machine.vars.insert("PUBSUB_EMULATOR_HOST", "  ");
        assert_eq!(Part::Emulator.probe(&machine), Probe::Missing);
    }

    #[test]
    fn the_emulator_is_found_on_path_or_where_debian_puts_it() {
        let mut machine = Fake::default().with_files(&["/opt/gcloud/bin/cloud-pubsub-emulator"]);
        machine.path = vec!["/usr/bin".into(), "/opt/gcloud/bin".into()];
        assert_eq!(
            Part::Emulator.probe(&machine),
            Probe::Found("/opt/gcloud/bin/cloud-pubsub-emulator".into())
        );
        let machine = Fake::default().with_files(&[DEBIAN_LAUNCHER]);
        assert_eq!(
            Part::Emulator.probe(&machine),
            Probe::Found(DEBIAN_LAUNCHER.into())
        );
    }

    #[test]
    fn a_launcher_override_that_points_nowhere_is_reported_not_installed_over() {
        // The tests look only at the override when it is set, so installing would not help.
        let mut machine = Fake::default().with_files(&[DEBIAN_LAUNCHER]);
        machine
            .vars
            .insert("LEASEHOLD_PUBSUB_EMULATOR", "/nowhere/launcher");
        let Probe::Unusable(why) = Part::Emulator.probe(&machine) else {
            panic!("not unusable");
        };
        assert!(why.contains("/nowhere/launcher"), "{why}");
        assert!(why.contains("unset it"), "{why}");
    }

    #[test]
    fn the_spanner_emulator_host_stands_in_for_the_server_but_a_blank_one_does_not() {
        let mut machine = Fake::default();
        machine
            .vars
            .insert("SPANNER_EMULATOR_HOST", " 127.0.0.1:9010 ");
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found("SPANNER_EMULATOR_HOST=127.0.0.1:9010".into())
        );
        machine.vars.insert("SPANNER_EMULATOR_HOST", "  ");
        assert_eq!(Part::SpannerEmulator.probe(&machine), Probe::Missing);
    }

    #[test]
    fn the_spanner_emulator_is_found_where_debian_puts_it_before_beside_gcloud() {
        let machine = Fake::default().with_files(&[DEBIAN_SPANNER_EMULATOR]);
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found(DEBIAN_SPANNER_EMULATOR.into())
        );
        // Debian's path wins over a gcloud on PATH that has one beside it too.
        let mut machine = machine.with_files(&[
            "/opt/sdk/bin/gcloud",
            "/opt/sdk/bin/cloud_spanner_emulator/emulator_main",
        ]);
        machine.path = vec!["/opt/sdk/bin".into()];
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found(DEBIAN_SPANNER_EMULATOR.into())
        );
    }

    #[test]
    fn the_spanner_emulator_is_found_beside_the_real_path_of_gcloud() {
        // gcloud on PATH is a link into the SDK: the server is beside what it points at, not
        // beside the link.
        let mut machine = Fake::default().with_files(&[
            "/opt/sdk/bin/gcloud",
            "/opt/sdk/bin/cloud_spanner_emulator/emulator_main",
        ]);
        machine
            .links
            .insert("/usr/local/bin/gcloud".into(), "/opt/sdk/bin/gcloud".into());
        machine.path = vec!["/usr/bin".into(), "/usr/local/bin".into()];
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found("/opt/sdk/bin/cloud_spanner_emulator/emulator_main".into())
        );
        // A gcloud without the server beside it is passed over for the next one on PATH.
        let mut machine = Fake::default().with_files(&[
            "/usr/bin/gcloud",
            "/opt/sdk/bin/gcloud",
            "/opt/sdk/bin/cloud_spanner_emulator/emulator_main",
        ]);
        machine.path = vec!["/usr/bin".into(), "/opt/sdk/bin".into()];
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found("/opt/sdk/bin/cloud_spanner_emulator/emulator_main".into())
        );
    }

    #[test]
    fn the_spanner_emulator_is_found_through_its_override() {
        let mut machine = Fake::default().with_files(&["/opt/spanner/emulator_main"]);
        machine
            .vars
            .insert("LEASEHOLD_SPANNER_EMULATOR", "/opt/spanner/emulator_main");
        assert_eq!(
            Part::SpannerEmulator.probe(&machine),
            Probe::Found("LEASEHOLD_SPANNER_EMULATOR=/opt/spanner/emulator_main".into())
        );
    }

    #[test]
    fn a_spanner_emulator_override_that_points_nowhere_is_reported_not_installed_over() {
        // The tests look only at the override when it is set, so installing would not help.
        let mut machine = Fake::default().with_files(&[DEBIAN_SPANNER_EMULATOR]);
        machine
            .vars
            .insert("LEASEHOLD_SPANNER_EMULATOR", "/nowhere/emulator_main");
        let Probe::Unusable(why) = Part::SpannerEmulator.probe(&machine) else {
            panic!("not unusable");
        };
        assert!(why.contains("/nowhere/emulator_main"), "{why}");
        assert!(why.contains("unset it"), "{why}");
    }

    #[test]
    fn a_missing_spanner_emulator_is_installed_from_its_debian_package() {
        let mut machine = Fake::default().with_files(&["/usr/bin/gcloud"]);
        machine.path = vec!["/usr/bin".into()];
        assert_eq!(Part::SpannerEmulator.probe(&machine), Probe::Missing);
        assert_eq!(
            Part::SpannerEmulator.install_args(),
            ["install", "-y", "google-cloud-cli-spanner-emulator"]
        );
        assert_eq!(
            apt_lines(&[Part::Emulator, Part::SpannerEmulator], false),
            [
                "apt-get update",
                "apt-get install -y google-cloud-cli-pubsub-emulator \
                 google-cloud-cli-spanner-emulator",
            ]
        );
    }

    #[test]
    fn chromium_is_the_first_candidate_that_runs() {
        let mut machine = Fake::default();
        machine.running.insert("chromium-browser");
        assert_eq!(
            Part::Chromium.probe(&machine),
            Probe::Found("chromium-browser".into())
        );
    }

    #[test]
    fn prometheus_needs_both_promtool_and_the_server() {
        let mut machine = Fake::default();
        machine.running.insert("promtool");
        assert_eq!(Part::Prometheus.probe(&machine), Probe::Missing);
        machine.running.insert("/usr/bin/prometheus");
        assert_eq!(
            Part::Prometheus.probe(&machine),
            Probe::Found("promtool, /usr/bin/prometheus".into())
        );
    }

    #[test]
    fn postgres_is_the_newest_complete_debian_version() {
        let machine = postgres_15().with_files(&[
            "/usr/lib/postgresql/16/bin/initdb", // no postgres, no pg_isready: incomplete
            "/usr/lib/postgresql/13/bin/initdb",
            "/usr/lib/postgresql/13/bin/postgres",
            "/usr/lib/postgresql/13/bin/pg_isready",
        ]);
        assert_eq!(
            Part::Postgres.probe(&machine),
            Probe::Found("/usr/lib/postgresql/15/bin".into())
        );
    }

    #[test]
    fn postgres_as_root_needs_the_postgres_user() {
        let mut machine = postgres_15();
        machine.root = true;
        assert!(
            matches!(Part::Postgres.probe(&machine), Probe::Unusable(why) if why.contains("`postgres` user"))
        );
        machine.users.insert("postgres");
        assert!(matches!(Part::Postgres.probe(&machine), Probe::Found(_)));
    }

    #[test]
    fn a_database_url_stands_in_for_postgres_and_is_not_echoed() {
        let mut machine = Fake {
            root: true,
            ..Fake::default()
        };
        machine
            .vars
            .insert("DATABASE_URL", "postgres://u:secret@db:5432/t");
        assert_eq!(
            Part::Postgres.probe(&machine),
            Probe::Found("DATABASE_URL".into())
        );
    }

    #[test]
    fn a_postgres_bin_override_must_hold_every_program() {
        let mut machine = postgres_15().with_files(&["/opt/pg/initdb"]);
        machine.vars.insert("LEASEHOLD_POSTGRES_BIN", "/opt/pg");
        assert!(
            matches!(Part::Postgres.probe(&machine), Probe::Unusable(why) if why.contains("/opt/pg"))
        );
    }

    #[test]
    fn prometheus_alone_is_installed_without_recommends() {
        assert_eq!(
            Part::Prometheus.install_args(),
            ["install", "-y", "--no-install-recommends", "prometheus"]
        );
        assert_eq!(Part::Chromium.install_args(), ["install", "-y", "chromium"]);
    }

    #[test]
    fn what_to_run_by_hand_groups_packages_by_recommends() {
        assert_eq!(
            apt_lines(&[Part::Chromium, Part::Prometheus, Part::Postgres], true),
            [
                "sudo apt-get update",
                "sudo apt-get install -y chromium postgresql-15",
                "sudo apt-get install -y --no-install-recommends prometheus",
            ]
        );
        assert_eq!(
            apt_lines(&[Part::Prometheus], false),
            [
                "apt-get update",
                "apt-get install -y --no-install-recommends prometheus"
            ]
        );
        assert!(apt_lines(&[], true).is_empty());
    }

    #[test]
    fn only_the_emulators_come_from_outside_debian_and_only_services_can_be_pointed_at() {
        assert!(Part::Emulator.repository().is_some());
        assert!(Part::SpannerEmulator.repository().is_some());
        assert!(Part::ALL[2..].iter().all(|p| p.repository().is_none()));
        assert!(
            Part::Emulator
                .instead()
                .unwrap()
                .contains("PUBSUB_EMULATOR_HOST")
        );
        assert!(
            Part::SpannerEmulator
                .instead()
                .unwrap()
                .contains("SPANNER_EMULATOR_HOST")
        );
        assert!(Part::Postgres.instead().unwrap().contains("DATABASE_URL"));
        assert!(Part::Chromium.instead().is_none());
    }

    #[test]
    fn cargo_fuzz_is_a_crate_on_the_nightly_toolchain() {
        let mut machine = Fake::default();
        let Probe::Unusable(why) = Part::CargoFuzz.probe(&machine) else {
            panic!("without nightly, installing cargo-fuzz would not help");
        };
        assert!(why.contains("rustup toolchain install nightly"), "{why}");
        machine.toolchains.insert("nightly");
        assert_eq!(Part::CargoFuzz.probe(&machine), Probe::Missing);
        machine.running.insert("cargo-fuzz");
        assert_eq!(
            Part::CargoFuzz.probe(&machine),
            Probe::Found("cargo-fuzz".into())
        );
        assert!(Part::CargoFuzz.installed_with_cargo());
        assert_eq!(
            Part::CargoFuzz.cargo_install_args(),
            ["install", "--locked", "cargo-fuzz"]
        );
        assert!(
            apt_lines(&[Part::CargoFuzz], true).is_empty(),
            "no apt-get for a crate"
        );
        assert_eq!(
            apt_lines(&[Part::Chromium, Part::CargoFuzz], false),
            ["apt-get update", "apt-get install -y chromium"]
        );
    }
}
