//! Guards around user code: every call into it (handler, decoder, failure policy, progress
//! store) runs inside `catch_unwind` ([`call`], [`Guarded`]), including the drop of the futures
//! it returns, so a panic there is counted and logged and never kills a Leasehold actor.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A panic caught in user code; its payload is dropped unread (it may quote a payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Panicked;

/// Drops a panic payload, whose own `Drop` may panic again.
fn discard(payload: Box<dyn Any + Send>) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
}

/// Calls `f`, turning a panic into [`Panicked`].
pub(crate) fn call<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        discard(payload);
        Panicked
    })
}

/// Drops `value` inside `catch_unwind`.
fn drop_guarded<T>(value: T) {
    let _ = call(move || drop(value));
}

/// A future from user code whose polls and whose drop are guarded: a panic resolves it to
/// `Err(Panicked)`, and a future dropped before it finished (its worker stopped) cannot take the
/// worker down with a panicking `Drop`.
pub(crate) struct Guarded<F: Future + Unpin> {
    inner: Option<F>,
}

impl<F: Future + Unpin> Guarded<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner: Some(inner) }
    }
}

impl<F: Future + Unpin> Future for Guarded<F> {
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(Err(Panicked));
        };
        let polled = call(|| Pin::new(inner).poll(cx));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                drop_guarded(self.inner.take());
                Poll::Ready(Ok(output))
            }
            Err(panicked) => {
                drop_guarded(self.inner.take());
                Poll::Ready(Err(panicked))
            }
        }
    }
}

impl<F: Future + Unpin> Drop for Guarded<F> {
    fn drop(&mut self) {
        drop_guarded(self.inner.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("a user type that panics when dropped");
        }
    }

    #[test]
    fn a_panic_in_a_call_is_caught() {
        assert_eq!(call(|| 7), Ok(7));
        assert_eq!(call(|| -> u32 { panic!("user bug") }), Err(Panicked));
    }

    #[tokio::test]
    async fn a_future_that_panics_in_poll_or_in_drop_resolves_to_panicked() {
        let panics = async { panic!("in poll") }.boxed();
        assert_eq!(Guarded::new(panics).await, Err::<(), _>(Panicked));
        let guard = PanicsOnDrop;
        let finishes = async move {
            let _kept = &guard;
            5
        }
        .boxed();
        // Finishing drops what the future holds, and with it the value that panics: caught.
        assert_eq!(Guarded::new(finishes).await, Err(Panicked));
        // Dropped before it finished: caught too.
        let guard = PanicsOnDrop;
        let pending = async move {
            let _kept = &guard;
            futures::future::pending::<()>().await
        }
        .boxed();
        let mut guarded = Guarded::new(pending);
        assert!((&mut guarded).now_or_never().is_none());
        drop(guarded);
    }
}
