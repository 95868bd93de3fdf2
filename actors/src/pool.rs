//! Running handlers: the worker pool that decides which message runs next (with `rules`'
//! schedule and batcher) and hands it on, the job queue between the pool and its workers, the
//! single and batch jobs, and the crew of workers, one actor per thread.
//!
//! May use: `rt`, `rules`, `status`, `store`, `lease`, `api`.

pub(crate) mod batch_job;
pub(crate) mod crew;
pub(crate) mod holding;
pub(crate) mod job;
pub(crate) mod job_queue;
pub(crate) mod messages;
pub(crate) mod one_job;
pub(crate) mod ticket;
pub(crate) mod work;
pub(crate) mod worker;
pub(crate) mod worker_pool;
