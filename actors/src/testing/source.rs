//! The in-memory Pub/Sub's side of the source traits: its connector, its streams, the
//! handles that settle its messages, and the scripts that make it misbehave.

use crate::error::SourceError;
use crate::error::{AckFailure, ReadError};
use crate::rules::outcome::Action;
use crate::source::{
    Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// What one read of the subscription's configuration answers: see
/// [`MemoryPubSub::script_reads`](crate::testing::MemoryPubSub::script_reads) and [`MemoryPubSub::answer_reads`](crate::testing::MemoryPubSub::answer_reads).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ReadAnswer {
    /// The subscription's configuration, as the [`MemoryPubSub`](crate::testing::MemoryPubSub) was built (exactly-once, the
    /// dead-letter policy).
    Configuration,
    /// The read fails with this error (`NotFound`: the subscription was deleted;
    /// `PermissionDenied`; `Other` with a code such as `Unavailable`: an outage).
    Error(ReadError),
    /// The read never answers, like an endpoint that accepts the call and goes silent.
    NoAnswer,
}

/// The answers to the next reads of the subscription, then the answer to every read after them.
pub(crate) struct ReadScript {
    pub(crate) next: VecDeque<ReadAnswer>,
    pub(crate) then: ReadAnswer,
}

/// One stream opened on the in-memory subscription.
pub(crate) struct OpenStream {
    /// What it was opened with.
    pub(crate) settings: StreamSettings,
    /// The error its next read returns (set by `fail_stream`).
    pub(crate) failure: Mutex<Option<SourceError>>,
    /// Wakes a read that waits for a message when a failure is set.
    pub(crate) failed: Notify,
    /// It returned its failure, or it was dropped: it reads nothing more.
    pub(crate) ended: AtomicBool,
}

impl OpenStream {
    /// Sets the error its next read returns, unless it has ended.
    pub(crate) fn fail(&self, error: SourceError) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        *self.failure.lock() = Some(error);
        self.failed.notify_one();
        true
    }
}

pub(crate) struct Inner {
    pub(crate) info: SubscriptionInfo,
    pub(crate) queue: async_channel::Sender<Received>,
    pub(crate) arrivals: async_channel::Receiver<Received>,
    /// Every read makes a new message with this payload.
    pub(crate) endless: Option<Bytes>,
    pub(crate) next_id: AtomicU64,
    pub(crate) acked: AtomicU64,
    /// The ack count [`MemoryPubSub::acked_reach`] waits for (`u64::MAX`: none).
    pub(crate) acked_target: AtomicU64,
    /// Woken by the ack that makes the count [`acked_target`](Self::acked_target).
    pub(crate) acked_reached: tokio::sync::Notify,
    pub(crate) nacked: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) read_script: Mutex<ReadScript>,
    /// Every stream opened, in order.
    pub(crate) streams: Mutex<Vec<Arc<OpenStream>>>,
}

/// What became of one published message, shared by its handle and its [`Published`].
#[derive(Default)]
pub(crate) struct Fate {
    pub(crate) action: OnceLock<Action>,
    pub(crate) waker: AtomicWaker,
}

pub(crate) struct MemoryConnector(pub(crate) Arc<Inner>);

impl Connector for MemoryConnector {
    fn read_subscription<'a>(
        &'a self,
        _: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        self.0.reads.fetch_add(1, Ordering::Relaxed);
        let answer = {
            let mut script = self.0.read_script.lock();
            script
                .next
                .pop_front()
                .unwrap_or_else(|| script.then.clone())
        };
        match answer {
            ReadAnswer::Configuration => {
                let info = self.0.info.clone();
                async move { Ok(info) }.boxed_local()
            }
            ReadAnswer::Error(error) => async move { Err(error) }.boxed_local(),
            ReadAnswer::NoAnswer => futures::future::pending().boxed_local(),
        }
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        let stream = Arc::new(OpenStream {
            settings: settings.clone(),
            failure: Mutex::new(None),
            failed: Notify::new(),
            ended: AtomicBool::new(false),
        });
        self.0.streams.lock().push(stream.clone());
        Box::new(MemorySource {
            inner: self.0.clone(),
            arrivals: Box::pin(self.0.arrivals.clone()),
            stream,
            reads: 0,
            room: Arc::new(Semaphore::new(
                settings
                    .max_outstanding_messages
                    .min(Semaphore::MAX_PERMITS),
            )),
        })
    }
}

