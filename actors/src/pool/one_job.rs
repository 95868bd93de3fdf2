//! One message's job from its admission to its settle ([`run_one`]): the decoder's fetch when
//! the registration's own decoder needs one, the decoder and the handler, the record, the
//! settle. What a job carries and how it ends is `job.rs`.

use crate::api::decode::Preparing;
use crate::api::delivery::Delivery;
use crate::api::handler::{ErasedHandler, Started};
use crate::pool::job::{Admitted, Job, JobContext, Outbox, Rerun, Running, admit};
use crate::rt::guard::{self, Guarded, Panicked};
use crate::rt::tasks::poll_once;
use crate::rules::breaker::Verdict;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use tokio::time::Instant;
use tracing::Instrument;

/// Starts one job: the store, the decoder's fetch, the decoder, the handler, the record, the
/// settle. A job that ends in its first poll (a quick handler, a replay, a blocking handler)
/// ends here, with nothing boxed; what waits (a fetch, a handler, a record) goes on in the
/// returned future.
pub(crate) fn run_one(
    job: Job,
    cx: Arc<JobContext>,
    outbox: Rc<Outbox>,
) -> Option<LocalBoxFuture<'static, ()>> {
    let admitted = admit(job, &cx, outbox)?;
    let began = Instant::now();
    let preparing = match prepare(&cx, &admitted.delivery, &admitted.span) {
        Ok(None) => return start(admitted, cx, began),
        Ok(Some(preparing)) => preparing,
        Err(Panicked) => return running(admitted, cx, began).0.panicked_in_decoder(),
    };
    Some(Box::pin(async move {
        let span = admitted.span.clone();
        match Guarded::new(preparing).instrument(span).await {
            Ok(Ok(())) => {
                if let Some(rest) = start(admitted, cx, began) {
                    rest.await;
                }
            }
            Ok(Err(error)) => {
                let (running, _, delivery) = running(admitted, cx, began);
                let outcome = running.undecodable(error, delivery);
                if let Some(recording) = running.finish(outcome) {
                    recording.await;
                }
            }
            Err(Panicked) => {
                if let Some(recording) = running(admitted, cx, began).0.panicked_in_decoder() {
                    recording.await;
                }
            }
        }
    }))
}

/// What the registration's own decoder fetches before it decodes `delivery` (`None`: nothing,
/// or no decoder of its own).
pub(crate) fn prepare(
    cx: &JobContext,
    delivery: &Delivery,
    span: &tracing::Span,
) -> Result<Option<Preparing>, Panicked> {
    let Some(prepare) = &cx.prepare else {
        return Ok(None);
    };
    let _entered = span.enter();
    guard::call(|| prepare(delivery))
}

/// An admitted job as it starts running: its [`Running`], its payload and its delivery.
pub(crate) fn running(
    admitted: Admitted,
    cx: Arc<JobContext>,
    began: Instant,
) -> (Running, Bytes, Delivery) {
    let Admitted {
        delivery,
        data,
        span,
        right,
        ticket,
    } = admitted;
    let rerun = Rerun::keep(cx.holds_failures, &delivery, &data);
    let running = Running {
        cx,
        id: delivery.message_id.clone(),
        key: delivery.key.clone(),
        attempt: delivery.delivery_attempt,
        span,
        began,
        right,
        ticket,
        verdict: Cell::new(Verdict::Neutral),
        rerun,
    };
    (running, data, delivery)
}

impl Running {
    /// The decoder's fetch panicked: as a handler's panic.
    fn panicked_in_decoder(self) -> Option<LocalBoxFuture<'static, ()>> {
        let outcome = self.panicked();
        self.finish(outcome)
    }
}

/// Decodes the payload, runs the handler, records and settles.
fn start(
    admitted: Admitted,
    cx: Arc<JobContext>,
    began: Instant,
) -> Option<LocalBoxFuture<'static, ()>> {
    let (running, data, delivery) = running(admitted, cx, began);
    let ErasedHandler::One(handler) = &running.cx.handler else {
        unreachable!("the pool hands single jobs only to single-message handlers");
    };
    // Decoding and a blocking handler run inside this call; an async handler's first poll below.
    let started = {
        let _entered = running.span.enter();
        guard::call(|| handler(data, delivery))
    };
    let outcome = match started {
        Ok(Started::Running(handler)) => {
            let mut handler = Guarded::new(handler).instrument(running.span.clone());
            match poll_once(Pin::new(&mut handler)) {
                Poll::Ready(Ok(h)) => running.handled(h),
                Poll::Ready(Err(Panicked)) => running.panicked(),
                Poll::Pending => {
                    return Some(Box::pin(async move {
                        let outcome = match handler.await {
                            Ok(h) => running.handled(h),
                            Err(Panicked) => running.panicked(),
                        };
                        if let Some(recording) = running.finish(outcome) {
                            recording.await;
                        }
                    }));
                }
            }
        }
        Ok(Started::Done(h)) => running.handled(h),
        Ok(Started::Undecodable(error, delivery)) => running.undecodable(*error, delivery),
        Err(Panicked) => running.panicked(),
    };
    running.finish(outcome)
}
