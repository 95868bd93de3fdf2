#![doc = include_str!("../TESTING.md")]

mod delivery;
mod memory;
mod source;

pub use delivery::{DeliveryBuilder, batch, delivery};
pub use memory::{MemoryPubSub, Published, TestMessage, outcome_of};
pub use source::ReadAnswer;
