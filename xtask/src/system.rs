//! This machine, as the probes read it, and its apt-get and cargo install.

use crate::parts::Machine;
use crate::setup::Installer;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The machine this process runs on.
pub struct System;

impl Machine for System {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    fn is_file(&self, path: &Path) -> bool {
        path.is_file()
    }

    fn real_path(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }

    fn runs(&self, program: &str) -> bool {
        Command::new(program)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn path_dirs(&self) -> Vec<PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default()
    }

    fn dir_names(&self, dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn is_root(&self) -> bool {
        // As postgres/src/local.rs: /proc/self belongs to the effective user.
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    fn has_toolchain(&self, name: &str) -> bool {
        Command::new("rustup")
            .args(["run", name, "rustc", "--version"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn has_user(&self, name: &str) -> bool {
        std::fs::read_to_string("/etc/passwd")
            .unwrap_or_default()
            .lines()
            .any(|line| line.split(':').next() == Some(name))
    }
}

impl Installer for System {
    fn cargo_install(&mut self, args: &[&str]) -> bool {
        // The cargo on PATH (rustup's), whatever toolchain runs this task.
        Command::new("cargo")
            .args(args)
            .env_remove("CARGO")
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn apt_get(&mut self, args: &[&str]) -> bool {
        // No questions: CI runs with no standard input.
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}
