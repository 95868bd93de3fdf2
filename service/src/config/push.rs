//! Push subscriptions in the service: the `[subscriptions.KEY.push]` table, the checks that
//! keep an endpoint from being left open by mistake, and the [`Push`] it builds.
//!
//! Owns [`PushConfig`] and [`UNAUTHENTICATED_CONSENT`]. Uses `leasehold-push` only: the
//! configuration wraps its refusals in `ConfigError::Push`, and the service's `run` binds what
//! this builds and mounts the endpoints on its HTTP server.

use leasehold_push::{Push, TokenCheck};
use serde::Deserialize;
use std::time::Duration;

/// The words `unauthenticated_outside_emulator` must hold for a push endpoint without token
/// verification to start against real Pub/Sub.
pub const UNAUTHENTICATED_CONSENT: &str =
    "anyone who can reach this endpoint can ack and nack its messages";

/// How a subscription's messages reach the service (`delivery`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryConfig {
    /// The service pulls (streaming pull): the default.
    #[default]
    Pull,
    /// Pub/Sub pushes to the service's HTTP address, on the `push` table's path.
    Push,
}

/// A push subscription's endpoint (`[subscriptions.KEY.push]`), served on `http.address`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PushConfig {
    /// The path Pub/Sub pushes to, for example `/push/orders` (the subscription's
    /// `--push-endpoint` is `https://HOST/push/orders`).
    pub path: String,
    /// The audience tokens must name: the subscription's `--push-auth-token-audience`, or its
    /// push endpoint's URL when it sets none.
    pub audience: Option<String>,
    /// The service account tokens must be for: the subscription's
    /// `--push-auth-service-account`.
    pub service_account: Option<String>,
    /// The service runs on Cloud Run with authentication required, whose front end verifies
    /// each token and removes its signature: [`TokenCheck::verified_by_cloud_run`] (the claims
    /// are still checked).
    #[serde(default)]
    pub verified_by_cloud_run: bool,
    /// Takes pushes without a token (the emulator sends none). Refused at start outside the
    /// emulator unless `unauthenticated_outside_emulator` holds [`UNAUTHENTICATED_CONSENT`].
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// The consent, in words, to an unauthenticated endpoint outside the emulator.
    pub unauthenticated_outside_emulator: Option<String>,
    /// The subscription pushes unwrapped, with write-metadata (`--push-no-wrapper
    /// --push-no-wrapper-write-metadata`).
    #[serde(default)]
    pub unwrapped: bool,
    /// [`Push::max_body`], in bytes.
    pub max_body: Option<usize>,
    /// [`Push::deadline`]: default, the subscription's ack deadline (10 s,
    /// [`leasehold_push::DEFAULT_PUSH_DEADLINE`], when it cannot be read).
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
}

impl PushConfig {
    /// The endpoint this table describes, for the subscription under `key`; `emulator` says
    /// whether the service talks to the emulator. `Err` says what is wrong and how to fix it.
    pub fn push(&self, key: &str, emulator: bool) -> Result<Push, String> {
        let plain = |c: char| c.is_ascii_alphanumeric() || "/-_.~".contains(c);
        if !self.path.starts_with('/') || self.path.len() < 2 || !self.path.chars().all(plain) {
            return Err(format!(
                "push.path must be a plain path of its own such as /push/{key}: letters, digits \
                 and / - _ . ~ (got {:?})",
                self.path
            ));
        }
        if ["/", "/metrics", "/livez", "/readyz"].contains(&self.path.as_str()) {
            return Err(format!(
                "push.path {} is one of the service's own endpoints",
                self.path
            ));
        }
        let mut push = match (
            self.allow_unauthenticated,
            &self.audience,
            &self.service_account,
        ) {
            (false, Some(audience), Some(account)) => {
                let mut check = TokenCheck::new(audience, account);
                if self.verified_by_cloud_run {
                    check = check.verified_by_cloud_run();
                }
                Push::new(&self.path, check)
            }
            (false, _, _) => {
                return Err(
                    "push needs audience and service_account (the subscription's \
                     --push-auth-token-audience and --push-auth-service-account), or \
                     allow_unauthenticated = true for the emulator"
                        .to_string(),
                );
            }
            (true, None, None) => {
                let consented = self.unauthenticated_outside_emulator.as_deref()
                    == Some(UNAUTHENTICATED_CONSENT);
                if !emulator && !consented {
                    return Err(format!(
                        "allow_unauthenticated is for the emulator: against real Pub/Sub set \
                         audience and service_account, or set \
                         unauthenticated_outside_emulator = \"{UNAUTHENTICATED_CONSENT}\""
                    ));
                }
                Push::allow_unauthenticated(&self.path)
            }
            (true, _, _) => {
                return Err(
                    "allow_unauthenticated = true and a token's audience or service_account \
                     contradict each other: choose one"
                        .to_string(),
                );
            }
        };
        if self.unwrapped {
            push = push.unwrapped();
        }
        if let Some(bytes) = self.max_body {
            push = push.max_body(bytes);
        }
        if let Some(deadline) = self.deadline {
            push = push.deadline(deadline);
        }
        Ok(push)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> PushConfig {
        toml_like(text)
    }

    fn toml_like(text: &str) -> PushConfig {
        config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    }

    fn refusal(config: &PushConfig, emulator: bool) -> String {
        config.push("orders", emulator).unwrap_err()
    }

    #[test]
    fn a_token_needs_both_its_audience_and_its_service_account() {
        let good = table(
            "path = \"/push/orders\"\naudience = \"https://x.run.app/push/orders\"\n\
             service_account = \"push@p.iam.gserviceaccount.com\"",
        );
        assert!(good.push("orders", false).is_ok());
        let half = table("path = \"/push/orders\"\naudience = \"https://x\"");
        assert!(refusal(&half, false).contains("service_account"));
        assert!(
            refusal(&half, true).contains("service_account"),
            "the emulator too"
        );
    }

    #[test]
    fn unauthenticated_outside_the_emulator_needs_the_consent_in_words() {
        let open = table("path = \"/push/orders\"\nallow_unauthenticated = true");
        assert!(
            open.push("orders", true).is_ok(),
            "the emulator sends no token"
        );
        assert!(refusal(&open, false).contains(UNAUTHENTICATED_CONSENT));
        let sloppy = table(
            "path = \"/push/orders\"\nallow_unauthenticated = true\n\
             unauthenticated_outside_emulator = \"yes\"",
        );
        assert!(
            sloppy.push("orders", false).is_err(),
            "only the words consent"
        );
        let consented = table(&format!(
            "path = \"/push/orders\"\nallow_unauthenticated = true\n\
             unauthenticated_outside_emulator = \"{UNAUTHENTICATED_CONSENT}\""
        ));
        assert!(consented.push("orders", false).is_ok());
        let both = table(
            "path = \"/push/orders\"\nallow_unauthenticated = true\naudience = \"https://x\"",
        );
        assert!(refusal(&both, true).contains("contradict"));
        let cloud_run = table(
            "path = \"/push/orders\"\naudience = \"https://x\"\n\
             service_account = \"push@p.iam.gserviceaccount.com\"\nverified_by_cloud_run = true",
        );
        assert!(cloud_run.push("orders", false).is_ok());
    }

    #[test]
    fn the_path_is_a_path_of_its_own() {
        for path in [
            "",
            "/",
            "push",
            "/metrics",
            "/readyz",
            "/push/{key}",
            "/push/a b",
        ] {
            let t = table(&format!("path = \"{path}\"\nallow_unauthenticated = true"));
            assert!(t.push("orders", true).is_err(), "{path:?} accepted");
        }
    }
}
