//! Where the client's connections and sessions are driven: one thread of Leasehold's own per
//! process, with its own runtime.
//!
//! The Spanner client spawns its gRPC connections' tasks and its session pool's upkeep on the
//! runtime that builds it. Handlers run on worker threads, which a stop ends and a death
//! restarts: a client built there would lose its connections with its thread. Built here, its
//! calls may be made from any thread (the calls' futures only talk to those tasks).

use std::sync::OnceLock;
use tokio::runtime::Handle;

/// The thread that drives every client, started on first use and kept for the process.
pub(crate) fn driver() -> &'static Handle {
    static DRIVER: OnceLock<Handle> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for Spanner's connections");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("leasehold-spanner".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("a thread for Spanner's connections");
        handle
    })
}

/// Runs `future` on the driver thread and waits for it there (a panic in it is resumed here).
pub(crate) async fn on_driver<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match driver().spawn(future).await {
        Ok(output) => output,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
