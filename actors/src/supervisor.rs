//! One subscription's life: the [`SubscriptionActor`] that starts it (reading the subscription,
//! `start`), opens its streams (`streams`) and runs the pull loops (`pull`), starts and supervises the pool and the
//! ack sink (`children`), watches its health and heartbeat, builds each message's span, and
//! stops it (`drain`); and the [`Subscription`](crate::Subscription) handle it returns.
//!
//! May use every folder below it.

pub(crate) mod actor;
pub(crate) mod children;
pub(crate) mod drain;
pub(crate) mod entry;
pub(crate) mod health;
#[cfg(feature = "otel")]
pub(crate) mod otel;
pub(crate) mod pull;
pub(crate) mod span;
pub(crate) mod start;
pub(crate) mod streams;
pub(crate) mod subscription;

pub use actor::{Stop, SubscriptionActor};