pub(crate) struct MemorySource {
    pub(crate) inner: Arc<Inner>,
    pub(crate) arrivals: std::pin::Pin<Box<async_channel::Receiver<Received>>>,
    pub(crate) stream: Arc<OpenStream>,
    pub(crate) reads: u64,
    /// Room for what an endless stream has out unsettled, a permit a message. Like Pub/Sub's
    /// server, which gets the stream's flow control with the stream, it sends no more than the
    /// stream's `max_outstanding_messages`: an endless source that ignored it would have the
    /// pull loop read ahead (what it does while flow control is full) for as long as a run lasts.
    room: Arc<Semaphore>,
}

impl MemorySource {
    /// The next endless message.
    fn make(&self, payload: &Bytes, room: OwnedSemaphorePermit) -> Received {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        Received {
            message_id: id.to_string(),
            data: payload.clone(),
            attributes: HashMap::new(),
            ordering_key: String::new(),
            publish_time: None,
            delivery_attempt: None,
            handle: Box::new(MemoryHandle {
                inner: self.inner.clone(),
                _room: room,
            }),
        }
    }
}

impl MessageSource for MemorySource {
    /// Cancel-safe: a message is taken (or made) only when the read resolves.
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        if let Some(payload) = self.inner.endless.clone() {
            self.reads += 1;
            // Yield now and then so the actors run between reads, as with a network stream.
            let yield_first = self.reads.is_multiple_of(64);
            return async move {
                if yield_first {
                    tokio::task::yield_now().await;
                }
                let room = self.room.clone().acquire_owned().await.ok()?;
                Some(Ok(self.make(&payload, room)))
            }
            .boxed_local();
        }
        async move {
            let stream = &self.stream;
            if stream.ended.load(Ordering::Acquire) {
                return None;
            }
            loop {
                if let Some(error) = stream.failure.lock().take() {
                    stream.ended.store(true, Ordering::Release);
                    return Some(Err(error));
                }
                tokio::select! {
                    // A failure wins over a message that is ready too.
                    biased;
                    () = stream.failed.notified() => {}
                    message = self.arrivals.recv() => return message.ok().map(Ok),
                }
            }
        }
        .boxed_local()
    }
}

impl Drop for MemorySource {
    fn drop(&mut self) {
        self.stream.ended.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryPubSub")
    }
}

/// Settles one endless message: counts it. Settled or dropped, it gives its room in its stream
/// back.
#[derive(Debug)]
pub(crate) struct MemoryHandle {
    pub(crate) inner: Arc<Inner>,
    _room: OwnedSemaphorePermit,
}

impl SettleHandle for MemoryHandle {
    fn settle(self: Box<Self>, action: Action) -> Confirmation {
        count(&self.inner, action);
        if self.inner.info.exactly_once {
            Confirmation::Pending(async { Ok(()) }.boxed_local())
        } else {
            Confirmation::BestEffort
        }
    }
}

pub(crate) fn count(inner: &Inner, action: Action) {
    match action {
        Action::Ack => {
            let acked = inner.acked.fetch_add(1, Ordering::Relaxed) + 1;
            if acked == inner.acked_target.load(Ordering::Relaxed) {
                // Kept as a permit when no one waits yet: the wake-up is not lost.
                inner.acked_reached.notify_one();
            }
        }
        Action::Nack => {
            inner.nacked.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Settles one published message: counts it, tells its [`Published`], and answers its
/// confirmation as the message says.
pub(crate) struct PublishedHandle {
    pub(crate) inner: Arc<Inner>,
    /// `None` once settled.
    pub(crate) fate: Option<Arc<Fate>>,
    pub(crate) confirmation_failure: Option<AckFailure>,
}

impl std::fmt::Debug for PublishedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishedHandle")
            .field("settled", &self.fate.is_none())
            .finish_non_exhaustive()
    }
}

impl PublishedHandle {
    fn settled(&mut self, action: Action) {
        if let Some(fate) = self.fate.take() {
            count(&self.inner, action);
            let _ = fate.action.set(action);
            fate.waker.wake();
        }
    }
}

impl SettleHandle for PublishedHandle {
    fn settle(mut self: Box<Self>, action: Action) -> Confirmation {
        self.settled(action);
        if !self.inner.info.exactly_once {
            return Confirmation::BestEffort;
        }
        let answer = match self.confirmation_failure.take() {
            Some(failure) => Err(failure),
            None => Ok(()),
        };
        Confirmation::Pending(async move { answer }.boxed_local())
    }
}

impl Drop for PublishedHandle {
    /// Dropped unsettled: a nack, as Google's client does.
    fn drop(&mut self) {
        self.settled(Action::Nack);
    }
}
