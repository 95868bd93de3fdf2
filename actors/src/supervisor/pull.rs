//! A stream's pull loop: a `futures::Stream` the supervisor polls itself, one per stream
//! ([`super::streams`] opens them).
//!
//! A pull loop takes a flow-control permit *before* it reads the next message, so no more than
//! `max_outstanding_messages` (and bytes) are ever outstanding whatever the server sends, and
//! hands each message to the supervisor with its permit, without a mailbox envelope. While there
//! is no room it reads on: what it reads waits within the read-ahead's bound, or is given back
//! (`rules/read_ahead.rs` decides). On a stop it releases what it read ahead and what the client
//! has buffered, and shuts the stream down.
//!
//! May use the folders below `supervisor`.

use crate::error::SourceError;
use crate::rt::breaker_signal::BreakerSignal;
use crate::rules::flow::{FlowControl, FlowPermit};
use crate::rules::lease_state::LeaseClock;
use crate::rules::read_ahead::{Admission, ReadAhead};
use crate::source::{MessageSource, Received};
use crate::status::stats::Stats;
use futures::FutureExt;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What every pull loop of one subscription shares.
#[derive(Clone)]
pub(super) struct Common {
    pub(super) flow: FlowControl,
    pub(super) stats: Arc<Stats>,
    pub(super) breaker: Arc<BreakerSignal>,
    /// What the streams read ahead, together.
    pub(super) ahead: Rc<RefCell<ReadAhead>>,
    /// The last delivery attempt the subscription's dead-letter policy allows, when it has one
    /// (and it could be read): a message on it is not given back lightly, a nack would
    /// dead-letter it.
    pub(super) dead_letter_after: Option<u32>,
    pub(super) subscription: Arc<str>,
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
    /// A message, with its flow-control permit and when it was read from the client (its
    /// lease budget counts from there, as the client's does).
    Arrived(Received, FlowPermit, Instant),
    /// The stream ended, after an error or not.
    Ended(Option<SourceError>),
}

/// What the stream gave, in the order it gave it: a message, or its end.
type Item = Option<Result<Received, SourceError>>;

/// What a pull loop owns.
struct PullState {
    source: Box<dyn MessageSource>,
    common: Common,
    max_lease: Duration,
    stop: StopSignals,
    /// What the stream gave while flow control had no room (see [`room_or_read_ahead`]): the
    /// messages, each with when it was read, then possibly its end, taken before the next read.
    read_ahead: VecDeque<(Instant, Item)>,
    /// This loop gave a message back already (and said why, once).
    gave_back: bool,
}

/// What woke a pull loop waiting for room.
enum Woke {
    /// Room for one more message.
    Room(OwnedSemaphorePermit),
    /// The stream gave this.
    Read(Item),
    /// The oldest message read ahead is near the end of its lease budget.
    Expiring,
    /// The breaker opened or closed.
    Breaker,
}

impl PullState {
    /// When the oldest message read ahead must be given back: before the end of its lease
    /// budget, as the breaker gives back what it holds.
    fn expiry(&self) -> Option<Instant> {
        match self.read_ahead.front() {
            Some((read_at, Some(Ok(_)))) => {
                let clock = LeaseClock::new(*read_at, self.max_lease);
                Some(clock.deadline() - clock.hold_margin())
            }
            _ => None,
        }
    }

    /// The stream gave `item` while flow control had no room: it waits, or is given back.
    fn read(&mut self, item: Item) {
        let Some(Ok(received)) = item else {
            self.read_ahead.push_back((Instant::now(), item));
            return;
        };
        let open = self.common.breaker.is_open();
        let last_attempt = matches!(
            (received.delivery_attempt, self.common.dead_letter_after),
            (Some(attempt), Some(limit)) if attempt >= limit
        );
        let admitted =
            self.common
                .ahead
                .borrow_mut()
                .admit(received.data.len(), open, last_attempt);
        match admitted {
            Admission::Wait => {
                self.read_ahead
                    .push_back((Instant::now(), Some(Ok(received))));
                self.publish();
            }
            Admission::GiveBack => {
                if !self.gave_back {
                    self.gave_back = true;
                    tracing::info!(subscription = %self.common.subscription,
                        "the server sent beyond this stream's flow control and what waits read \
                         ahead is full: messages beyond it are given back (nacked) for a \
                         consumer with room (Pub/Sub's emulator sends beyond flow control; \
                         the service does not), each counted in given_back");
                }
                self.give_back(received, "read while what waits read ahead was full");
            }
            Admission::GiveBackLast => {
                tracing::warn!(subscription = %self.common.subscription,
                    message_id = %received.message_id, attempt = ?received.delivery_attempt,
                    "a message on its last delivery attempt was read while what waits read \
                     ahead was full, past the breaker's bound too: given back (nacked), so \
                     Pub/Sub dead-letters it unrun");
                self.give_back(
                    received,
                    "read on its last attempt past every read-ahead bound",
                );
            }
        }
    }

    /// Gives back (nacks, unrun) the messages read ahead whose lease budget is nearly spent.
    fn expire(&mut self) {
        let now = Instant::now();
        while self.expiry().is_some_and(|at| at <= now) {
            let Some((_, Some(Ok(received)))) = self.read_ahead.pop_front() else {
                unreachable!("expiry() is only some for a message");
            };
            self.common.ahead.borrow_mut().left(received.data.len());
            tracing::warn!(subscription = %self.common.subscription,
                message_id = %received.message_id,
                "a message waited read ahead until near the end of its lease budget \
                 (max_lease): given back (nacked), Pub/Sub redelivers it");
            self.give_back(
                received,
                "waited read ahead until near the end of its lease",
            );
        }
        self.publish();
    }

