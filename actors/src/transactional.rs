//! Running a handler inside a store's transaction: the single-message and batch runners of
//! the transactional registrations, on the traits of [`store`](crate::store).
//!
//! May use: `rt`, `rules`, `store`, `lease`, `api`. `batch` uses `batch_run`, which uses `single`.

pub(crate) mod batch;
pub(crate) mod batch_run;
pub(crate) mod single;
