//! The programs some tests drive (Chromium, Prometheus, promtool): found, or a failure that says
//! how to install them.

use std::ffi::OsStr;
use std::process::{Command, Output};

/// The first of `candidates` that runs with `--version`; otherwise the test fails, saying
/// `install` (how to get it).
pub fn tool(candidates: &[&str], install: &str) -> String {
    candidates
        .iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|b| b.to_string())
        .unwrap_or_else(|| panic!("{} is missing: {install}", candidates[0]))
}

/// Runs Debian's Chromium headless with `args`, with the flags this machine needs (no network
/// beyond localhost) and a profile of its own, deleted afterwards.
pub fn chromium<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let binary = tool(
        &["chromium", "/usr/bin/chromium", "chromium-browser"],
        "install Debian's chromium package (apt-get install chromium); `cargo xtask setup` \
         installs it",
    );
    let profile = std::env::temp_dir().join(crate::unique("chromium"));
    let output = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(profile);
    output
}
