//! One message's lease, from receipt to settlement: the lease actor that holds the client's
//! handle (and so the lease) and carries out the outcome, reused message after message (the
//! hand-over slot, and what it holds of one message), the settlement right that travels with the
//! message, the registry of a subscription's leases with their one budget timer, and the ack
//! sink that awaits exactly-once confirmations.
//!
//! May use: `rt`, `rules`, `status`, `source`, `store`.

pub(crate) mod ack_sink;
pub(crate) mod actor;
pub(crate) mod budgets;
pub(crate) mod handover;
pub(crate) mod held;
pub(crate) mod registry;
pub(crate) mod settle_right;
pub(crate) mod settled;
