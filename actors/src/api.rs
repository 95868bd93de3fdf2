//! What a handler author touches: the [`Registration`](crate::Registration) builder, the
//! [`Delivery`](crate::Delivery) a handler gets and the outcomes it returns, batches, the
//! decoders of a registration's own, the decode-failure and panic policies, and the handler's
//! type erased for the workers.
//!
//! May use: `rt`, `rules`, `status`, `store`, `lease`.

pub(crate) mod batch;
pub(crate) mod decode;
pub(crate) mod decoded;
pub(crate) mod delivery;
pub(crate) mod handler;
pub(crate) mod policy;
pub(crate) mod registration;
