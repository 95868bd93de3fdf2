//! Where Spanner is: Google Cloud (authenticated with Application Default Credentials) or an
//! emulator's host and port. It uses the store's errors only.

use crate::error::SpannerError;
use gcloud_gax::conn::Environment;
use std::time::Duration;

/// How long connecting (and the migration step's first call) waits for Spanner to answer, by
/// default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The variable that names an emulator's `host:port`, as Google's own clients read it.
pub const SPANNER_EMULATOR_HOST_ENV: &str = "SPANNER_EMULATOR_HOST";

/// Where Spanner is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// Google Cloud's Spanner, authenticated with Application Default Credentials (a service
    /// account's key file in `GOOGLE_APPLICATION_CREDENTIALS`, the metadata server on Google
    /// Cloud, or `gcloud auth application-default login`).
    GoogleCloud,
    /// An emulator at `host:port`, without TLS or credentials.
    Emulator(String),
}

impl Endpoint {
    /// The emulator `SPANNER_EMULATOR_HOST` names when it is set, else Google Cloud.
    pub fn from_env() -> Self {
        match std::env::var(SPANNER_EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => Self::Emulator(host.trim().to_string()),
            _ => Self::GoogleCloud,
        }
    }

    /// For error messages: the emulator's address, or Google's endpoint.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::GoogleCloud => "spanner.googleapis.com".into(),
            Self::Emulator(host) => host.clone(),
        }
    }

    /// The client's environment, with its credentials found when on Google Cloud.
    pub(crate) async fn environment(&self) -> Result<Environment, SpannerError> {
        match self {
            Self::Emulator(host) => Ok(Environment::Emulator(host.clone())),
            Self::GoogleCloud => {
                let config = gcloud_spanner::client::ClientConfig {
                    environment: Environment::GoogleCloud(Box::new(
                        token_source::NoopTokenSourceProvider {},
                    )),
                    ..Default::default()
                };
                let config = config.with_auth().await.map_err(SpannerError::client)?;
                Ok(config.environment)
            }
        }
    }
}