    /// Gives `received` back unrun: its handle, dropped, nacks it (the client's rule). Counted
    /// given back, not received: it comes again, and is counted then.
    fn give_back(&self, received: Received, why: &'static str) {
        Stats::bump(&self.common.stats.given_back);
        tracing::debug!(subscription = %self.common.subscription,
            message_id = %received.message_id, why, "given back");
        drop(received);
    }

    /// The oldest message read ahead, or the stream's end, taken for the room just had.
    fn take_read_ahead(&mut self) -> Option<(Instant, Item)> {
        let taken = self.read_ahead.pop_front()?;
        if let (_, Some(Ok(received))) = &taken {
            self.common.ahead.borrow_mut().left(received.data.len());
            self.publish();
        }
        Some(taken)
    }

    /// What waits read ahead now, for the counters.
    fn publish(&self) {
        let waiting = self.common.ahead.borrow().waiting();
        let stats = &self.common.stats;
        stats.read_ahead.store(waiting.messages, Ordering::Relaxed);
        stats
            .read_ahead_bytes
            .store(waiting.bytes, Ordering::Relaxed);
        stats
            .peak_read_ahead
            .fetch_max(waiting.peak_messages as u64, Ordering::Relaxed);
    }

    /// Settles whatever waits read ahead, unrun (released: a stop, or the loop dropped).
    fn release_read_ahead(&mut self) -> usize {
        let mut released = 0;
        while let Some((_, item)) = self.read_ahead.pop_front() {
            if let Some(Ok(received)) = item {
                self.common.ahead.borrow_mut().left(received.data.len());
                Stats::bump(&self.common.stats.received);
                Stats::bump(&self.common.stats.released);
                released += 1;
            }
        }
        self.publish();
        released
    }
}

impl Drop for PullState {
    /// A pull loop dropped before its release (its supervisor gone): what it read ahead is
    /// nacked by the handles' drops; it is counted, and said.
    fn drop(&mut self) {
        let released = self.release_read_ahead();
        if released > 0 {
            tracing::warn!(subscription = %self.common.subscription, released,
                "a pull loop ended with messages read ahead: nacked, Pub/Sub redelivers them");
        }
    }
}

/// Room for one more message. Until there is some, the stream is read on and what it gives waits
/// in order, within the read-ahead's bound (`rules/read_ahead.rs`): Google's client puts a
/// message under lease management (extending its lease) only when it is read, so a response the
/// server sent while every permit was taken (the emulator sends beyond the stream's flow control)
/// would otherwise wait unleased and come again once its ack deadline passed. Nothing more is
/// read after the stream's end, nor while the breaker is open and its bound is full.
async fn room_or_read_ahead(st: &mut PullState) -> OwnedSemaphorePermit {
    loop {
        let ended = matches!(st.read_ahead.back(), Some((_, None | Some(Err(_)))));
        let open = st.common.breaker.is_open();
        let may_read = !ended && st.common.ahead.borrow().may_read(open);
        let expiry = st.expiry();
        let woke = tokio::select! {
            biased;
            room = st.common.flow.message() => Woke::Room(room),
            item = st.source.next(), if may_read => Woke::Read(item),
            () = tokio::time::sleep_until(expiry.unwrap_or_else(Instant::now)), if expiry.is_some() => {
                Woke::Expiring
            }
            _ = st.common.breaker.changed_from(open), if !may_read && !ended => Woke::Breaker,
        };
        match woke {
            Woke::Room(room) => return room,
            Woke::Read(item) => st.read(item),
            Woke::Expiring => st.expire(),
            Woke::Breaker => {}
        }
    }
}

/// Reads the stream while there is room under flow control, and yields each message with its
/// permit, tagged with the stream's number. Ends after yielding the stream's end.
///
/// Once a stop begins it stops taking messages for the handlers, releases (nacks) what it read
/// ahead and whatever the client has buffered, so Pub/Sub can hand those messages to another
/// consumer at once instead of when their leases run out, and shuts the stream down. It ends
/// without yielding anything more once the drain is over.
///
/// One future for the life of the stream (`async_stream`): a stream built with `unfold` builds a
/// new future for every message and moves it into place, with the state it owns (about 1,250
/// instructions a message, a tenth of the pipeline's, measured).
pub(super) fn pull(
    source: Box<dyn MessageSource>,
    stream: usize,
    common: Common,
    max_lease: Duration,
    stop: StopSignals,
) -> impl futures::Stream<Item = (usize, Pulled)> {
    async_stream::stream! {
        let mut st = PullState {
            source,
            common,
            max_lease,
            stop,
            read_ahead: VecDeque::new(),
            gave_back: false,
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
            let room = match st.common.flow.try_message() {
                Some(room) => room,
                None => match unless_stopped(&st.stop.drain.clone(), room_or_read_ahead(&mut st)).await {
                    Some(room) => room,
                    None => break,
                },
            };
            let (read_at, item) = match st.take_read_ahead() {
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
                    let permit = st.common.flow.bytes(room, received.data.len()).await;
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

/// A stop began: nacks (drops) what was read ahead and what the client already holds, without
/// waiting on the network, then shuts the stream down so that it reads no more (the client goes
/// on extending and settling the leases of what it delivered), and ends when every message is
/// settled.
async fn release(mut st: PullState) {
    st.release_read_ahead();
    while let Some(Some(Ok(_released))) = st.source.next().now_or_never() {
        // Received from the stream and settled (nacked, unread), like any delivery: counted in
        // both, so that every delivery received is counted settled once.
        Stats::bump(&st.common.stats.received);
        Stats::bump(&st.common.stats.released);
    }
    // Polled once: that signals the shutdown; the supervisor awaits its end after the drain.
    let _ = st.source.shutdown().now_or_never();
    st.stop.finished.cancelled().await;
}
