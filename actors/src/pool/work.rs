//! What a worker takes from the queue ([`Work`]): one job, or a batch of them. Plain data: the
//! pool fills it, a worker runs it. May use `lease` (to mark where a job's right is).

use crate::lease::settle_right::Place;
use crate::pool::job::Job;

/// What a worker takes from the queue: one message, or a batch of them (a batch registration).
// `One` is the hot path: boxing its job would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Work {
    One(Job),
    Batch(Vec<Job>),
}

impl Work {
    /// Marks every right of the work as in the workers' queue.
    pub(crate) fn queued(mut self) -> Self {
        match &mut self {
            Work::One(job) => job.right.moved_to(Place::Queued),
            Work::Batch(jobs) => {
                for job in jobs {
                    job.right.moved_to(Place::Queued);
                }
            }
        }
        self
    }

    /// The work's jobs, one or a batch.
    pub(crate) fn into_jobs(self) -> Vec<Job> {
        match self {
            Work::One(job) => vec![job],
            Work::Batch(jobs) => jobs,
        }
    }
}
