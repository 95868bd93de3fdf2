//! How the client's errors become the runtime's `StoreError`: an abort is
//! `StoreError::Aborted`, anything else `StoreError::Backend`.
//!
//! It uses no other module of the store.

use gcloud_gax::grpc::{Code, Status};
use leasehold_actors::error::{Cause, StoreError};

/// Whether Spanner aborted the transaction: nothing of it committed, and it may be run again.
pub(crate) fn is_abort(status: &Status) -> bool {
    status.code() == Code::Aborted
}

/// A call's error as the runtime sees it: an abort is [`StoreError::Aborted`] (the handler runs
/// again), anything else [`StoreError::Backend`] (an outage: the message is held, then retried).
pub(crate) fn store_error(status: Status) -> StoreError {
    if is_abort(&status) {
        StoreError::Aborted(Cause::new(status))
    } else {
        StoreError::Backend(Cause::new(status))
    }
}

/// The client's error (a session that could not be had, say) as the runtime sees it.
pub(crate) fn client_error(e: gcloud_spanner::client::Error) -> StoreError {
    match e {
        gcloud_spanner::client::Error::GRPC(status) => store_error(status),
        other => StoreError::Backend(Cause::new(other)),
    }
}
