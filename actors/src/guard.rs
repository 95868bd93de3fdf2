//! Guards around user code and around the life of actors.
//!
//! - [`call`] and [`Guarded`]: every call into user code (handler, decoder, failure policy,
//!   progress store) runs inside `catch_unwind`, including the drop of the futures it returns, so
//!   a panic there is counted and logged and never kills a Leasehold actor.
//! - [`Lifeline`]: runs a closure when an actor is dropped without having stopped cleanly (a
//!   panic in its own code, or its arbiter stopped under it), so its supervisor hears of the
//!   death instead of leaving messages stranded behind a dead mailbox.

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

/// Runs its closure when dropped, unless [`disarm`](Self::disarm)ed first.
///
/// An actor holds one and disarms it only where it stops on purpose (the command that stops it).
/// A panic in the actor's own code, or its arbiter stopping under it, drops the actor with the
/// lifeline armed, and the closure tells its supervisor. (`stopped()` is no place to disarm:
/// actix calls it on those deaths too, when it drops the context.)
pub(crate) struct Lifeline(Option<Box<dyn FnOnce() + Send>>);

impl Lifeline {
    pub(crate) fn new(on_death: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(on_death)))
    }

    /// The actor stopped cleanly: nothing to report.
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        if let Some(on_death) = self.0.take() {
            on_death();
        }
    }
}

impl std::fmt::Debug for Lifeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Lifeline(armed)"
        } else {
            "Lifeline(disarmed)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

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

    #[test]
    fn a_lifeline_reports_unless_disarmed() {
        let died = Arc::new(AtomicBool::new(false));
        let d = died.clone();
        let mut clean = Lifeline::new(move || d.store(true, Ordering::SeqCst));
        clean.disarm();
        drop(clean);
        assert!(!died.load(Ordering::SeqCst));
        let d = died.clone();
        drop(Lifeline::new(move || d.store(true, Ordering::SeqCst)));
        assert!(died.load(Ordering::SeqCst));
    }
}
