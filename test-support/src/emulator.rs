//! Google's Pub/Sub emulator for this test binary.

use crate::logs;
use leasehold::Connection;
use leasehold::emulator::EmulatorHost;
use std::sync::OnceLock;

/// The project every test's topics and subscriptions belong to.
pub const PROJECT: &str = "projects/leasehold-test";

static EMULATOR: OnceLock<EmulatorHost> = OnceLock::new();

/// The emulator for this test binary: the one `PUBSUB_EMULATOR_HOST` names, or one started on a
/// free port at the first call and stopped when the process exits. Fails (never skips) when
/// there is none, with the error that says how to install it.
///
/// Installs the log capture first (see [`captured_logs`](crate::captured_logs)).
pub fn emulator() -> &'static EmulatorHost {
    logs::capture();
    EMULATOR.get_or_init(|| {
        EmulatorHost::from_env_or_start().unwrap_or_else(|e| panic!("cannot run the tests: {e}"))
    })
}

/// A connection to the emulator.
pub fn connection() -> Connection {
    emulator().connection()
}

/// The emulator's `host:port`.
pub fn host() -> String {
    emulator().host().to_string()
}
