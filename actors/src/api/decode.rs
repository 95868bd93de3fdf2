//! A registration's own decoder ([`Decoder`]): how a payload becomes the handler's argument when
//! it is not JSON, such as a message written with a topic's Pub/Sub schema. A decoder may need
//! something fetched before it can decode a message (the schema revision it was written with):
//! its [`prepare`](Decoder::prepare) returns that fetch, which the worker awaits, off the
//! decoder's hot path, before it calls [`decode`](Decoder::decode). The runtime knows no format:
//! the decoders of Avro and Protocol Buffers are in the `leasehold-schema` crate.

use crate::api::delivery::Delivery;
use crate::error::DecodeError;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a [`Decoder`] fetches before it can decode a delivery: `Ok` once it is at hand, or the
/// error that settles the message ([`DecodeError::Unavailable`] retries it, any other goes to
/// the failure policy). It runs on the worker thread that runs the handler, so it need not be
/// `Send`.
pub type Preparing = Pin<Box<dyn Future<Output = Result<(), DecodeError>>>>;

/// How payloads become a handler's argument: what [`Registration::decoded`] and its siblings
/// take, where [`Registration::json`] decodes JSON.
///
/// For each message the worker calls [`prepare`](Self::prepare), awaits the fetch it returns
/// (if any), then calls [`decode`](Self::decode): its `Ok` goes to the handler, its error to
/// the registration's [`FailurePolicy`](crate::FailurePolicy), except
/// [`DecodeError::Unavailable`], which retries the message. Both calls are guarded: a panic is
/// counted and settles the message by the panic policy. Both run on the worker threads and must
/// not block.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::{Decoder, Delivery, DecodeError, Outcome, Registration};
/// use bytes::Bytes;
///
/// /// Payloads are UTF-8 lines.
/// struct Line;
///
/// impl Decoder for Line {
///     type Output = String;
///     fn decode(&self, data: Bytes, _: &Delivery) -> Result<String, DecodeError> {
///         String::from_utf8(data.to_vec()).map_err(|e| DecodeError::Schema {
///             schema: "utf-8 lines".into(),
///             revision: "none".into(),
///             field: None,
///             problem: format!("not UTF-8 after byte {}", e.utf8_error().valid_up_to()),
///         })
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::decoded("projects/p/subscriptions/lines", Line,
///     |line: String, delivery: Delivery| async move {
///         if line.is_empty() { delivery.drop() } else { delivery.ack() }
///     });
/// registration.validate()?;
/// # Ok(()) }
/// ```
///
/// [`Registration::decoded`]: crate::Registration::decoded
/// [`Registration::json`]: crate::Registration::json
pub trait Decoder: Send + Sync + 'static {
    /// What the handler gets.
    type Output: 'static;

    /// What must be fetched before `delivery` can be decoded, or `None` when everything is at
    /// hand (the default). Called once per delivery, before [`decode`](Self::decode); a message
    /// waits for it with its lease kept, holding its worker's place.
    fn prepare(&self, delivery: &Delivery) -> Option<Preparing> {
        let _ = delivery;
        None
    }

    /// Decodes one payload. Its error must not quote the payload: it is logged.
    fn decode(&self, data: Bytes, delivery: &Delivery) -> Result<Self::Output, DecodeError>;
}

/// A decoder's `prepare`, its type erased for the workers.
pub(crate) type Prepare = Arc<dyn Fn(&Delivery) -> Option<Preparing> + Send + Sync>;

/// The `prepare` of `decoder`.
pub(crate) fn prepare_of<D: Decoder>(decoder: &Arc<D>) -> Prepare {
    let decoder = decoder.clone();
    Arc::new(move |delivery| decoder.prepare(delivery))
}
