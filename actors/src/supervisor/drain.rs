//! The drain, once a stop has begun: what happens, in order, until every actor can stop.
//!
//! The supervisor begins a stop itself (no handler starts from then on, the pull loops stop
//! feeding the handlers and release what the client buffered, `retry_after` holds end, the
//! pool releases what waits); [`drain`] then carries it to its end:
//!
//! 1. running handlers get the drain timeout; then every unsettled lease is nacked
//!    (`StopStage::Abandoned`), and the drain waits until every message has given back its
//!    flow-control permit, that is, until every lease actor has given up the message it held
//!    (the idle lease actors end once the supervisor's children are dropped);
//! 2. the pool stops its workers and joins their threads;
//! 3. the ack sink is flushed: every exactly-once confirmation is awaited;
//! 4. the pull loops end and each stream's shutdown is awaited: the client's last acks and
//!    nacks have left the process;
//! 5. the pool and the sink are told to stop (the supervisor stops itself after).

use crate::lease::ack_sink::{AckSink, Flush, Shutdown as SinkShutdown};
use crate::lease::actor::LiveLeases;
use crate::lease::registry::StopStage;
use crate::pool::messages::{Shutdown as PoolShutdown, StopWorkers};
use crate::pool::worker_pool::WorkerPool;
use crate::rules::flow::FlowControl;
use actix::Addr;
use futures::future::LocalBoxFuture;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the drain needs, taken from the supervisor when the stop begins.
pub(crate) struct Drain {
    /// How long running handlers may go on (zero: nack them at once).
    pub(crate) timeout: Duration,
    /// Outstanding messages: the drain waits for all of them.
    pub(crate) flow: FlowControl,
    /// Every live lease, to nack what is unsettled at the timeout.
    pub(crate) leases: Rc<LiveLeases>,
    /// Cancelled when every message is settled: the pull loops end.
    pub(crate) finished: CancellationToken,
    /// Each open stream's shutdown, awaited last.
    pub(crate) shutdowns: Vec<LocalBoxFuture<'static, ()>>,
    pub(crate) pool: Addr<WorkerPool>,
    pub(crate) sink: Addr<AckSink>,
    /// For log lines.
    pub(crate) subscription: Arc<str>,
}

/// Carries a begun stop to its end (see the module doc).
pub(crate) async fn drain(drain: Drain) {
    let Drain {
        timeout,
        flow,
        leases,
        finished,
        shutdowns,
        pool,
        sink,
        subscription,
    } = drain;
    if tokio::time::timeout(timeout, flow.all_returned())
        .await
        .is_err()
    {
        let left = flow.in_flight().messages;
        if !timeout.is_zero() {
            tracing::warn!(%subscription, left, ?timeout,
                "drain timeout: nacking the messages still unsettled");
        }
        leases.advance(StopStage::Abandoned);
        flow.all_returned().await;
    }
    // Every message is settled: no handler runs past this point.
    let _ = pool.send(StopWorkers).await;
    // Every ack and nack is handed to the client and, exactly-once, confirmed.
    let _ = sink.send(Flush).await;
    // The pull loops drop the client's streams; the client sends what it still holds.
    finished.cancel();
    futures::future::join_all(shutdowns).await;
    pool.do_send(PoolShutdown);
    sink.do_send(SinkShutdown);
}
