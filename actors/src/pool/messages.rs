//! What the worker pool is told, and on what: the supervisor's [`Dispatch`] of each message on
//! a channel of its own ([`DispatchSender`], read with the workers' tickets as a [`PoolInbox`]),
//! and the commands of a stop, in the order the drain sends them.

use crate::api::delivery::Delivery;
use crate::lease::settle_right::SettleRight;
use crate::pool::job::Ticket;
use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::mpsc::UnboundedReceiver;

/// Command: run the handler on this message. Sent on the pool's dispatch channel.
#[derive(Debug)]
pub(crate) struct Dispatch {
    /// The delivery handed to the handler.
    pub(crate) delivery: Delivery,
    /// The payload to decode.
    pub(crate) data: Bytes,
    /// The message's span.
    pub(crate) span: tracing::Span,
    /// The right to settle the message, for the worker that will run its handler.
    pub(crate) right: SettleRight,
}

/// What the pool reads: messages from the supervisor, and the places of ended jobs from the
/// workers.
pub(crate) struct PoolInbox {
    pub(crate) dispatched: UnboundedReceiver<Dispatch>,
    pub(crate) finished: UnboundedReceiver<Vec<Ticket>>,
}

/// Where the supervisor sends messages for the pool.
pub(crate) type DispatchSender = tokio::sync::mpsc::UnboundedSender<Dispatch>;

/// Command: a stop began. Messages no handler has started are released (nacked) now, and none
/// is handed out any more.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct ReleaseUnstarted;

/// Command: stop the workers and their threads; resolves when they are gone (or after
/// [`WORKER_STOP_GRACE`](crate::pool::crew::WORKER_STOP_GRACE), when a handler still blocks its thread).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct StopWorkers;

/// Command: stop the pool itself (after [`StopWorkers`]).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;
