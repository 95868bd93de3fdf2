//! Running a handler inside a store's transaction: the single-message and batch runners of
//! the transactional registrations, on the traits of [`store`](crate::store).
//!
//! May use: `rt`, `rules`, `store`, `lease`, `api`.

pub(crate) mod batch;
pub(crate) mod single;
