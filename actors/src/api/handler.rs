//! How a user's handler is called: what it may return ([`IntoOutcome`]), and its type erased
//! into one [`ErasedHandler`] that a worker calls with the payload and the delivery, whatever
//! the payload type and whether the handler is async or blocking. Decoding happens inside the
//! erased call, on the worker thread.

use crate::api::batch::{Batch, BatchHandled, BatchItem, IntoBatchOutcome};
use crate::api::decode::Decoder;
use crate::api::delivery::{Delivery, subscription_of};
use crate::error::DecodeError;
use crate::rules::outcome::{Handled, Note, Outcome};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// What a handler may return: an [`Outcome`], or a `Result` whose error retries the message.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::{IntoOutcome, Outcome};
/// let failed: Result<Outcome, std::io::Error> = Err(std::io::Error::other("db down"));
/// assert_eq!(failed.into_outcome(), Outcome::retry());
/// ```
pub trait IntoOutcome {
    /// Converts into the outcome that settles the message.
    fn into_outcome(self) -> Outcome;

    /// Converts for one delivery, so that a log line can name the message, and says whether
    /// the handler failed (returned an error). Implement [`into_outcome`](Self::into_outcome);
    /// this one calls it.
    #[doc(hidden)]
    fn into_outcome_for(self, _subscription: &str, _message_id: &str) -> Handled
    where
        Self: Sized,
    {
        Handled::ran(self.into_outcome())
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<E: fmt::Display> IntoOutcome for Result<Outcome, E> {
    /// An error retries the message (nack); the error is logged at warn.
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "handler returned an error; the message is retried");
            Outcome::retry()
        })
    }

    fn into_outcome_for(self, subscription: &str, message_id: &str) -> Handled {
        match self {
            Ok(outcome) => Handled::ran(outcome),
            Err(e) => {
                tracing::warn!(%subscription, %message_id, error = %e,
                    "handler returned an error; the message is retried");
                Handled {
                    outcome: Outcome::retry(),
                    note: Note::HandlerError,
                }
            }
        }
    }
}

/// What starting the handler on one message gave.
pub(crate) enum Started {
    /// An async handler is running. It runs on the worker thread that started it, so it need
    /// not be `Send`.
    Running(LocalBoxFuture<'static, Handled>),
    /// A blocking handler already returned.
    Done(Handled),
    /// The payload did not decode; the delivery is given back for the failure policy.
    /// (Boxed: a schema decoder's error is large, and rare.)
    Undecodable(Box<DecodeError>, Delivery),
}

/// Decodes a payload and starts the handler. Called on a worker thread.
pub(crate) type OneHandler = Arc<dyn Fn(Bytes, Delivery) -> Started + Send + Sync>;

/// What decoding a batch gave: the messages whose payload did not decode (each given back for
/// the failure policy), and the call of the handler on the others (none when no payload
/// decoded). The worker settles the first before it makes the call, so that a panic in the
/// handler settles only the messages the handler got.
pub(crate) struct BatchStarted {
    pub(crate) undecodable: Vec<(DecodeError, Delivery)>,
    pub(crate) run: Option<BatchCall>,
}

/// The call of a batch handler on its batch, made by the worker: it calls the [`Handing`] it
/// is given once, just before the handler gets its messages, and not when no message is left
/// for it (a transactional batch whose messages were all finished or claimed elsewhere).
pub(crate) type BatchCall = Box<dyn FnOnce(Handing) -> BatchRun>;

/// Counts a batch as handed to its handler, with how many messages it holds.
pub(crate) type Handing = Box<dyn FnOnce(usize)>;

/// A batch handler's run.
pub(crate) enum BatchRun {
    /// An async handler is running, on the worker thread that started it.
    Running(LocalBoxFuture<'static, BatchHandled>),
    /// A blocking handler already returned.
    Done(BatchHandled),
}

/// Decodes a batch's payloads and starts the handler on those that decoded. Called on a worker
/// thread.
pub(crate) type BatchHandler = Arc<dyn Fn(Vec<(Bytes, Delivery)>) -> BatchStarted + Send + Sync>;

/// A registration's handler, its type erased: one message per call, or a batch.
#[derive(Clone)]
pub(crate) enum ErasedHandler {
    One(OneHandler),
    Batch(BatchHandler),
}

/// How a registration's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerKind {
    /// Async: many handlers share each worker thread.
    Async,
    /// Blocking: each handler has a worker thread to itself.
    Blocking,
}

/// How one payload becomes the handler's argument: JSON into `T` ([`json`]), the bytes as they
/// are ([`raw`]), or a registration's own [`Decoder`] ([`by_decoder`]). An error sends the
/// message to the failure policy (or, [`DecodeError::Unavailable`], retries it).
pub(crate) trait DecodePayload<T>:
    Fn(Bytes, &Delivery) -> Result<T, DecodeError> + Send + Sync + 'static
{
}

impl<T, F> DecodePayload<T> for F where
    F: Fn(Bytes, &Delivery) -> Result<T, DecodeError> + Send + Sync + 'static
{
}

/// A payload decoded as JSON into `T`.
pub(crate) fn json<T: DeserializeOwned>(data: Bytes, _: &Delivery) -> Result<T, DecodeError> {
    serde_json::from_slice(&data).map_err(|e| DecodeError::json(&e))
}

/// A payload as it came: every one decodes.
pub(crate) fn raw(data: Bytes, _: &Delivery) -> Result<Bytes, DecodeError> {
    Ok(data)
}

/// A registration's own decoder's [`decode`](Decoder::decode).
pub(crate) fn by_decoder<D: Decoder>(decoder: Arc<D>) -> impl DecodePayload<D::Output> {
    move |data, delivery: &Delivery| decoder.decode(data, delivery)
}

/// An async handler of payloads decoded by `decode`. Its future is created and polled on the
/// worker thread that runs it, so it need not be `Send`.
pub(crate) fn one<T, F, Fut>(decode: impl DecodePayload<T>, handler: F) -> OneHandler
where
    T: 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + 'static,
    Fut::Output: IntoOutcome,
{
    Arc::new(move |data: Bytes, delivery| match decode(data, &delivery) {
        Ok(value) => {
            let names = delivery.names();
            running(handler(value, delivery), names)
        }
        Err(error) => Started::Undecodable(Box::new(error), delivery),
    })
}

/// A blocking handler of payloads decoded by `decode`: it returns when it is done.
pub(crate) fn blocking_one<T, F, O>(decode: impl DecodePayload<T>, handler: F) -> OneHandler
where
    T: 'static,
    F: Fn(T, Delivery) -> O + Send + Sync + 'static,
    O: IntoOutcome,
{
    Arc::new(move |data: Bytes, delivery| match decode(data, &delivery) {
        Ok(value) => {
            let names = delivery.names();
            Started::Done(handler(value, delivery).into_outcome_for(&names.0, &names.1))
        }
        Err(error) => Started::Undecodable(Box::new(error), delivery),
    })
}

/// A handler's future, boxed, its output turned into what the worker counts (`names`: the
/// subscription and the message id, for a log line).
fn running<Fut>(future: Fut, names: (Arc<str>, Arc<str>)) -> Started
where
    Fut: Future + 'static,
    Fut::Output: IntoOutcome,
{
    let (subscription, message_id) = names;
    Started::Running(
        future
            .map(move |out| out.into_outcome_for(&subscription, &message_id))
            .boxed_local(),
    )
}

/// The payloads of a batch, each decoded by `decode`: the batch of those that decoded, and the
/// others with their error.
pub(crate) fn decode_each<T>(
    decode: &impl DecodePayload<T>,
    messages: Vec<(Bytes, Delivery)>,
) -> (Vec<BatchItem<T>>, Vec<(DecodeError, Delivery)>) {
    let mut items = Vec::with_capacity(messages.len());
    let mut undecodable = Vec::new();
    for (data, delivery) in messages {
        match decode(data, &delivery) {
            Ok(payload) => items.push(BatchItem { payload, delivery }),
            Err(e) => undecodable.push((e, delivery)),
        }
    }
    (items, undecodable)
}

/// How a batch's payloads become its items, each decoded by `decode`.
pub(crate) fn batch_decode<T: 'static>(decode: impl DecodePayload<T>) -> Decode<T> {
    Arc::new(move |messages| decode_each(&decode, messages))
}

