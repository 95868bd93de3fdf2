//! The HTTP side: an actix-web route that takes Pub/Sub's push requests for one subscription,
//! checks who sent each before it reads the body, reads it within a limit, admits it under flow
//! control, hands it to the runtime and holds the response until the message is settled.
//!
//! Owns [`PushEndpoint`] and the request path, from the route to the status. Uses every other
//! module of this crate.

use crate::auth::{AuthError, TokenCheck};
use crate::envelope::{self, EnvelopeError};
use crate::gate::Refusal;
use crate::source::{Answer, Shared};
use crate::stats::PushStatsSnapshot;
use actix_web::http::StatusCode;
use actix_web::http::header::{AUTHORIZATION, CONTENT_LENGTH};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use std::sync::Arc;

/// The body a push may have when none is configured: Pub/Sub's 10 MB message limit, base64
/// (4/3) and the envelope around it.
pub const DEFAULT_MAX_BODY: usize = 16 * 1024 * 1024;

/// How a push proves who sent it.
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    Token(Box<TokenCheck>),
    Unauthenticated,
}

/// How the push's body is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Wrapped,
    Unwrapped,
}

/// What the endpoint was configured with.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) path: String,
    pub(crate) auth: Auth,
    pub(crate) format: Format,
    pub(crate) max_body: usize,
}

/// Why a push was answered without running anything; each is counted by its reason.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error(transparent)]
    Gate(#[from] Refusal),
    #[error("the body is over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body could not be read within the push deadline")]
    Unreadable,
}

impl Refused {
    fn status(&self) -> StatusCode {
        let code = match self {
            Refused::Auth(e) => e.status(),
            Refused::Envelope(_) | Refused::Unreadable => 400,
            Refused::Gate(r) => r.status(),
            Refused::TooLarge { .. } => 413,
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST)
    }

    fn reason(&self) -> &'static str {
        match self {
            Refused::Auth(e) => match e.status() {
                401 => "unauthenticated",
                403 => "forbidden",
                _ => "keys_unavailable",
            },
            Refused::Envelope(_) | Refused::Unreadable => "bad_request",
            Refused::Gate(r) => r.reason(),
            Refused::TooLarge { .. } => "too_large",
        }
    }
}

/// The push endpoint of one registration: mount it in an actix-web `App` with
/// [`configure`](Self::configure). Cheap to clone (one per server worker).
#[derive(Debug, Clone)]
pub struct PushEndpoint {
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<Config>,
}

impl PushEndpoint {
    /// Adds the push route (`POST` on the configured path; another method there is answered
    /// 405) to an actix-web app: `App::new().configure(|c| endpoint.configure(c))`.
    pub fn configure(&self, config: &mut web::ServiceConfig) {
        config.service(
            web::resource(self.config.path.as_str())
                .app_data(web::Data::new(self.clone()))
                .route(web::post().to(push)),
        );
    }

    /// The path pushes are taken on.
    pub fn path(&self) -> &str {
        &self.config.path
    }

    /// The subscription served.
    pub fn subscription(&self) -> &str {
        &self.shared.subscription
    }

    /// Whether pushes must carry a verified token.
    pub fn authenticated(&self) -> bool {
        matches!(self.config.auth, Auth::Token(_))
    }

    /// The endpoint's counters.
    pub fn stats(&self) -> PushStatsSnapshot {
        let in_flight = self.shared.gate.lock().in_flight();
        self.shared.stats.snapshot(in_flight)
    }

    /// The push deadline in force (configured, else the subscription's ack deadline).
    pub fn deadline(&self) -> std::time::Duration {
        self.shared.deadline()
    }

    async fn take(&self, req: &HttpRequest, payload: web::Payload) -> Result<Answer, Refused> {
        // Pub/Sub's clock for the deadline starts when it sends the push.
        let arrived = tokio::time::Instant::now();
        // Who sent it, before a byte of the body is read.
        if let Auth::Token(check) = &self.config.auth {
            let header = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
            check.check(header).await?;
        }
        // Refused at once while starting or stopping, without reading the body either.
        self.shared.gate.lock().admit_check()?;
        // A body that trickles in is given the push deadline, no more.
        let body = tokio::time::timeout(
            self.shared.deadline(),
            read_body(req, payload, self.config.max_body),
        )
        .await
        .map_err(|_| Refused::Unreadable)??;
        let pushed = match self.config.format {
            Format::Wrapped => envelope::wrapped(&body, &self.shared.subscription)?,
            Format::Unwrapped => envelope::unwrapped(
                body,
                req.headers()
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_bytes())),
                &self.shared.subscription,
            )?,
        };
        let (handle, answered) =
            self.shared
                .admit(&pushed.message_id, pushed.data.len(), arrived)?;
        let received = pushed.received(Box::new(handle));
        if let Err(refused) = self.shared.sender.try_send(received) {
            // Closed by a stop between the gate and here: dropping it answers it released.
            drop(refused);
        }
        // The sender half lives in the handle: dropped without a word, it answered released.
        Ok(answered.await.unwrap_or(Answer::Released))
    }
}

/// Reads the body, refusing it as soon as it is known to be over `limit`.
async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, Refused> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(Refused::TooLarge { limit });
    }
    let mut body = BytesMut::with_capacity(room_for(declared, limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| Refused::Unreadable)?;
        if body.len() + chunk.len() > limit {
            return Err(Refused::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The most a body's buffer takes before its bytes arrive: a body declared longer grows as it
/// comes, so a `Content-Length` alone never costs its size.
const ROOM_BEFORE_THE_BODY: usize = 64 * 1024;

/// The buffer a body declared `declared` bytes long starts with.
fn room_for(declared: Option<usize>, limit: usize) -> usize {
    declared.unwrap_or(0).min(limit).min(ROOM_BEFORE_THE_BODY)
}

/// The route: one push in, one status out.
async fn push(
    req: HttpRequest,
    payload: web::Payload,
    endpoint: web::Data<PushEndpoint>,
) -> HttpResponse {
    match endpoint.take(&req, payload).await {
        Ok(Answer::Ack) => HttpResponse::NoContent().finish(),
        Ok(Answer::Nack) => HttpResponse::InternalServerError().body("nacked: Pub/Sub redelivers"),
        Ok(Answer::Released) => HttpResponse::ServiceUnavailable().body("released: stopping"),
        Err(refused) => {
            let reason = refused.reason();
            endpoint.shared.stats.refused(reason);
            let status = refused.status();
            // The reason names fields and limits, never the body's or the token's content.
            if matches!(refused, Refused::Gate(_)) {
                tracing::debug!(subscription = %endpoint.shared.subscription, reason,
                    status = status.as_u16(), "push refused: {refused}");
            } else {
                tracing::warn!(subscription = %endpoint.shared.subscription, reason,
                    status = status.as_u16(), "push refused: {refused}");
            }
            HttpResponse::build(status).body(refused.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_length_alone_does_not_reserve_its_size() {
        assert_eq!(room_for(Some(600), DEFAULT_MAX_BODY), 600);
        assert_eq!(room_for(None, DEFAULT_MAX_BODY), 0);
        assert_eq!(
            room_for(Some(DEFAULT_MAX_BODY), DEFAULT_MAX_BODY),
            ROOM_BEFORE_THE_BODY
        );
        assert_eq!(room_for(Some(usize::MAX), 1024), 1024);
    }
}
