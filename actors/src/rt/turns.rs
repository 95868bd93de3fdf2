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
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;

/// What comes on `channel`, as a stream for [`each_turn`] that hands over everything sent so
/// far in one turn. (`poll_recv` alone would spend tokio's cooperative budget, 128 a task's
/// poll, and end the turn there; what is queued is taken without it, and only an empty channel
/// registers for the next.)
pub(crate) fn channel<T>(mut channel: UnboundedReceiver<T>) -> impl Stream<Item = T> {
    futures::stream::poll_fn(move |cx| match channel.try_recv() {
        Ok(item) => Poll::Ready(Some(item)),
        Err(TryRecvError::Empty) => channel.poll_recv(cx),
        Err(TryRecvError::Disconnected) => Poll::Ready(None),
    })
}

/// Where one turn ends, whatever is still ready.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnLimit {
    /// Items handled in one turn.
    pub(crate) items: usize,
    /// Time spent in one turn: items whose handling does work (a handler that computes) end
    /// the turn early, so what it produced is not held back for long.
    pub(crate) time: Option<Duration>,
}

impl TurnLimit {
    /// At most `items` a turn, however long they take.
    pub(crate) const fn items(items: usize) -> Self {
        Self { items, time: None }
    }
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

    /// This turn is over: one item at least was handled, and either nothing more is ready or
    /// the turn reached its limit (then the rest comes in the next turn). Nothing by default.
    fn turn_ended(&mut self, ctx: &mut Self::Context) {
        let _ = ctx;
    }

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
    assert!(limit.items > 0, "a turn takes one item at least");
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

    /// Records how many items each turn handled, and the end; its turn is full after
    /// `full_after` items, when set.
    struct Counter {
        turns: Rc<RefCell<Vec<usize>>>,
        ended: Rc<RefCell<usize>>,
        this_turn: usize,
        full_after: Option<usize>,
    }

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl TurnHandler<u32> for Counter {
        fn handle_item(&mut self, _: u32, _: &mut Self::Context) {
            self.this_turn += 1;
        }

        fn turn_full(&self) -> bool {
            self.full_after.is_some_and(|n| self.this_turn >= n)
        }

        fn turn_ended(&mut self, _: &mut Self::Context) {
            self.turns
                .borrow_mut()
                .push(std::mem::take(&mut self.this_turn));
        }

        fn stream_ended(&mut self, _: &mut Self::Context) {
            *self.ended.borrow_mut() += 1;
        }
    }

    struct Watched {
        turns: Rc<RefCell<Vec<usize>>>,
        ended: Rc<RefCell<usize>>,
    }

    impl Watched {
        /// A counter polling `stream` in turns of `limit`.
        fn start<S: Stream<Item = u32> + 'static>(
            stream: S,
            limit: TurnLimit,
            full_after: Option<usize>,
        ) -> Self {
            let (turns, ended) = (Rc::default(), Rc::default());
            Counter::create({
                let (turns, ended) = (Rc::clone(&turns), Rc::clone(&ended));
                move |ctx| {
                    ctx.spawn(each_turn(stream, limit));
                    Counter {
                        turns,
                        ended,
                        this_turn: 0,
                        full_after,
                    }
                }
            });
            Self { turns, ended }
        }

        /// Lets the actor run until the stream has ended; the turns it saw.
        async fn until_ended(self) -> Vec<usize> {
            self.run_a_while().await;
            assert_eq!(*self.ended.borrow(), 1, "the end is handed over once");
            self.turns.take()
        }

        async fn run_a_while(&self) {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
        }
    }

    const PLENTY: TurnLimit = TurnLimit {
        items: 1024,
        time: None,
    };

    async fn turns_of(items: u32, limit: TurnLimit) -> Vec<usize> {
        Watched::start(futures::stream::iter(0..items), limit, None)
            .until_ended()
            .await
    }

    #[actix_rt::test]
    async fn every_ready_item_is_handled_in_one_turn() {
        // actix's `add_stream` would cut these into turns of 16.
        assert_eq!(turns_of(100, PLENTY).await, [100]);
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

    #[actix_rt::test]
    async fn a_full_turn_ends_and_the_rest_comes_in_the_next() {
        let watched = Watched::start(futures::stream::iter(0..10), PLENTY, Some(4));
        assert_eq!(watched.until_ended().await, [4, 4, 2]);
    }

    #[actix_rt::test]
    async fn a_turn_ends_with_what_is_ready_and_the_next_begins_when_more_comes() {
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        let watched = Watched::start(channel(receive), PLENTY, None);
        for n in 0..3 {
            send.send(n).unwrap();
        }
        watched.run_a_while().await;
        assert_eq!(*watched.turns.borrow(), [3], "no turn ends without an item");
        for n in 0..5 {
            send.send(n).unwrap();
        }
        drop(send);
        assert_eq!(watched.until_ended().await, [3, 5]);
    }

    #[actix_rt::test]
    async fn a_channel_hands_over_all_it_holds_past_tokios_budget() {
        // `poll_recv` alone would end the turn at tokio's budget: 128, 128, 44.
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        for n in 0..300 {
            send.send(n).unwrap();
        }
        drop(send);
        let watched = Watched::start(channel(receive), PLENTY, None);
        assert_eq!(watched.until_ended().await, [300]);
    }

    /// An actor that leaves the end of its stream to the default.
    struct Quiet;

    impl Actor for Quiet {
        type Context = Context<Self>;
    }

    impl TurnHandler<u32> for Quiet {
        fn handle_item(&mut self, _: u32, _: &mut Self::Context) {}
    }

    #[derive(Message)]
    #[rtype(result = "bool")]
    struct Alive;

    impl Handler<Alive> for Quiet {
        type Result = bool;
        fn handle(&mut self, _: Alive, _: &mut Self::Context) -> bool {
            true
        }
    }

    #[actix_rt::test]
    async fn by_default_the_end_of_a_stream_leaves_the_actor_running() {
        let quiet = Quiet::create(|ctx| {
            ctx.spawn(each_turn(futures::stream::iter(0..3), PLENTY));
            Quiet
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(quiet.send(Alive).await.unwrap());
    }
}
