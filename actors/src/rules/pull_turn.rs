//! How many messages one turn of a pull loop reads before it yields to the rest of the
//! supervisor's thread: what the worker pool can start now.
//!
//! A turn reads what its stream has ready (a response's messages, already in the client), and
//! the pool takes everything the turn dispatched in its own next turn and hands it to the
//! workers in one go: one wake of a worker thread for the lot. Each stream's turn reads the
//! pool's load as the pool last published it: with several streams ready at once, the turns of
//! one pass of the supervisor may together read more than the pool can start, and the rest
//! waits in its schedule, leased, as any message beyond the pool's places does. Reading far past what the pool
//! can start only delays that hand-out while the workers idle. (A message left in the client
//! for a later turn is leased all the same: the client leases a response's messages when it
//! reads the response.)

/// The least a turn reads when there is more: when the pool has no free place, what is read
/// waits in its schedule, and the turn is as long as actix's own streams make it.
pub(crate) const PULL_TURN_LEAST: usize = 16;

/// The pool's load as it published it ([`Stats`](crate::status::stats::Stats) `running` and
/// `waiting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolLoad {
    /// Messages whose handler runs (or, for batches, in running and forming batches).
    pub(crate) running: usize,
    /// Messages dispatched to the pool that wait for a place.
    pub(crate) waiting: usize,
}

/// One turn of the pull loops: how many it may read, and how many it has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PullTurn {
    /// Messages the pool runs at once (`workers`; for batches, `workers` batches' worth).
    places: usize,
    /// What this turn may read, set by its first message; `None` between turns.
    allowed: Option<usize>,
    read: usize,
}

impl PullTurn {
    /// Turns for a pool of `places`.
    pub(crate) fn new(places: usize) -> Self {
        Self {
            places,
            ..Self::default()
        }
    }

    /// A message was read in this turn; `load` is the pool's as the turn began (read at the
    /// turn's first message).
    pub(crate) fn read(&mut self, load: impl FnOnce() -> PoolLoad) {
        if self.allowed.is_none() {
            self.allowed = Some(self.allowance(load()));
        }
        self.read += 1;
    }

    /// What a turn that begins with the pool at `load` may read: its free places, at least
    /// [`PULL_TURN_LEAST`].
    fn allowance(&self, load: PoolLoad) -> usize {
        let free = self
            .places
            .saturating_sub(load.running.saturating_add(load.waiting));
        free.max(PULL_TURN_LEAST)
    }

    /// Whether this turn has read what it may.
    pub(crate) fn is_full(&self) -> bool {
        self.allowed.is_some_and(|allowed| self.read >= allowed)
    }

    /// The turn is over.
    pub(crate) fn end(&mut self) {
        self.allowed = None;
        self.read = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn_reads(turn: &mut PullTurn, running: usize, waiting: usize) -> usize {
        let mut read = 0;
        while !turn.is_full() && read < 1_000 {
            turn.read(|| PoolLoad { running, waiting });
            read += 1;
        }
        turn.end();
        read
    }

    #[test]
    fn an_idle_pool_gets_as_many_as_it_can_start() {
        let mut turn = PullTurn::new(64);
        assert_eq!(turn_reads(&mut turn, 0, 0), 64);
        assert_eq!(turn_reads(&mut turn, 60, 0), PULL_TURN_LEAST);
        assert_eq!(turn_reads(&mut turn, 10, 4), 50);
    }

    #[test]
    fn a_full_pool_gets_the_least() {
        let mut turn = PullTurn::new(64);
        assert_eq!(turn_reads(&mut turn, 64, 0), PULL_TURN_LEAST);
        assert_eq!(turn_reads(&mut turn, 64, 500), PULL_TURN_LEAST);
    }

    #[test]
    fn the_load_is_read_once_a_turn() {
        let mut turn = PullTurn::new(8);
        let mut asked = 0;
        for _ in 0..3 {
            turn.read(|| {
                asked += 1;
                PoolLoad {
                    running: 0,
                    waiting: 0,
                }
            });
        }
        assert_eq!(asked, 1);
        assert!(!turn.is_full());
        turn.end();
        assert!(!turn.is_full(), "a new turn has read nothing");
        turn.read(|| {
            asked += 1;
            PoolLoad {
                running: 0,
                waiting: 0,
            }
        });
        assert_eq!(asked, 2, "a new turn reads the load again");
    }
}
