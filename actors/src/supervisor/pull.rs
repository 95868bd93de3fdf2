//! A subscription's streams and their pull loops: one loop per stream, each a
//! `futures::Stream` the supervisor polls itself.
//!
//! A pull loop takes a flow-control permit *before* it reads the next message, so no more than
//! `max_outstanding_messages` (and bytes) are ever outstanding whatever the server sends, and
//! hands each message to the supervisor with its permit, without a mailbox envelope. On a stop
//! it releases what the client has buffered and shuts the stream down. [`Streams`] opens them,
//! keeps each one's reopening backoff and its shutdown, and counts the open ones.

use crate::error::SourceError;
use crate::rules::flow::{FlowControl, FlowPermit};
use crate::rules::supervision::{Backoff, RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX};
use crate::source::{Connector, MessageSource, Received, StreamSettings};
use crate::status::stats::Stats;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One of the subscription's streams.
struct StreamSlot {
    backoff: Backoff,
    /// Shuts the open stream down once every message is settled (see `MessageSource::shutdown`).
    shutdown: Option<LocalBoxFuture<'static, ()>>,
}

/// The streams of one subscription (`Options::streams` of them, pulling in parallel).
pub(crate) struct Streams {
    slots: Vec<StreamSlot>,
    connector: Rc<dyn Connector>,
    settings: StreamSettings,
    flow: FlowControl,
    stats: Arc<Stats>,
    /// The stop signals of every pull loop.
    pub(crate) stop: StopSignals,
}

impl Streams {
    pub(crate) fn new(
        count: usize,
        connector: Rc<dyn Connector>,
        settings: StreamSettings,
        flow: FlowControl,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            slots: (0..count)
                .map(|_| StreamSlot {
                    backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
                    shutdown: None,
                })
                .collect(),
            connector,
            settings,
            flow,
            stats,
            stop: StopSignals::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// What the streams open with.
    pub(crate) fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// Opens stream `stream`: its pull loop, for the supervisor to poll.
    pub(crate) fn open(
        &mut self,
        stream: usize,
    ) -> impl futures::Stream<Item = (usize, Pulled)> + 'static {
        let source = self.connector.open(&self.settings);
        self.stats.open_streams.fetch_add(1, Ordering::Relaxed);
        self.slots[stream].shutdown = Some(source.shutdown());
        pull(
            source,
            stream,
            self.flow.clone(),
            self.stop.clone(),
            self.stats.clone(),
        )
    }

    /// Stream `stream` delivered a message: its next failure is reopened after the shortest
    /// wait again.
    pub(crate) fn delivered(&mut self, stream: usize) {
        self.slots[stream].backoff.reset(RESTART_BACKOFF_INITIAL);
    }

    /// Stream `stream` ended: no longer counted open. How long to wait before reopening it.
    pub(crate) fn ended(&mut self, stream: usize) -> Duration {
        self.stats.open_streams.fetch_sub(1, Ordering::Relaxed);
        self.slots[stream].backoff.next_delay(fastrand::f64())
    }

    /// Each open stream's shutdown, for the end of a drain.
    pub(crate) fn take_shutdowns(&mut self) -> Vec<LocalBoxFuture<'static, ()>> {
        self.slots
            .iter_mut()
            .filter_map(|slot| slot.shutdown.take())
            .collect()
    }
}

/// The signals of a stop for the pull loops.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopSignals {
    /// Cancelled when a stop begins: the pull loops stop feeding the handlers.
    pub(crate) drain: CancellationToken,
    /// Cancelled when every message is settled: the streams close.
    pub(crate) finished: CancellationToken,
}

/// What a pull loop hands the supervisor.
#[derive(Debug)]
pub(crate) enum Pulled {
    /// A message, with its flow-control permit.
    /// A message, with its flow-control permit and when it was read from the client (its
    /// lease budget counts from there, as the client's does).
    Arrived(Received, FlowPermit, Instant),
    /// The stream ended, after an error or not.
    Ended(Option<SourceError>),
}

/// What a pull loop owns.
struct PullState {
    source: Box<dyn MessageSource>,
    flow: FlowControl,
    stop: StopSignals,
    stats: Arc<Stats>,
    /// What the stream gave while flow control had no room (see [`room_or_read_ahead`]): the
    /// messages, then possibly its end, taken before the next read.
    read_ahead: VecDeque<(Instant, Option<Result<Received, SourceError>>)>,
}

