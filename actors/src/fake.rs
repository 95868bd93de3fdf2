//! In-memory implementations of the source traits, for unit tests of actor logic only.
//! Integration tests run the real client against the real emulator.

use crate::error::{AckFailure, ReadError, SourceError};
use crate::outcome::Action;
use crate::source::{
    Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What became of a [`FakeHandle`]: the action it was settled with, or `None` while held.
/// A handle dropped unsettled records `Nack`, as the real client does.
#[derive(Debug, Clone, Default)]
pub struct Settled(Arc<Mutex<Option<Action>>>);

impl Settled {
    pub fn action(&self) -> Option<Action> {
        *self.0.lock()
    }
    pub fn dropped(&self) -> bool {
        self.action().is_some()
    }
}

#[derive(Debug)]
pub struct FakeHandle {
    settled: Settled,
    exactly_once: Option<Result<(), AckFailure>>,
}

impl FakeHandle {
    /// A best-effort handle, or a confirming one that accepts every action.
    pub fn new(exactly_once: bool) -> (Self, Settled) {
        Self::confirming(exactly_once.then_some(Ok(())))
    }
    /// A handle whose confirmation, if any, resolves to `result`.
    pub fn confirming(result: Option<Result<(), AckFailure>>) -> (Self, Settled) {
        let settled = Settled::default();
        (
            Self {
                settled: settled.clone(),
                exactly_once: result,
            },
            settled,
        )
    }
}

impl SettleHandle for FakeHandle {
    fn settle(mut self: Box<Self>, action: Action) -> Confirmation {
        *self.settled.0.lock() = Some(action);
        match self.exactly_once.take() {
            None => Confirmation::BestEffort,
            Some(result) => Confirmation::Pending(async move { result }.boxed_local()),
        }
    }
}

impl Drop for FakeHandle {
    fn drop(&mut self) {
        self.settled.0.lock().get_or_insert(Action::Nack);
    }
}

/// Builds a received message with a best-effort fake handle.
pub fn received(id: &str, key: &str, attempt: Option<u32>, data: &str) -> (Received, Settled) {
    received_with(FakeHandle::new(false), id, key, attempt, data)
}

/// Builds a received message with the given fake handle.
pub fn received_with(
    (handle, settled): (FakeHandle, Settled),
    id: &str,
    key: &str,
    attempt: Option<u32>,
    data: &str,
) -> (Received, Settled) {
    (
        Received {
            message_id: id.into(),
            data: Bytes::from(data.to_string()),
            attributes: Default::default(),
            ordering_key: key.into(),
            publish_time: None,
            delivery_attempt: attempt,
            handle: Box::new(handle),
        },
        settled,
    )
}

type Item = Result<Received, SourceError>;

struct FakeSource(mpsc::UnboundedReceiver<Item>);

impl MessageSource for FakeSource {
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Item>> {
        self.0.recv().boxed_local()
    }
}

/// Answers to the next reads of the subscription; `None` never answers.
pub type Reads = Arc<Mutex<VecDeque<Option<Result<SubscriptionInfo, ReadError>>>>>;

/// A connector whose streams are fed by the test: each `open` takes the next sender's stream.
pub struct FakeConnector {
    pub info: Result<SubscriptionInfo, ReadError>,
    /// Answers to the first reads, before `info`; `None` never answers.
    pub reads: Reads,
    /// Reads so far.
    pub read_count: Arc<Mutex<u32>>,
    streams: Mutex<VecDeque<mpsc::UnboundedReceiver<Item>>>,
    pub opened: Arc<Mutex<Vec<StreamSettings>>>,
}

impl FakeConnector {
    /// A connector reading `info`, with `streams` streams ready to open.
    pub fn new(
        info: Result<SubscriptionInfo, ReadError>,
        streams: usize,
    ) -> (Self, Vec<mpsc::UnboundedSender<Item>>) {
        let (senders, receivers): (Vec<_>, VecDeque<_>) =
            (0..streams).map(|_| mpsc::unbounded_channel()).unzip();
        (
            Self {
                info,
                reads: Arc::default(),
                read_count: Arc::default(),
                streams: Mutex::new(receivers),
                opened: Default::default(),
            },
            senders,
        )
    }
}

impl Connector for FakeConnector {
    fn read_subscription<'a>(
        &'a self,
        _subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        *self.read_count.lock() += 1;
        match self.reads.lock().pop_front() {
            Some(Some(answer)) => async move { answer }.boxed_local(),
            Some(None) => futures::future::pending().boxed_local(),
            None => {
                let info = self.info.clone();
                async move { info }.boxed_local()
            }
        }
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        self.opened.lock().push(settings.clone());
        let rx = self.streams.lock().pop_front().unwrap_or_else(|| {
            // No more streams prepared: one that never yields.
            let (tx, rx) = mpsc::unbounded_channel();
            std::mem::forget(tx);
            rx
        });
        Box::new(FakeSource(rx))
    }
}
