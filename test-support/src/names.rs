//! Names and ports no other test (or run) uses.

use std::sync::atomic::{AtomicU64, Ordering};

/// A unique resource id for this run: `prefix`, the process id, the clock's nanoseconds and a
/// counter, joined by `-`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// [`unique`] joined by `_` instead: usable unquoted as a SQL name (a table, a database) when
/// `prefix` is.
pub fn unique_sql_name(prefix: &str) -> String {
    unique(prefix).replace('-', "_")
}

/// A local TCP port that was free a moment ago (the OS picked it; nothing listens there now).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
