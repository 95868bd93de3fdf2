//! The fuzz targets in CI (`fuzz/`, RELIABILITY.md): built once by `cargo fuzz` on the nightly
//! toolchain, then each run for a fixed number of inputs, starting from its corpus in the
//! repository. A crash, a panic, an input slower than [`TIMEOUT_SECS`] or an allocation out of
//! proportion to its input fails the step, and libFuzzer leaves the input in
//! `fuzz/artifacts/<target>/`.
//!
//! The build: `--dev` (no optimization), line tables only, no sanitizer. The targets reach most
//! of the workspace's dependencies (the push crate brings the runtime and Google's clients, the
//! service its configuration), all built again by the nightly compiler with libFuzzer's
//! instrumentation. On a clean target directory (2026-12-06) that build took 6.6 CPU-minutes;
//! with full debug information 8.0, optimized (`cargo fuzz`'s default) more than 12.5. Unoptimized,
//! the targets still run hundreds to thousands of inputs a second. The code under test is safe
//! Rust, which a sanitizer has little to add to; libFuzzer itself catches panics and hangs, and
//! `leasehold-fuzz`'s allocator outsized allocations.

/// One fuzz target and the inputs CI runs it for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Its name in `fuzz/Cargo.toml`; its corpus is `fuzz/corpus/<name>`.
    pub name: &'static str,
    /// How many inputs CI runs: about fifteen seconds of the unoptimized build each.
    pub runs: u32,
    /// The longest input libFuzzer makes for it.
    pub max_len: u32,
}

/// Every target, with its share of CI's minute.
pub const TARGETS: [Target; 4] = [
    Target {
        name: "envelope",
        runs: 40_000,
        max_len: 4096,
    },
    Target {
        name: "token",
        runs: 12_000,
        max_len: 4096,
    },
    Target {
        name: "subscription_path",
        runs: 12_000,
        max_len: 1024,
    },
    Target {
        name: "service_config",
        runs: 4_000,
        max_len: 8192,
    },
];

/// How long one input may take before libFuzzer reports it as a hang.
pub const TIMEOUT_SECS: u32 = 10;

/// What `cargo fuzz` builds with, the same for the build and every run (so a run builds
/// nothing).
const BUILD: [&str; 3] = ["--dev", "--sanitizer", "none"];

/// `cargo fuzz` arguments that build every target.
pub fn build() -> Vec<String> {
    let mut args = vec!["fuzz".to_string(), "build".to_string()];
    args.extend(BUILD.map(String::from));
    args
}

/// `cargo fuzz` arguments that run `target` over its corpus for its runs. New inputs go to a
/// directory under `scratch`, never to the repository's corpus.
pub fn run(target: &Target, scratch: &str) -> Vec<String> {
    let mut args = vec!["fuzz".to_string(), "run".to_string()];
    args.extend(BUILD.map(String::from));
    args.extend([
        target.name.to_string(),
        format!("{scratch}/{}", target.name),
        format!("fuzz/corpus/{}", target.name),
        "--".to_string(),
        format!("-runs={}", target.runs),
        format!("-max_len={}", target.max_len),
        format!("-timeout={TIMEOUT_SECS}"),
        "-create_missing_dirs=1".to_string(),
        "-print_final_stats=1".to_string(),
    ]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_of_the_fuzz_crate_runs_and_has_a_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let declared = manifest.matches("[[bin]]").count();
        assert_eq!(
            declared,
            TARGETS.len(),
            "a target of fuzz/ is not run by CI"
        );
        for target in TARGETS {
            assert!(
                manifest.contains(&format!("name = \"{}\"", target.name)),
                "{}",
                target.name
            );
            let corpus = root.join("corpus").join(target.name);
            let seeds = std::fs::read_dir(&corpus).map_or(0, |d| d.count());
            assert!(seeds > 0, "{} has no corpus", corpus.display());
        }
    }

    #[test]
    fn a_run_adds_nothing_to_the_repository_and_builds_nothing() {
        let args = run(&TARGETS[0], "/tmp/x");
        assert_eq!(args[..5], ["fuzz", "run", "--dev", "--sanitizer", "none"]);
        assert_eq!(build()[2..], args[2..5], "the same build for the runs");
        let corpora: Vec<&String> = args.iter().filter(|a| a.contains("envelope")).collect();
        assert_eq!(
            corpora[1], "/tmp/x/envelope",
            "new inputs go to the scratch directory"
        );
        assert_eq!(corpora[2], "fuzz/corpus/envelope");
        assert!(args.contains(&"-runs=40000".to_string()));
        assert!(args.contains(&format!("-timeout={TIMEOUT_SECS}")));
    }
}