/// The call of `run` on the batch of `items` (when there is any).
fn call_batch<T: 'static>(
    items: Vec<BatchItem<T>>,
    undecodable: Vec<(DecodeError, Delivery)>,
    run: impl FnOnce(Batch<T>) -> BatchRun + 'static,
) -> BatchStarted {
    let run = (!items.is_empty()).then(|| {
        Box::new(move |handing: Handing| {
            handing(items.len());
            run(Batch::new(items))
        }) as BatchCall
    });
    BatchStarted { undecodable, run }
}

/// An async batch handler's future, boxed, its output turned into what the worker counts.
fn batch_running<Fut>(future: Fut, subscription: Arc<str>, messages: usize) -> BatchRun
where
    Fut: Future + 'static,
    Fut::Output: IntoBatchOutcome,
{
    BatchRun::Running(
        future
            .map(move |out| out.into_batch_handled(&subscription, messages))
            .boxed_local(),
    )
}

/// How a batch's payloads become its items: those that decoded, and the others with their
/// error.
pub(crate) type Decode<T> = Arc<
    dyn Fn(Vec<(Bytes, Delivery)>) -> (Vec<BatchItem<T>>, Vec<(DecodeError, Delivery)>)
        + Send
        + Sync,
>;

/// A batch handler: each batch decoded by `decode`, then handed to `run` (which calls the
/// user's handler and says how it runs).
fn batch_handler<T: 'static>(
    decode: Decode<T>,
    run: impl Fn(Batch<T>, Arc<str>) -> BatchRun + Send + Sync + 'static,
) -> BatchHandler {
    let run = Arc::new(run);
    Arc::new(move |messages| {
        let subscription = subscription_of(messages.iter().map(|(_, d)| d));
        let (items, undecodable) = decode(messages);
        let run = run.clone();
        call_batch(items, undecodable, move |batch| run(batch, subscription))
    })
}

/// An async batch handler of payloads decoded by `decode` (each payload on its own: one that
/// does not decode goes to the failure policy and is left out of the batch).
pub(crate) fn async_batch<T, F, Fut>(decode: Decode<T>, handler: F) -> BatchHandler
where
    T: 'static,
    F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
    Fut: Future + 'static,
    Fut::Output: IntoBatchOutcome,
{
    batch_handler(decode, move |batch, subscription| {
        let n = batch.len();
        batch_running(handler(batch), subscription, n)
    })
}

/// A blocking batch handler of payloads decoded by `decode`.
pub(crate) fn blocking_batch<T, F, O>(decode: Decode<T>, handler: F) -> BatchHandler
where
    T: 'static,
    F: Fn(Batch<T>) -> O + Send + Sync + 'static,
    O: IntoBatchOutcome,
{
    batch_handler(decode, move |batch, subscription| {
        let n = batch.len();
        BatchRun::Done(handler(batch).into_batch_handled(&subscription, n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_errors_retry() {
        let r: Result<Outcome, String> = Err("boom".into());
        assert_eq!(r.into_outcome(), Outcome::retry());
        let r: Result<Outcome, String> = Ok(Outcome::ack());
        assert_eq!(r.into_outcome(), Outcome::ack());
    }
}
