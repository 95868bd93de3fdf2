//! The relay's decisions, plain data and pure functions tested without I/O: its options and
//! their ranges (`options`), what a failed send means and how long its row waits (`failure`),
//! and what a round does with its rows once the sends answered (`round`). Which rows a lease
//! takes, one ordering key in commit order, is the stores' shared rule,
//! `leasehold::store::leasable`.
//!
//! May use nothing else of the crate.

pub(crate) mod failure;
pub(crate) mod options;
pub(crate) mod round;
