//! Unit-test handlers without Pub/Sub (feature `testing`).
//!
//! Two ways in:
//! - build a [`Delivery`] with [`delivery`] and call your handler function directly, comparing
//!   the [`Outcome`](crate::Outcome) it returns (a batch handler: build its [`Batch`] with
//!   [`batch`] and read each message's outcome with
//!   [`BatchOutcome::outcome_of`](crate::BatchOutcome::outcome_of));
//! - run a whole [`Registration`] on a [`MemoryPubSub`]: publish [`TestMessage`]s and await the
//!   [`Action`] each ended in (decoding, failure and panic policies, ordering keys, the progress
//!   store and the dead-letter rule all apply as they would against Pub/Sub).
//!
//! A [`MemoryPubSub`] can also misbehave, to test what a subscription does then: script the
//! answers to reads of the subscription ([`ReadAnswer`]), fail a stream, have Pub/Sub refuse a
//! message's confirmed ack. Leasehold's own actor tests run on it.
//!
//! ```
//! # extern crate leasehold_actors as leasehold;
//! use leasehold::testing::{MemoryPubSub, TestMessage, delivery};
//! use leasehold::{Action, Delivery, Outcome, Registration};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! async fn on_order(order: Order, d: Delivery) -> Outcome {
//!     if order.id == 0 { d.drop() } else { d.ack() }
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // The handler alone.
//!     assert_eq!(on_order(Order { id: 7 }, delivery().build()).await, Outcome::ack());
//!
//!     // The handler with everything around it.
//!     let pubsub = MemoryPubSub::new().dead_letter_after(5);
//!     let registration = Registration::json("projects/p/subscriptions/orders", on_order)
//!         .worker_threads(0);
//!     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
//!     assert_eq!(pubsub.publish(TestMessage::new(r#"{"id": 7}"#)).await, Action::Ack);
//!     // drop() on the last attempt nacks, for the dead-letter topic.
//!     let last = TestMessage::new(r#"{"id": 0}"#).attempt(5);
//!     assert_eq!(pubsub.publish(last).await, Action::Nack);
//!     // Not JSON: the default failure policy drops it (acks).
//!     assert_eq!(pubsub.publish(TestMessage::new("not json")).await, Action::Ack);
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```
//!
//! A batch registration runs on it the same way; publish the messages of a batch together:
//!
//! ```
//! # extern crate leasehold_actors as leasehold;
//! use leasehold::testing::{MemoryPubSub, TestMessage};
//! use leasehold::{Action, Batch, BatchOutcome, Registration};
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let registration = Registration::json_batch("projects/p/subscriptions/orders",
//!         |batch: Batch<u64>| async move {
//!             let mut outcomes = BatchOutcome::new();
//!             for item in &batch {
//!                 let d = &item.delivery;
//!                 outcomes.set(d, if item.payload > 0 { d.ack() } else { d.retry() });
//!             }
//!             outcomes
//!         })
//!         .max_batch_messages(2)
//!         .worker_threads(0);
//!     let pubsub = MemoryPubSub::new();
//!     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
//!     let (one, zero) = (pubsub.publish(TestMessage::new("1")), pubsub.publish(TestMessage::new("0")));
//!     assert_eq!((one.await, zero.await), (Action::Ack, Action::Nack));
//!     assert_eq!(subscription.stats().batches, 1);
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```

mod delivery;
mod memory;
mod source;

pub use delivery::{DeliveryBuilder, batch, delivery};
pub use memory::{MemoryPubSub, Published, TestMessage, outcome_of};
pub use source::ReadAnswer;
