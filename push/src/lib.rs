#![doc = include_str!("../README.md")]
//!
//! ## Layout
//!
//! Bottom to top, each module using only those above it: `envelope` (the two push formats),
//! `gate` (admission and flow control), `stats`, `auth` (the token), `source` (the connector
//! the runtime starts with, and the handle that answers a push), `endpoint` (the actix-web
//! route); this file builds them from a [`Push`]. With `--cfg fuzzing` only, `fuzzing` opens
//! the envelope and the token check to the fuzz targets (`fuzz/`).
#![warn(missing_docs, unreachable_pub)]

mod auth;
mod endpoint;
mod envelope;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod source;
mod stats;

pub use auth::{AuthError, DEFAULT_TOKEN_CACHE, MAX_TOKEN_LIFE, TokenCheck, UNKNOWN_KID_REFETCH};
pub use endpoint::{DEFAULT_MAX_BODY, PushEndpoint};
pub use envelope::EnvelopeError;
pub use gate::Refusal;
pub use source::DEFAULT_PUSH_DEADLINE;
pub use stats::{PushStatsSnapshot, REFUSAL_REASONS};

use endpoint::{Auth, Config, Format};
use leasehold::source::Connector;
use leasehold::{Registration, StartError, Subscription};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How one registration takes pushes: the path, who may push, the body's format and limit, the
/// deadline. [`bind`](Self::bind) it to a connector, or [`start`](Self::start) it.
#[derive(Debug, Clone)]
pub struct Push {
    path: String,
    auth: Auth,
    format: Format,
    max_body: usize,
    deadline: Option<Duration>,
}

impl Push {
    /// Pushes on `path` (for example `/push/orders`), each with a token that `check` verifies.
    pub fn new(path: impl Into<String>, check: TokenCheck) -> Self {
        Self::with_auth(path, Auth::Token(Box::new(check)))
    }

    /// Pushes on `path` taken without any token: for the emulator (which sends none) and for
    /// local tests. Anyone who reaches the endpoint can then ack or nack messages; a warning
    /// says so at bind.
    pub fn allow_unauthenticated(path: impl Into<String>) -> Self {
        Self::with_auth(path, Auth::Unauthenticated)
    }

    fn with_auth(path: impl Into<String>, auth: Auth) -> Self {
        Self {
            path: path.into(),
            auth,
            format: Format::Wrapped,
            max_body: DEFAULT_MAX_BODY,
            deadline: None,
        }
    }

    /// The subscription pushes unwrapped (`--push-no-wrapper` with
    /// `--push-no-wrapper-write-metadata`): the payload is the body, the metadata and
    /// attributes are headers. Without write-metadata a push carries no message id, and is
    /// refused (400).
    pub fn unwrapped(mut self) -> Self {
        self.format = Format::Unwrapped;
        self
    }

    /// Refuses (413) a body over `bytes`, before reading past it. Default
    /// [`DEFAULT_MAX_BODY`].
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The push deadline: how long Pub/Sub waits for an answer. Default: the subscription's
    /// ack deadline, read at start ([`DEFAULT_PUSH_DEADLINE`] when it cannot be read).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The connector to start `subscription`'s registration with (it reads the subscription
    /// through `inner`, and its stream is what the endpoint admits), and the endpoint to mount.
    /// One endpoint serves one start of one registration; once that subscription stops, the
    /// endpoint answers 503.
    pub fn bind(
        self,
        subscription: &str,
        inner: Rc<dyn Connector>,
    ) -> (Rc<dyn Connector>, PushEndpoint) {
        if matches!(self.auth, Auth::Unauthenticated) {
            tracing::warn!(subscription, path = %self.path,
                "push endpoint without token verification: anyone who reaches it can ack or \
                 nack this subscription's messages (meant for the emulator and local tests)");
        }
        let shared = source::Shared::new(subscription.to_string(), self.deadline);
        let endpoint = PushEndpoint {
            shared: Arc::clone(&shared),
            config: Arc::new(Config {
                path: self.path,
                auth: self.auth,
                format: self.format,
                max_body: self.max_body,
            }),
        };
        let connector = source::PushConnector { inner, shared };
        (Rc::new(connector), endpoint)
    }

    /// Starts `registration` behind this endpoint, reading its subscription through `inner`
    /// (for example `Connection::from_env().connect().await?`): what
    /// [`bind`](Self::bind) then [`leasehold::start_with`] do.
    pub async fn start(
        self,
        registration: Registration,
        inner: Rc<dyn Connector>,
    ) -> Result<(Subscription, PushEndpoint), StartError> {
        let (connector, endpoint) = self.bind(registration.subscription(), inner);
        let subscription = leasehold::start_with(registration, connector).await?;
        Ok((subscription, endpoint))
    }
}