/// Room for one more message. Until there is some, the stream is read on and what it gives is
/// kept in order: Google's client puts a message under lease management (extending its lease)
/// only when it is read, so a response the server sent while every permit was taken (the
/// emulator sends beyond the stream's flow control) would otherwise wait unleased and come again
/// once its ack deadline passed. Nothing more is read after the stream's end.
async fn room_or_read_ahead(st: &mut PullState) -> OwnedSemaphorePermit {
    loop {
        let ended = matches!(st.read_ahead.back(), Some((_, None | Some(Err(_)))));
        if ended {
            return st.flow.message().await;
        }
        tokio::select! {
            biased;
            room = st.flow.message() => return room,
            item = st.source.next() => st.read_ahead.push_back((Instant::now(), item)),
        }
    }
}

/// Reads the stream while there is room under flow control, and yields each message with its
/// permit, tagged with the stream's number. Ends after yielding the stream's end.
///
/// Once a stop begins it stops taking messages for the handlers, releases (nacks) whatever the
/// client has buffered, so Pub/Sub can hand those messages to another consumer at once instead
/// of when their leases run out, and shuts the stream down. It ends without yielding anything
/// more once the drain is over.
///
/// One future for the life of the stream (`async_stream`): a stream built with `unfold` builds a
/// new future for every message and moves it into place, with the state it owns (about 1,250
/// instructions a message, a tenth of the pipeline's, measured).
pub(crate) fn pull(
    source: Box<dyn MessageSource>,
    stream: usize,
    flow: FlowControl,
    stop: StopSignals,
    stats: Arc<Stats>,
) -> impl futures::Stream<Item = (usize, Pulled)> {
    async_stream::stream! {
        let mut st = PullState {
            source,
            flow,
            stop,
            stats,
            read_ahead: VecDeque::new(),
        };
        loop {
            // A stop wins over a message that happens to be ready.
            if st.stop.drain.is_cancelled() {
                break;
            }
            // The stream's end, read ahead after the messages before it, needs no room.
            if matches!(st.read_ahead.front(), Some((_, None | Some(Err(_))))) {
                let end = st.read_ahead.pop_front().and_then(|(_, end)| end.and_then(Result::err));
                yield (stream, Pulled::Ended(end));
                return;
            }
            // Take the room first: a message is only read from the client when it may run. What
            // is ready at once is taken without waiting on the stop signal too (registering with
            // it for every message costs more than the rest of the read).
            let room = match st.flow.try_message() {
                Some(room) => room,
                None => match unless_stopped(&st.stop.drain.clone(), room_or_read_ahead(&mut st)).await {
                    Some(room) => room,
                    None => break,
                },
            };
            let (read_at, item) = match st.read_ahead.pop_front() {
                Some((read_at, item)) => (Some(read_at), Some(item)),
                None => (None, unless_stopped(&st.stop.drain, st.source.next()).await),
            };
            let Some(item) = item else {
                // The room taken for this read goes back first: the drain waits for all of it.
                drop(room);
                break;
            };
            match item {
                Some(Ok(received)) => {
                    let permit = st.flow.bytes(room, received.data.len()).await;
                    let read_at = read_at.unwrap_or_else(Instant::now);
                    yield (stream, Pulled::Arrived(received, permit, read_at));
                }
                Some(Err(error)) => {
                    yield (stream, Pulled::Ended(Some(error)));
                    return;
                }
                None => {
                    yield (stream, Pulled::Ended(None));
                    return;
                }
            }
        }
        release(st).await;
    }
}

/// `future`'s output, or `None` when the stop (`drain`) wins. What is ready at once is taken
/// without registering with the stop signal.
async fn unless_stopped<F: Future>(drain: &CancellationToken, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Poll::Ready(output) = futures::poll!(future.as_mut()) {
        return Some(output);
    }
    tokio::select! {
        biased;
        _ = drain.cancelled() => None,
        output = future => Some(output),
    }
}

/// A stop began: nacks (drops) what the client already holds, without waiting on the network,
/// then shuts the stream down so that it reads no more (the client goes on extending and
/// settling the leases of what it delivered), and ends when every message is settled.
async fn release(mut st: PullState) {
    let read_ahead = std::mem::take(&mut st.read_ahead);
    for _released in read_ahead.into_iter().filter_map(|(_, item)| item?.ok()) {
        Stats::bump(&st.stats.received);
        Stats::bump(&st.stats.released);
    }
    while let Some(Some(Ok(_released))) = st.source.next().now_or_never() {
        // Received from the stream and settled (nacked, unread), like any delivery: counted in
        // both, so that every delivery received is counted settled once.
        Stats::bump(&st.stats.received);
        Stats::bump(&st.stats.released);
    }
    // Polled once: that signals the shutdown; the supervisor awaits its end after the drain.
    let _ = st.source.shutdown().now_or_never();
    st.stop.finished.cancelled().await;
}
