//! Where finished messages are remembered: the [`ProgressStore`] (and its in-memory
//! [`MemoryStore`]), which lets a redelivery after a lost ack be settled again without running
//! the handler, and the [`TransactionalStore`] whose transaction a handler's writes and the
//! message's record commit in together, and the [`OutboxStore`] whose transactions publish
//! through a transactional outbox ([`OutboxMessage`]).
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
pub use progress::{MemoryStore, ProgressStore};
pub use transactional::{
    BatchClaim, BatchClaims, Claim, MIN_LEASE_FOR_RERUN, TransactionalBatchStore,
    TransactionalStore,
};
