//! Many concurrent futures of one actor, polled as one.
//!
//! An actix context polls every future spawned into it (`ctx.spawn`) each time the actor wakes,
//! so a thousand confirmations waiting in the ack sink cost a thousand polls per wake-up. A
//! [`Tasks`] set keeps them in one `FuturesUnordered`, which polls only the futures that were
//! woken; the actor registers it once as a stream (`ctx.add_stream(tasks.completions())`, or a
//! turn at a time with `rt/turns.rs`'s `each_turn`) and receives each output as an item.

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

struct Inner<F> {
    running: FuturesUnordered<F>,
    /// The waker of the stream that polls `running`, from its last poll.
    ///
    /// Invariant: every future pushed is polled again with a working waker. A push wakes this
    /// waker whether the set was idle or busy: a future first polled by [`Tasks::start`] saw only
    /// a no-op waker, and the actor may have polled this stream already in its current turn.
    waker: Option<Waker>,
}

/// A set of futures whose outputs come out of one stream, in completion order.
pub(crate) struct Tasks<F> {
    inner: Rc<RefCell<Inner<F>>>,
}

impl<F: Future> Tasks<F> {
    pub(crate) fn new() -> Self {
        Self {
            inner: Rc::new(RefCell::new(Inner {
                running: FuturesUnordered::new(),
                waker: None,
            })),
        }
    }

    /// Polls `future` once now and returns its output if it is ready; otherwise keeps it, and its
    /// output comes out of [`completions`](Self::completions).
    ///
    /// The first poll happens here, not at the set's next turn: a future that finishes at once
    /// never enters the set, and a lazy one (the client's confirmed ack queues the ack only when
    /// first polled) starts at once. The no-op waker of that poll is replaced when the set polls
    /// the future again, with a waker that works.
    pub(crate) fn start(&self, mut future: F) -> Option<F::Output>
    where
        F: Unpin,
    {
        match poll_once(std::pin::Pin::new(&mut future)) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => {
                self.push(future);
                None
            }
        }
    }

    /// Adds a future; its output comes out of [`completions`](Self::completions). It is polled
    /// (again) with the set's waker at the set's next poll.
    pub(crate) fn push(&self, future: F) {
        let inner = self.inner.borrow_mut();
        inner.running.push(future);
        if let Some(waker) = &inner.waker {
            waker.wake_by_ref();
        }
    }

    /// Futures not finished yet.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.borrow().running.len()
    }

    /// The outputs, as the futures finish. Never ends: an empty set waits for the next `push`.
    pub(crate) fn completions(&self) -> impl Stream<Item = F::Output> + 'static
    where
        F: 'static,
    {
        let inner = self.inner.clone();
        futures::stream::poll_fn(move |cx| {
            let mut inner = inner.borrow_mut();
            if !inner
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                inner.waker = Some(cx.waker().clone());
            }
            match inner.running.poll_next_unpin(cx) {
                Poll::Ready(Some(output)) => Poll::Ready(Some(output)),
                // Empty: `FuturesUnordered` would say the stream ended; wait for a push instead.
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            }
        })
    }
}

/// Polls `future` once with a waker that does nothing: a first poll that starts a lazy future
/// (or finishes a quick one) here, whose `Pending` must be followed by a poll with a working
/// waker (the set's, or a `select!`).
pub(crate) fn poll_once<F: Future + ?Sized>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(
        futures::task::noop_waker_ref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::future::LocalBoxFuture;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn outputs_come_out_in_completion_order_and_an_empty_set_waits() {
        let tasks: Tasks<LocalBoxFuture<'static, u32>> = Tasks::new();
        let mut done = Box::pin(tasks.completions());
        // Ready at once: returned, never kept.
        assert_eq!(tasks.start(async { 0 }.boxed_local()), Some(0));
        assert_eq!(tasks.len(), 0);
        tasks.start(
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                1
            }
            .boxed_local(),
        );
        tasks.start(
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                2
            }
            .boxed_local(),
        );
        assert_eq!(done.next().await, Some(2));
        assert_eq!(done.next().await, Some(1));
        assert_eq!(tasks.len(), 0);
        // Empty: the stream waits rather than ending, and wakes for the next push.
        assert!(done.next().now_or_never().is_none());
        tasks.push(async { 3 }.boxed_local());
        assert_eq!(done.next().await, Some(3));
    }

    /// A future started while others are still running is polled again with a working waker:
    /// the consumer of the set, already waiting, is woken by the start.
    #[tokio::test(start_paused = true)]
    async fn a_future_started_while_the_set_is_busy_is_woken() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let tasks: Tasks<LocalBoxFuture<'static, u32>> = Tasks::new();
                let mut done = Box::pin(tasks.completions());
                tasks.start(
                    async {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        1
                    }
                    .boxed_local(),
                );
                // The consumer waits on a busy set.
                let consumer = tokio::task::spawn_local(async move { done.next().await });
                tokio::task::yield_now().await;
                let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
                tasks.start(async move { rx.await.unwrap() }.boxed_local());
                // Only the no-op waker of the first poll saw this send.
                tx.send(2).unwrap();
                let first = tokio::time::timeout(Duration::from_secs(1), consumer).await;
                assert_eq!(first.expect("the consumer was woken").unwrap(), Some(2));
            })
            .await;
    }
}
