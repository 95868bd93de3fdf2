//! How a user's handler is called: what it may return ([`IntoOutcome`]), and its type erased
//! into one [`ErasedHandler`] that a worker calls with the payload and the delivery, whatever
//! the payload type and whether the handler is async or blocking. Decoding happens inside the
//! erased call, on the worker thread.

use crate::delivery::Delivery;
use crate::error::DecodeError;
use crate::outcome::Outcome;
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

/// What a handler settled its message with, and what else the worker counts.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    pub(crate) outcome: Outcome,
    pub(crate) note: Note,
}

/// What the worker counts for one handled message, besides its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// The handler ran and returned an outcome.
    Ran,
    /// The handler returned an error: the message is retried.
    HandlerError,
    /// A transactional handler's transaction committed with the message's record.
    Committed,
    /// A transactional store found the message finished: settled again, the handler not run.
    Replayed,
    /// A transactional store could not begin or commit: the message is retried.
    StoreFailed,
    /// A transactional handler panicked (its transaction was rolled back): the panic policy
    /// settles the message.
    Panicked,
}

impl Handled {
    pub(crate) fn ran(outcome: Outcome) -> Self {
        Self {
            outcome,
            note: Note::Ran,
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
    Undecodable(DecodeError, Delivery),
}

/// Decodes a payload and starts the handler. Called on a worker thread.
pub(crate) type ErasedHandler = Arc<dyn Fn(Bytes, Delivery) -> Started + Send + Sync>;

/// How a registration's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerKind {
    /// Async: many handlers share each worker thread.
    Async,
    /// Blocking: each handler has a worker thread to itself.
    Blocking,
}

/// An async handler of `T`, decoded from JSON. Its future is created and polled on the worker
/// thread that runs it, so it need not be `Send`.
pub(crate) fn json<T, F, Fut>(handler: F) -> ErasedHandler
where
    T: DeserializeOwned + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + 'static,
    Fut::Output: IntoOutcome,
{
    Arc::new(
        move |data: Bytes, delivery| match serde_json::from_slice::<T>(&data) {
            Ok(value) => {
                let names = delivery.names();
                running(handler(value, delivery), names)
            }
            Err(e) => Started::Undecodable(DecodeError::json(&e), delivery),
        },
    )
}

/// An async handler of raw payload bytes (see [`json`]).
pub(crate) fn raw<F, Fut>(handler: F) -> ErasedHandler
where
    F: Fn(Bytes, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + 'static,
    Fut::Output: IntoOutcome,
{
    Arc::new(move |data, delivery: Delivery| {
        let names = delivery.names();
        running(handler(data, delivery), names)
    })
}

/// A blocking handler of `T`, decoded from JSON: it returns when it is done.
pub(crate) fn blocking_json<T, F, O>(handler: F) -> ErasedHandler
where
    T: DeserializeOwned + 'static,
    F: Fn(T, Delivery) -> O + Send + Sync + 'static,
    O: IntoOutcome,
{
    Arc::new(
        move |data: Bytes, delivery| match serde_json::from_slice::<T>(&data) {
            Ok(value) => {
                let names = delivery.names();
                Started::Done(handler(value, delivery).into_outcome_for(&names.0, &names.1))
            }
            Err(e) => Started::Undecodable(DecodeError::json(&e), delivery),
        },
    )
}

/// A blocking handler of raw payload bytes.
pub(crate) fn blocking_raw<F, O>(handler: F) -> ErasedHandler
where
    F: Fn(Bytes, Delivery) -> O + Send + Sync + 'static,
    O: IntoOutcome,
{
    Arc::new(move |data, delivery: Delivery| {
        let names = delivery.names();
        Started::Done(handler(data, delivery).into_outcome_for(&names.0, &names.1))
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
