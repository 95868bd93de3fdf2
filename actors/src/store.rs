//! Where finished messages are remembered: the [`ProgressStore`] (and its in-memory
//! [`MemoryStore`]), which lets a redelivery after a lost ack be settled again without running
//! the handler, and the [`TransactionalStore`] whose transaction a handler's writes and the
//! message's record commit in together, and the [`OutboxStore`] whose transactions publish
//! through a transactional outbox ([`OutboxMessage`]).
//!
//! A store knows a message by its key: its message id, or, for a registration that dedupes on
//! an attribute ([`Registration::dedupe_on`](crate::Registration::dedupe_on)), `attribute=value`.
//! A key may hold an attribute's value: a store logs it through [`loggable_key`].
//!
//! May use: `rt`, `rules`, `status`. The runners that use these traits are in `transactional/`.

mod outbox;
pub(crate) mod progress;
mod transactional;

pub use crate::error::{OutboxError, StoreError};
pub use crate::rules::outbox::{Candidate, MAX_KEY_BYTES, Places, leasable};
pub use crate::rules::outcome::Completed;
pub use outbox::{
    Backlog, CommitSignal, FailedRow, OUTBOX_KEY_ATTRIBUTE, OutboxMessage, OutboxRow, OutboxStore,
    PreparedMessage, Publisher,
};
pub use progress::{MemoryStore, ProgressStore, loggable_key};
pub use transactional::{
    BatchClaim, BatchClaims, Claim, MIN_LEASE_FOR_RERUN, TransactionalBatchStore,
    TransactionalStore,
};
