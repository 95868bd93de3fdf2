//! How a message reaches a lease actor that is already running: the actor's [`Slot`], which the
//! supervisor fills and the actor empties when woken, and the [`IdleSlots`] of the actors that
//! hold no message. Both are single-threaded (the supervisor and its lease actors share one
//! arbiter) and allocate nothing per message.
//!
//! Generic over what is handed over and how the actor is addressed, so this file does not know
//! the lease actor (`actor.rs` uses it, never the reverse).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::Waker;

/// Where one actor's next message is left, and how the actor is woken to take it.
pub(crate) struct Slot<T, A> {
    /// The message handed over and not yet taken.
    next: Cell<Option<T>>,
    /// Wakes the actor's task (kept fresh by the actor).
    waker: Cell<Option<Waker>>,
    /// How many messages were handed over: the generation of the last one.
    generation: Cell<u64>,
    /// The actor's address, set once it is started.
    addr: RefCell<Option<A>>,
    /// Cleared when the actor ends.
    alive: Cell<bool>,
}

impl<T, A: Clone> Slot<T, A> {
    /// The slot of an actor about to be started.
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(Self {
            next: Cell::new(None),
            waker: Cell::new(None),
            generation: Cell::new(0),
            addr: RefCell::new(None),
            alive: Cell::new(true),
        })
    }

    /// The actor's address, once it is started.
    pub(crate) fn set_addr(&self, addr: A) {
        *self.addr.borrow_mut() = Some(addr);
    }

    /// The actor's address.
    pub(crate) fn addr(&self) -> A {
        self.addr
            .borrow()
            .clone()
            .expect("set when the actor started")
    }

    /// The generation the next message handed over will have.
    pub(crate) fn next_generation(&self) -> u64 {
        self.generation.set(self.generation.get() + 1);
        self.generation.get()
    }

    /// Leaves `next` for the actor, and wakes it unless `listen(next, waker)` says that what it
    /// handed over will wake the actor by itself (it registered the actor's waker where the
    /// actor waits next): then the actor takes `next` when that wakes it, one wake-up instead of
    /// two. An actor not polled yet has no waker: it takes `next` in its first poll.
    pub(crate) fn put(&self, mut next: T, listen: impl FnOnce(&mut T, &Waker) -> bool) {
        if let Some(waker) = self.waker.take() {
            if !listen(&mut next, &waker) {
                waker.wake_by_ref();
            }
            self.waker.set(Some(waker));
        }
        self.next.set(Some(next));
    }

    /// What was handed over, for the actor.
    pub(crate) fn take(&self) -> Option<T> {
        self.next.take()
    }

    /// The actor's task is polled with `waker`: it wakes the actor from now on.
    pub(crate) fn remember(&self, waker: &Waker) {
        let kept = match self.waker.take() {
            Some(kept) if kept.will_wake(waker) => kept,
            _ => waker.clone(),
        };
        self.waker.set(Some(kept));
    }

    /// The actor ended: nothing is handed to it any more; what it had not taken is dropped.
    pub(crate) fn end(&self) {
        self.alive.set(false);
        drop(self.next.take());
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The slots of the actors that hold no message; once closed, none is taken again.
pub(crate) struct IdleSlots<T, A> {
    idle: RefCell<Vec<Rc<Slot<T, A>>>>,
    closed: Cell<bool>,
}

impl<T, A> Default for IdleSlots<T, A> {
    fn default() -> Self {
        Self {
            idle: RefCell::default(),
            closed: Cell::new(false),
        }
    }
}

impl<T, A: Clone> IdleSlots<T, A> {
    /// The actor of `slot` holds no message now.
    pub(crate) fn push(&self, slot: Rc<Slot<T, A>>) {
        self.idle.borrow_mut().push(slot);
    }

    /// The slot of an idle actor that is still alive, if any.
    pub(crate) fn pop(&self) -> Option<Rc<Slot<T, A>>> {
        let mut idle = self.idle.borrow_mut();
        while let Some(slot) = idle.pop() {
            if slot.alive.get() {
                return Some(slot);
            }
        }
        None
    }

    /// No message comes any more: the idle actors are woken (to end).
    pub(crate) fn close(&self) {
        self.closed.set(true);
        for slot in self.idle.take() {
            slot.wake();
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_handed_message_wakes_the_actor_each_time_and_is_taken_once() {
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let slot: Rc<Slot<&str, ()>> = Slot::new();
        slot.remember(&Waker::from(woken.clone()));
        assert_eq!(slot.next_generation(), 1);
        slot.put("first", |_, _| false);
        assert_eq!(slot.take(), Some("first"));
        assert_eq!(slot.take(), None);
        assert_eq!(slot.next_generation(), 2);
        slot.put("second", |_, _| false);
        assert_eq!(woken.0.load(Ordering::SeqCst), 2, "the waker is kept");
    }

    #[test]
    fn a_message_that_wakes_the_actor_by_itself_is_left_without_a_wake() {
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let slot: Rc<Slot<&str, ()>> = Slot::new();
        // Not polled yet: nothing to listen with, nothing woken; the first poll takes it.
        slot.put("first", |_, _| unreachable!("no waker yet"));
        assert_eq!(slot.take(), Some("first"));
        slot.remember(&Waker::from(woken.clone()));
        let mut listened = None;
        slot.put("second", |next, waker| {
            listened = Some((*next, waker.will_wake(&Waker::from(woken.clone()))));
            true
        });
        assert_eq!(listened, Some(("second", true)), "given the actor's waker");
        assert_eq!(woken.0.load(Ordering::SeqCst), 0, "not woken");
        assert_eq!(slot.take(), Some("second"));
    }

    #[test]
    fn an_ended_actor_is_never_taken_from_the_idle_list() {
        let idle: IdleSlots<&str, ()> = IdleSlots::default();
        let (ended, alive) = (Slot::new(), Slot::new());
        idle.push(alive.clone());
        idle.push(ended.clone());
        ended.end();
        assert!(Rc::ptr_eq(&idle.pop().unwrap(), &alive));
        assert!(idle.pop().is_none());
    }

    #[test]
    fn closing_wakes_every_idle_actor() {
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let idle: IdleSlots<&str, ()> = IdleSlots::default();
        for _ in 0..3 {
            let slot = Slot::new();
            slot.remember(&Waker::from(woken.clone()));
            idle.push(slot);
        }
        idle.close();
        assert!(idle.is_closed());
        assert_eq!(woken.0.load(Ordering::SeqCst), 3);
        assert!(idle.pop().is_none());
    }
}
