//! The log capture: everything Leasehold logs in this test binary.

use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

/// Everything Leasehold logs in this test binary, at trace level, without colour codes.
static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the process-wide log capture once. (A per-test subscriber would miss events whose
/// call sites other tests reached first, when no subscriber was interested.)
pub(crate) fn capture() -> &'static Arc<Mutex<Vec<u8>>> {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Captured(buffer.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(
                "leasehold=trace,leasehold_actors=trace,leasehold_push=trace,leasehold_schema=trace",
            )
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one log capture");
        buffer
    })
}

/// What Leasehold logged so far in this test binary: every line at trace level, from the first
/// use of the emulator on (the capture is this process's global `tracing` subscriber).
pub fn captured_logs() -> String {
    String::from_utf8_lossy(&capture().lock()).into_owned()
}
