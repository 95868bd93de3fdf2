//! A stream whose items an actor handles all in one turn, as many as are ready.
//!
//! actix's own `add_stream` hands an actor at most 16 items per poll, then wakes it again for the
//! rest. For the supervisor's streams and the pool's dispatches, that cut a response of 100
//! messages into seven turns, and each turn's jobs went to the worker threads on their own,
//! waking a parked thread each time. [`handle_ready`] hands over up to [`MAX_PER_TURN`] in one
//! turn, then yields the same way, so other futures on the thread still get their turn.

use actix::prelude::*;
use futures::Stream;
use std::pin::Pin;
use std::task::Poll;

/// The most items handled in one turn before the actor yields to the other futures of its
/// thread (the official client's own tasks among them).
pub(crate) const MAX_PER_TURN: usize = 512;

/// What handles the items of a stream polled by [`handle_ready`].
pub(crate) trait HandleReady<I>: Actor {
    /// One item.
    fn handle_ready(&mut self, item: I, ctx: &mut Self::Context);

    /// The stream ended. Nothing by default (actix's `StreamHandler` would stop the actor).
    fn ready_ended(&mut self, ctx: &mut Self::Context) {
        let _ = ctx;
    }
}

/// Polls `stream` for the actor, handing it every item ready; ends with the stream. Spawn it
/// with `ctx.spawn`.
pub(crate) fn handle_ready<A, S>(stream: S) -> impl ActorFuture<A, Output = ()>
where
    A: HandleReady<S::Item>,
    S: Stream + 'static,
{
    Ready {
        stream: Box::pin(stream),
    }
}

struct Ready<S> {
    stream: Pin<Box<S>>,
}

impl<A, S> ActorFuture<A> for Ready<S>
where
    A: HandleReady<S::Item>,
    S: Stream,
{
    type Output = ();

    fn poll(
        mut self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut A::Context,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        for _ in 0..MAX_PER_TURN {
            match self.stream.as_mut().poll_next(task) {
                Poll::Ready(Some(item)) => act.handle_ready(item, ctx),
                Poll::Ready(None) => {
                    act.ready_ended(ctx);
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        task.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Records how many items were handled before each `EndTurn` it queued ran, and the end.
    struct Counter {
        turns: Rc<RefCell<Vec<usize>>>,
        ended: Rc<RefCell<bool>>,
        this_turn: usize,
    }

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl HandleReady<u32> for Counter {
        fn handle_ready(&mut self, _: u32, ctx: &mut Self::Context) {
            if self.this_turn == 0 {
                // Runs after the items handled before the stream yields (as the pool's hand-out
                // to the workers does).
                ctx.notify(EndTurn);
            }
            self.this_turn += 1;
        }

        fn ready_ended(&mut self, _: &mut Self::Context) {
            *self.ended.borrow_mut() = true;
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct EndTurn;

    impl Handler<EndTurn> for Counter {
        type Result = ();
        fn handle(&mut self, _: EndTurn, _: &mut Self::Context) {
            self.turns
                .borrow_mut()
                .push(std::mem::take(&mut self.this_turn));
        }
    }

    #[actix_rt::test]
    async fn a_burst_of_ready_items_is_handled_before_what_it_queued_runs() {
        let (turns, ended) = (Rc::default(), Rc::default());
        Counter::create({
            let (turns, ended) = (Rc::clone(&turns), Rc::clone(&ended));
            move |ctx| {
                // actix's `add_stream` would cut these into turns of 16 (then 32).
                ctx.spawn(handle_ready(futures::stream::iter(0..100u32)));
                Counter {
                    turns,
                    ended,
                    this_turn: 0,
                }
            }
        });
        for _ in 0..100 {
            if *ended.borrow() && !turns.borrow().is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(*turns.borrow(), [100]);
        assert!(*ended.borrow(), "the end of the stream is handed over too");
    }
}
