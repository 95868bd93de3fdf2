//! The service's configuration as `config::load` reads it: the input up to its first NUL byte
//! is the TOML file, each line after it a `LEASEHOLD__…=value` environment variable over it.
//! What reads is then taken as far as the service takes it before it connects: each
//! subscription's push table checked (`push_endpoint`, against the emulator and against real
//! Pub/Sub) and the connection built. No panic, no hang, no allocation out of proportion to the
//! input.

#![no_main]

use leasehold_fuzz::{bound, within};
use leasehold_service::config;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The file the input is written to, one per process: in memory (`/dev/shm`) where there is
/// such a place, so that a disk that fills up under other work fails no input.
fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("leasehold-fuzz-config-{}.toml", std::process::id()))
    })
}

fuzz_target!(|input: &[u8]| {
    let (text, env) = match input.iter().position(|&b| b == 0) {
        Some(nul) => (&input[..nul], &input[nul + 1..]),
        None => (input, &b""[..]),
    };
    let env: Vec<(String, String)> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    std::fs::write(file(), text).expect("write the configuration file");
    within(bound(input.len()), || {
        let read = config::from_sources(Some(file()), env);
        // Nothing left behind once the run ends.
        let _ = std::fs::remove_file(file());
        let Ok(read) = read else {
            return;
        };
        for (key, table) in &read.subscriptions {
            let _ = table.push_endpoint(key, true);
            let _ = table.push_endpoint(key, false);
        }
        let _ = read.connection.connection();
    });
});
