//! A stream whose ready items an actor handles in one turn, then hears that the turn is over.
//!
//! actix's own `add_stream` hands an actor at most 16 items per poll and wakes it again for the
//! rest, so a response of 100 messages went through the supervisor, the pool and a worker in
//! pieces of 16 to 32, and each piece crossed to the other thread on its own: an eventfd write
//! and a wake of a parked thread per piece, more than the pieces' own work with quick handlers.
//! [`each_turn`] hands the actor every item that is ready, up to a [`TurnLimit`], then calls
//! [`TurnHandler::turn_ended`] once, where the actor sends what the turn produced to the next
//! thread in one go. Past its limit it yields and wakes itself, so the other futures of the
//! thread (the official client's among them) still get their turn.

use actix::prelude::*;
use futures::Stream;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Where one turn ends, whatever is still ready.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnLimit {
    /// Items handled in one turn.
    pub(crate) items: usize,
    /// Time spent in one turn: items whose handling does work (a handler that computes) end
    /// the turn early, so what it produced is not held back for long.
    pub(crate) time: Option<Duration>,
}

/// What handles the items of a stream polled by [`each_turn`].
pub(crate) trait TurnHandler<I>: Actor {
    /// One item.
    fn handle_item(&mut self, item: I, ctx: &mut Self::Context);

    /// Whether this turn has taken enough, whatever is still ready: the turn ends, and the
    /// rest comes in the next one, after the other futures of the thread. Never, by default.
    fn turn_full(&self) -> bool {
        false
    }

    /// The items ready in this turn were handled (one at least).
    fn turn_ended(&mut self, ctx: &mut Self::Context);

    /// The stream ended. Nothing by default (actix's `StreamHandler` would stop the actor).
    fn stream_ended(&mut self, ctx: &mut Self::Context) {
        let _ = ctx;
    }
}

/// Polls `stream` for the actor: every ready item to [`TurnHandler::handle_item`], then
/// [`TurnHandler::turn_ended`]; ends with the stream. Spawn it with `ctx.spawn`.
pub(crate) fn each_turn<A, S>(stream: S, limit: TurnLimit) -> impl ActorFuture<A, Output = ()>
where
    A: TurnHandler<S::Item>,
    S: Stream + 'static,
{
    Turns {
        stream: Box::pin(stream),
        limit,
    }
}

struct Turns<S> {
    stream: Pin<Box<S>>,
    limit: TurnLimit,
}

impl<A, S> ActorFuture<A> for Turns<S>
where
    A: TurnHandler<S::Item>,
    S: Stream,
{
    type Output = ();

    fn poll(
        mut self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut A::Context,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        let began = self.limit.time.map(|_| Instant::now());
        let mut handled = 0;
        let over = loop {
            if handled == self.limit.items
                || (handled > 0 && act.turn_full())
                || (handled > 0
                    && began
                        .zip(self.limit.time)
                        .is_some_and(|(b, t)| b.elapsed() >= t))
            {
                break true;
            }
            match self.stream.as_mut().poll_next(task) {
                Poll::Ready(Some(item)) => {
                    act.handle_item(item, ctx);
                    handled += 1;
                }
                Poll::Ready(None) => {
                    if handled > 0 {
                        act.turn_ended(ctx);
                    }
                    act.stream_ended(ctx);
                    return Poll::Ready(());
                }
                Poll::Pending => break false,
            }
        };
        if handled > 0 {
            act.turn_ended(ctx);
        }
        if over {
            // More may be ready: come back after the other futures of this thread.
            task.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Records how many items each turn handled, and the end.
    struct Counter {
        turns: Rc<RefCell<Vec<usize>>>,
        ended: Rc<RefCell<bool>>,
        this_turn: usize,
    }

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl TurnHandler<u32> for Counter {
        fn handle_item(&mut self, _: u32, _: &mut Self::Context) {
            self.this_turn += 1;
        }

        fn turn_ended(&mut self, _: &mut Self::Context) {
            self.turns
                .borrow_mut()
                .push(std::mem::take(&mut self.this_turn));
        }

        fn stream_ended(&mut self, _: &mut Self::Context) {
            *self.ended.borrow_mut() = true;
        }
    }

    async fn turns_of(items: u32, limit: TurnLimit) -> Vec<usize> {
        let (turns, ended) = (Rc::default(), Rc::default());
        Counter::create({
            let (turns, ended) = (Rc::clone(&turns), Rc::clone(&ended));
            move |ctx| {
                ctx.spawn(each_turn(futures::stream::iter(0..items), limit));
                Counter {
                    turns,
                    ended,
                    this_turn: 0,
                }
            }
        });
        for _ in 0..100 {
            if *ended.borrow() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(*ended.borrow(), "the end of the stream is handed over too");
        turns.take()
    }

    #[actix_rt::test]
    async fn every_ready_item_is_handled_in_one_turn() {
        // actix's `add_stream` would cut these into turns of 16.
        let limit = TurnLimit {
            items: 512,
            time: None,
        };
        assert_eq!(turns_of(100, limit).await, [100]);
    }

    #[actix_rt::test]
    async fn a_turn_ends_at_its_limit_and_the_rest_comes_in_the_next() {
        let limit = TurnLimit {
            items: 40,
            time: None,
        };
        assert_eq!(turns_of(100, limit).await, [40, 40, 20]);
    }

    #[actix_rt::test]
    async fn a_turn_ends_when_its_time_is_up() {
        let limit = TurnLimit {
            items: 512,
            time: Some(Duration::ZERO),
        };
        assert_eq!(turns_of(3, limit).await, [1, 1, 1]);
    }
}
