//! Flow control: how many messages and payload bytes may be outstanding at once.
//!
//! The supervisor takes a permit before it reads the next message from the stream and the
//! message's lease actor holds it until the message is settled, so at most
//! `max_outstanding_messages` messages are ever running, waiting for a worker or held by
//! `retry_after`, and at most `max_outstanding_bytes` of payload. (The same limits go to Pub/Sub
//! with the stream, which paces what it sends; this is what makes them hold here whatever the
//! server does.) A payload larger than `max_outstanding_bytes` waits until it is alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Permits for outstanding messages and bytes.
#[derive(Debug, Clone)]
pub(crate) struct FlowControl {
    messages: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_messages: u32,
    max_bytes: u32,
    /// Messages holding a [`FlowPermit`]: received and not yet settled. (A message permit
    /// taken for the next read is room reserved, not a message.)
    outstanding: Arc<AtomicUsize>,
}

/// One message's share of the limits; returned when dropped.
#[derive(Debug)]
pub(crate) struct FlowPermit {
    _message: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
    outstanding: Arc<AtomicUsize>,
}

impl Drop for FlowPermit {
    fn drop(&mut self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What is outstanding now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Messages received and not yet settled.
    pub messages: usize,
    /// Their payload bytes (a payload larger than the limit counts as the limit).
    pub bytes: usize,
}

impl FlowControl {
    /// Limits of `max_messages` and `max_bytes` (each at least 1, at most `u32::MAX`).
    pub(crate) fn new(max_messages: usize, max_bytes: usize) -> Self {
        let clamp = |n: usize| n.clamp(1, u32::MAX as usize) as u32;
        let (max_messages, max_bytes) = (clamp(max_messages), clamp(max_bytes));
        Self {
            messages: Arc::new(Semaphore::new(max_messages as usize)),
            bytes: Arc::new(Semaphore::new(max_bytes as usize)),
            max_messages,
            max_bytes,
            outstanding: Arc::default(),
        }
    }

    /// Room for one more message, if there is some now (without building a future to wait).
    pub(crate) fn try_message(&self) -> Option<OwnedSemaphorePermit> {
        self.messages.clone().try_acquire_owned().ok()
    }

    /// Waits for room for one more message.
    pub(crate) async fn message(&self) -> OwnedSemaphorePermit {
        self.messages
            .clone()
            .acquire_owned()
            .await
            .expect("flow-control semaphores are never closed")
    }

    /// Waits for room for `len` payload bytes, then joins them with the message's permit.
    pub(crate) async fn bytes(&self, message: OwnedSemaphorePermit, len: usize) -> FlowPermit {
        let n = u32::try_from(len)
            .unwrap_or(u32::MAX)
            .clamp(1, self.max_bytes);
        let bytes = match self.bytes.clone().try_acquire_many_owned(n) {
            Ok(bytes) => bytes,
            Err(_) => self
                .bytes
                .clone()
                .acquire_many_owned(n)
                .await
                .expect("flow-control semaphores are never closed"),
        };
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        FlowPermit {
            _message: message,
            _bytes: bytes,
            outstanding: self.outstanding.clone(),
        }
    }

    /// What is outstanding now.
    pub(crate) fn in_flight(&self) -> InFlight {
        InFlight {
            messages: self.outstanding.load(Ordering::Relaxed),
            bytes: self.max_bytes as usize - self.bytes.available_permits(),
        }
    }

    /// Resolves once nothing is outstanding.
    pub(crate) async fn all_returned(&self) {
        let _all = self.messages.acquire_many(self.max_messages).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn messages_are_bounded_and_returned_on_drop() {
        let flow = FlowControl::new(2, 1000);
        let a = flow.bytes(flow.message().await, 10).await;
        let _b = flow.bytes(flow.message().await, 10).await;
        assert_eq!(
            flow.in_flight(),
            InFlight {
                messages: 2,
                bytes: 20
            }
        );
        assert!(flow.message().now_or_never().is_none(), "a third must wait");
        assert!(
            flow.try_message().is_none(),
            "and is not taken without waiting either"
        );
        drop(a);
        assert!(flow.try_message().is_some());
    }

    #[tokio::test]
    async fn bytes_are_bounded_and_an_oversize_payload_waits_to_run_alone() {
        let flow = FlowControl::new(10, 100);
        let small = flow.bytes(flow.message().await, 60).await;
        let m = flow.message().await;
        let oversize = flow.bytes(m, 10_000);
        futures::pin_mut!(oversize);
        assert!(
            oversize.as_mut().now_or_never().is_none(),
            "waits for the room"
        );
        drop(small);
        let alone = oversize.await;
        assert_eq!(flow.in_flight().bytes, 100);
        drop(alone);
        assert_eq!(flow.in_flight(), InFlight::default());
    }

    #[tokio::test]
    async fn room_reserved_for_the_next_read_is_not_a_message() {
        let flow = FlowControl::new(3, 100);
        let _reserved = flow.message().await;
        assert_eq!(flow.in_flight().messages, 0);
    }

    #[tokio::test]
    async fn all_returned_waits_for_the_last_permit() {
        let flow = FlowControl::new(3, 100);
        let p = flow.bytes(flow.message().await, 1).await;
        assert!(flow.all_returned().now_or_never().is_none());
        drop(p);
        assert!(flow.all_returned().now_or_never().is_some());
    }
}
