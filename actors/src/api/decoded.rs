//! The registrations whose handler gets what a [`Decoder`] of the user's own decoded
//! ([`Registration::decoded`] and its siblings; the transactional ones are beside the other
//! transactional registrations), and how the decoder's fetch reaches the workers.

use crate::api::batch::{Batch, IntoBatchOutcome};
use crate::api::decode::{Decoder, prepare_of};
use crate::api::delivery::Delivery;
use crate::api::handler::{self, ErasedHandler, HandlerKind, IntoOutcome};
use crate::api::registration::Registration;
use std::future::Future;
use std::sync::Arc;

impl Registration {
    /// An async handler of payloads decoded by `decoder`: [`json`](Self::json) with a decoder
    /// of your own, such as `leasehold-schema`'s decoders of Avro and Protocol Buffers messages.
    /// What the decoder fetches first (a schema revision) the worker awaits before it decodes;
    /// see [`Decoder`]. A payload that does not decode goes to the failure policy, as for
    /// `json`; one whose decoder could not fetch what it needs
    /// ([`DecodeError::Unavailable`](crate::DecodeError::Unavailable)) is retried.
    pub fn decoded<D, F, Fut>(subscription: impl Into<String>, decoder: D, handler: F) -> Self
    where
        D: Decoder,
        F: Fn(D::Output, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        Self::with_decoder(subscription, decoder, HandlerKind::Async, |decoder| {
            ErasedHandler::One(handler::one(handler::by_decoder(decoder), handler))
        })
    }

    /// A blocking handler of payloads decoded by `decoder` (see [`decoded`](Self::decoded) and
    /// [`blocking_json`](Self::blocking_json)).
    pub fn blocking_decoded<D, F, O>(
        subscription: impl Into<String>,
        decoder: D,
        handler: F,
    ) -> Self
    where
        D: Decoder,
        F: Fn(D::Output, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        Self::with_decoder(subscription, decoder, HandlerKind::Blocking, |decoder| {
            ErasedHandler::One(handler::blocking_one(handler::by_decoder(decoder), handler))
        })
    }

    /// An async batch handler of payloads decoded by `decoder` (see [`decoded`](Self::decoded)
    /// and [`json_batch`](Self::json_batch)): each message's fetch is awaited before the batch
    /// is decoded, and a payload that does not decode is left out of the batch.
    pub fn decoded_batch<D, F, Fut>(subscription: impl Into<String>, decoder: D, handler: F) -> Self
    where
        D: Decoder,
        F: Fn(Batch<D::Output>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        Self::with_decoder(subscription, decoder, HandlerKind::Async, |decoder| {
            let decode = handler::batch_decode(handler::by_decoder(decoder));
            ErasedHandler::Batch(handler::async_batch(decode, handler))
        })
    }

    /// A blocking batch handler of payloads decoded by `decoder` (see
    /// [`decoded_batch`](Self::decoded_batch)).
    pub fn blocking_decoded_batch<D, F, O>(
        subscription: impl Into<String>,
        decoder: D,
        handler: F,
    ) -> Self
    where
        D: Decoder,
        F: Fn(Batch<D::Output>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        Self::with_decoder(subscription, decoder, HandlerKind::Blocking, |decoder| {
            let decode = handler::batch_decode(handler::by_decoder(decoder));
            ErasedHandler::Batch(handler::blocking_batch(decode, handler))
        })
    }

    /// A registration of `kind` whose handler `erase` makes around `decoder`, keeping the
    /// decoder's `prepare` for the workers.
    fn with_decoder<D: Decoder>(
        subscription: impl Into<String>,
        decoder: D,
        kind: HandlerKind,
        erase: impl FnOnce(Arc<D>) -> ErasedHandler,
    ) -> Self {
        let decoder = Arc::new(decoder);
        Self::new(subscription.into(), kind, erase(decoder.clone())).decoding_with(&decoder)
    }

    /// Keeps `decoder`'s `prepare`, for the workers to await before they decode.
    pub(crate) fn decoding_with<D: Decoder>(mut self, decoder: &Arc<D>) -> Self {
        self.prepare = Some(prepare_of(decoder));
        self
    }
}
