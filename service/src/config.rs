//! The service's configuration: a TOML file, with environment variables over it.
//!
//! Every option of a [`Registration`] has a key of the same name in the subscription's table.
//! An environment variable `LEASEHOLD__<SECTION>__<KEY>` overrides a key (`__` separates the
//! levels; names are case-insensitive): `LEASEHOLD__SUBSCRIPTIONS__ORDERS__WORKERS=32`,
//! `LEASEHOLD__HTTP__ADDRESS=0.0.0.0:8080`. Durations are written as `"30s"`, `"5m"`, `"1h"`.
//! Tables of their own: a subscription's `push` endpoint (`config/push.rs`), its outage
//! `breaker` (`config/breaker.rs`), its schema (`decode`, `config/decode.rs`) and its
//! transactional `outbox`'s relay (`config/outbox.rs`); the service's `[telemetry]`
//! (`config/telemetry.rs`).

mod breaker;
mod decode;
mod outbox;
mod push;
mod telemetry;

pub use breaker::BreakerConfig;
pub use decode::{DecodeConfig, TopicKind};
use leasehold::{Connection, FailurePolicy, PanicPolicy, Registration, store::RedbStore};
use leasehold_push::Push;
pub use outbox::OutboxConfig;
pub use push::{DeliveryConfig, PushConfig, UNAUTHENTICATED_CONSENT};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
pub use telemetry::TelemetryConfig;

/// The prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "LEASEHOLD";

/// The configuration could not be read.
///
/// Nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file or an environment override could not be read or does not fit the schema.
    #[error("cannot read the configuration")]
    Read(#[source] config::ConfigError),
    /// A subscription's push table is incomplete or unsafe (see [`PushConfig`]).
    #[error("subscription {key}: {problem}")]
    Push {
        /// The subscription's key.
        key: String,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// A subscription's progress store could not be opened.
    #[error("cannot open the progress store of subscription {key}")]
    Store {
        /// The subscription's key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold::error::StoreError,
    },
    /// A subscription's `decode` table and the handler bound to it do not go together: a
    /// schema handler without the table, or the table on another handler.
    #[error("subscription {key}: {problem}")]
    Decode {
        /// The subscription's key.
        key: String,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// A subscription's outbox table is out of range, or names no store bound in code.
    #[error("subscription {key}: {problem}")]
    Outbox {
        /// The subscription's key.
        key: String,
        /// What is wrong (the key and its range), and how to fix it.
        problem: String,
    },
    /// A subscription's Spanner progress store could not be connected (the database, its
    /// table or Spanner itself is missing; the cause says which and what to do).
    #[error("cannot connect the Spanner progress store of subscription {key}")]
    Spanner {
        /// The subscription's key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold_spanner::SpannerError,
    },
}

/// The whole configuration of a service.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// Where Pub/Sub is.
    #[serde(default)]
    pub connection: ConnectionConfig,
    /// The HTTP endpoints.
    #[serde(default)]
    pub http: HttpConfig,
    /// Logs and traces.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// The subscriptions, by the key their handler is bound with.
    #[serde(default)]
    pub subscriptions: BTreeMap<String, SubscriptionConfig>,
}

/// Where Pub/Sub is: the emulator, an endpoint, or (neither set) `PUBSUB_EMULATOR_HOST` when set
/// and real Pub/Sub with application-default credentials otherwise.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// The emulator's `host:port`.
    pub emulator_host: Option<String>,
    /// A Pub/Sub endpoint other than the global one (a locational endpoint for exactly-once).
    pub endpoint: Option<String>,
}

impl ConnectionConfig {
    /// The connection this describes.
    pub fn connection(&self) -> Connection {
        match (&self.emulator_host, &self.endpoint) {
            (Some(host), _) => Connection::emulator(host),
            (None, Some(endpoint)) => Connection::gcp().with_endpoint(endpoint.clone()),
            (None, None) => Connection::from_env(),
        }
    }
}

/// The HTTP endpoints: `/metrics`, `/livez`, `/readyz` and the status page `/`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpConfig {
    /// The address to listen on (default `0.0.0.0:9090`).
    #[serde(default = "default_address")]
    pub address: String,
    /// The threads that take HTTP requests (default 1, enough for scrapes and probes; raise it
    /// for push subscriptions, whose every message is a request).
    #[serde(default = "default_http_workers")]
    pub workers: usize,
    /// Where a `replay KEY` process writes its progress and the serving process reads it, for
    /// its status page and `/metrics` (default: `leasehold-replays` in the temporary directory).
    pub replays_dir: Option<std::path::PathBuf>,
}

impl HttpConfig {
    /// [`replays_dir`](Self::replays_dir), or its default.
    pub fn replays_dir(&self) -> std::path::PathBuf {
        self.replays_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("leasehold-replays"))
    }
}

fn default_http_workers() -> usize {
    1
}

fn default_address() -> String {
    "0.0.0.0:9090".into()
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            address: default_address(),
            workers: default_http_workers(),
            replays_dir: None,
        }
    }
}

/// What happens to undecodable payloads (`failure_policy`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicyConfig {
    /// Drop (ack; dead-lettered on the last attempt).
    Drop,
    /// Retry (nack).
    Retry,
}

/// What happens to messages whose handler panics (`panic_policy`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PanicPolicyConfig {
    /// Retry (nack).
    Retry,
    /// Drop (ack; dead-lettered on the last attempt).
    Drop,
}

/// Where finished messages are remembered (`progress_store`).
///
/// Every kind is a table of its own keys, none for `memory` and `none`: serde lets a unit
/// variant of an internally tagged enum take any key, so an unknown one beside
/// `kind = "memory"` would be ignored without a word.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProgressStoreConfig {
    /// The bounded in-memory store (the default).
    Memory {},
    /// No store: every delivery runs the handler.
    None {},
    /// A redb file, kept across restarts.
    Redb {
        /// The file.
        path: PathBuf,
        /// How long records live (default 15 minutes).
        #[serde(default, with = "humantime_serde")]
        ttl: Option<Duration>,
    },
    /// Cloud Spanner's claims table (`leasehold_spanner::SpannerProgress`), shared by every
    /// replica: at `SPANNER_EMULATOR_HOST` when set, else Google Cloud with Application
    /// Default Credentials.
    Spanner {
        /// `projects/P/instances/I/databases/D`, migrated (`leasehold_spanner::migrate`).
        database: String,
        /// How long a lookup waits before the handler runs anyway (default 2 s).
        #[serde(default, with = "humantime_serde")]
        lookup_timeout: Option<Duration>,
        /// How long connecting at start may take (default 30 s).
        #[serde(default, with = "humantime_serde")]
        connect_timeout: Option<Duration>,
        /// A Spanner emulator's `host:port` (default: `SPANNER_EMULATOR_HOST`, else Google
        /// Cloud).
        emulator_host: Option<String>,
    },
}

/// One subscription: its name, and every option of its [`Registration`], each named as its
/// setter, whose doc says what it does, its default and its range (unset keys keep the
/// defaults). The values are checked when the subscription starts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SubscriptionConfig {
    /// `projects/PROJECT/subscriptions/NAME`.
    pub name: String,
    /// [`Registration::workers`].
    pub workers: Option<usize>,
    /// [`Registration::worker_threads`].
    pub worker_threads: Option<usize>,
    /// [`Registration::streams`].
    pub streams: Option<usize>,
    /// [`Registration::max_outstanding_messages`].
    pub max_outstanding_messages: Option<usize>,
    /// [`Registration::max_outstanding_bytes`].
    pub max_outstanding_bytes: Option<usize>,
    /// [`Registration::max_read_ahead_messages`].
    pub max_read_ahead_messages: Option<usize>,
    /// [`Registration::max_read_ahead_bytes`].
    pub max_read_ahead_bytes: Option<usize>,
    /// [`Registration::dedupe_on`]: the attribute a message's progress is keyed on.
    pub dedupe_on: Option<String>,
    /// [`Registration::max_lease`].
    #[serde(default, with = "humantime_serde")]
    pub max_lease: Option<Duration>,
    /// [`Registration::max_lease_extension`].
    #[serde(default, with = "humantime_serde")]
    pub max_lease_extension: Option<Duration>,
    /// [`Registration::max_attempts`].
    pub max_attempts: Option<u32>,
    /// [`Registration::drain_timeout`].
    #[serde(default, with = "humantime_serde")]
    pub drain_timeout: Option<Duration>,
    /// [`Registration::start_timeout`].
    #[serde(default, with = "humantime_serde")]
    pub start_timeout: Option<Duration>,
    /// [`Registration::health_probe_interval`].
    #[serde(default, with = "humantime_serde")]
    pub health_probe_interval: Option<Duration>,
    /// [`Registration::liveness_timeout`].
    #[serde(default, with = "humantime_serde")]
    pub liveness_timeout: Option<Duration>,
    /// [`Registration::max_batch_messages`].
    pub max_batch_messages: Option<usize>,
    /// [`Registration::max_batch_bytes`].
    pub max_batch_bytes: Option<usize>,
    /// [`Registration::max_batch_wait`].
    #[serde(default, with = "humantime_serde")]
    pub max_batch_wait: Option<Duration>,
    /// [`Registration::trace_sample_ratio`].
    pub trace_sample_ratio: Option<f64>,
    /// [`Registration::failure_policy`]: `"drop"` or `"retry"`.
    pub failure_policy: Option<FailurePolicyConfig>,
    /// [`Registration::panic_policy`]: `"retry"` or `"drop"`.
    pub panic_policy: Option<PanicPolicyConfig>,
    /// [`Registration::progress_store`]: a store to open, or none
    /// ([`Registration::without_progress_store`]).
    pub progress_store: Option<ProgressStoreConfig>,
    /// [`Registration::breaker`]: the outage breaker (no table: none).
    pub breaker: Option<BreakerConfig>,
    /// `"pull"` (the default) or `"push"`: with push, Pub/Sub pushes to the service's HTTP
    /// address on the `push` table's path.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// The push endpoint, for `delivery = "push"`.
    pub push: Option<PushConfig>,
    /// The relay of the transactional outbox of the store bound to this key with
    /// `Service::outbox` (no table: the defaults).
    pub outbox: Option<OutboxConfig>,
    /// A subscription on this subscription's dead-letter topic
    /// (`projects/PROJECT/subscriptions/NAME`): what `replay KEY` takes from (unless `--from`
    /// names another), and what the status page's replay command names.
    pub dead_letter_subscription: Option<String>,
    /// The schema its messages are decoded with, for a handler bound with `Service::schema`
    /// and its siblings.
    pub decode: Option<DecodeConfig>,
}

impl SubscriptionConfig {
    /// The push endpoint of a `delivery = "push"` subscription (`None` for a pull one);
    /// `emulator` says whether the service talks to the emulator.
    pub fn push_endpoint(&self, key: &str, emulator: bool) -> Result<Option<Push>, ConfigError> {
        let problem = |problem: &str| ConfigError::Push {
            key: key.to_string(),
            problem: problem.to_string(),
        };
        match (self.delivery, &self.push) {
            (DeliveryConfig::Pull, None) => Ok(None),
            (DeliveryConfig::Pull, Some(_)) => Err(problem(
                "a push table on a pull subscription: set delivery = \"push\", or remove it",
            )),
            (DeliveryConfig::Push, None) => Err(problem(
                "delivery = \"push\" needs a [subscriptions.KEY.push] table with its path",
            )),
            (DeliveryConfig::Push, Some(push)) => {
                push.push(key, emulator).map(Some).map_err(|p| problem(&p))
            }
        }
    }

    /// Sets every option this table sets on `registration`, opening (or connecting) its
    /// progress store.
    pub async fn apply(&self, key: &str, mut r: Registration) -> Result<Registration, ConfigError> {
        macro_rules! set {
            ($($option:ident),*) => {$(
                if let Some(value) = self.$option.clone() {
                    r = r.$option(value);
                }
            )*};
        }
        set!(
            workers,
            worker_threads,
            streams,
            max_outstanding_messages,
            max_outstanding_bytes,
            max_read_ahead_messages,
            max_read_ahead_bytes,
            dedupe_on,
            max_lease,
            max_lease_extension,
            max_attempts,
            drain_timeout,
            start_timeout,
            health_probe_interval,
            liveness_timeout,
            trace_sample_ratio,
            max_batch_messages,
            max_batch_bytes,
            max_batch_wait
        );
        if let Some(policy) = self.failure_policy {
            r = r.failure_policy(match policy {
                FailurePolicyConfig::Drop => FailurePolicy::Drop,
                FailurePolicyConfig::Retry => FailurePolicy::Retry,
            });
        }
        if let Some(policy) = self.panic_policy {
            r = r.panic_policy(match policy {
                PanicPolicyConfig::Drop => PanicPolicy::Drop,
                PanicPolicyConfig::Retry => PanicPolicy::Retry,
            });
        }
        if let Some(table) = &self.breaker {
            // Over the breaker set in code, if any: a key in the file wins, an unset one keeps
            // the code's value.
            let base = r.options().breaker.unwrap_or_default();
            r = r.breaker(table.breaker(base));
        }
        match &self.progress_store {
            None | Some(ProgressStoreConfig::Memory {}) => {}
            Some(ProgressStoreConfig::None {}) => r = r.without_progress_store(),
            Some(ProgressStoreConfig::Redb { path, ttl }) => {
                let ttl = ttl.unwrap_or(leasehold::defaults::DEFAULT_TTL);
                let store =
                    RedbStore::open(path, &self.name, ttl).map_err(|cause| ConfigError::Store {
                        key: key.to_string(),
                        cause,
                    })?;
                r = r.progress_store(store);
            }
            Some(ProgressStoreConfig::Spanner {
                database,
                lookup_timeout,
                connect_timeout,
                emulator_host,
            }) => {
                let endpoint = match emulator_host {
                    Some(host) => leasehold_spanner::Endpoint::Emulator(host.clone()),
                    None => leasehold_spanner::Endpoint::from_env(),
                };
                let timeout = connect_timeout.unwrap_or(leasehold_spanner::DEFAULT_CONNECT_TIMEOUT);
                let store =
                    leasehold_spanner::SpannerStore::connect_to(&endpoint, database, timeout)
                        .await
                        .map_err(|cause| ConfigError::Spanner {
                            key: key.to_string(),
                            cause,
                        })?;
                let progress = store.progress(&self.name).lookup_timeout(
                    lookup_timeout.unwrap_or(leasehold_spanner::DEFAULT_LOOKUP_TIMEOUT),
                );
                r = r.progress_store(progress);
            }
        }
        Ok(r)
    }
}

/// Reads `path` (TOML), then the `LEASEHOLD__...` environment variables over it.
pub fn load(path: impl AsRef<Path>) -> Result<ServiceConfig, ConfigError> {
    from_sources(Some(path.as_ref()), std::env::vars())
}

/// The configuration from a file (if any) and environment variables: the work of [`load`],
/// with the variables given (for tests).
pub fn from_sources(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<ServiceConfig, ConfigError> {
    let mut builder = config::Config::builder();
    if let Some(path) = path {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    let env: config::Map<String, String> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}__")))
        .collect();
    builder = builder.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .source(Some(env)),
    );
    builder
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|e| ConfigError::Read(at_top_level(e)))
}

/// Below the top level, `config` says in which table a key is unknown (`for key
/// subscriptions.orders`); at the top level nothing does: this says it.
fn at_top_level(error: config::ConfigError) -> config::ConfigError {
    match error {
        config::ConfigError::Message(m) if m.starts_with("unknown field") => {
            config::ConfigError::Message(format!("{m}, at the top level (no table)"))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::io::Write;

    const FILE: &str = r#"
[connection]
emulator_host = "localhost:8085"

[http]
address = "127.0.0.1:9191"

[subscriptions.orders]
name = "projects/p/subscriptions/orders"
workers = 16
max_lease = "30m"
failure_policy = "retry"
progress_store = { kind = "none" }
"#;

    fn file() -> tempfile_path::TempPath {
        tempfile_path::write(FILE)
    }

    mod tempfile_path {
        use super::*;
        pub struct TempPath(pub PathBuf);
        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        pub fn write(text: &str) -> TempPath {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("leasehold-config-{}-{n}.toml", std::process::id()));
            std::fs::File::create(&path)
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            TempPath(path)
        }
    }

    #[test]
    fn the_example_configuration_reads_and_applies() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("leasehold.example.toml");
        let config = from_sources(Some(&path), []).unwrap();
        assert_eq!(config.http.workers, 1);
        assert!(!config.subscriptions.is_empty());
        for (key, table) in &config.subscriptions {
            table.push_endpoint(key, true).unwrap();
        }
    }

    #[test]
    fn the_file_sets_the_options_and_the_environment_wins() {
        let path = file();
        let env = [
            ("LEASEHOLD__SUBSCRIPTIONS__ORDERS__WORKERS", "32"),
            ("LEASEHOLD__HTTP__ADDRESS", "0.0.0.0:8080"),
            ("LEASEHOLD__HTTP__WORKERS", "3"),
            ("UNRELATED", "x"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let config = from_sources(Some(&path.0), env).unwrap();
        assert_eq!(config.http.address, "0.0.0.0:8080");
        assert_eq!(config.http.workers, 3);
        assert_eq!(HttpConfig::default().workers, 1);
        let orders = &config.subscriptions["orders"];
        assert_eq!(orders.workers, Some(32));
        assert_eq!(orders.max_lease, Some(Duration::from_secs(30 * 60)));
        assert_eq!(orders.failure_policy, Some(FailurePolicyConfig::Retry));
        assert_eq!(orders.progress_store, Some(ProgressStoreConfig::None {}));
        assert_eq!(
            config.connection.emulator_host.as_deref(),
            Some("localhost:8085")
        );
        let registration = futures::executor::block_on(orders.apply(
            "orders",
            Registration::raw(
                &orders.name,
                |_, d: leasehold::Delivery| async move { d.ack() },
            ),
        ))
        .unwrap();
        assert_eq!(registration.options().workers, 32);
        assert_eq!(registration.options().max_lease, Duration::from_secs(1800));
    }

    /// Keys of a subscription's table that are no field of [`leasehold::Options`], and why.
    const SERVICE_ONLY: &[(&str, &str)] = &[
        (
            "decode",
            "the schema a schema handler decodes with: its decoder is built at start",
        ),
        (
            "name",
            "the subscription itself: the registration is built for it",
        ),
        (
            "failure_policy",
            "set on the Registration, not in Options (a custom policy is code)",
        ),
        ("panic_policy", "set on the Registration, not in Options"),
        (
            "delivery",
            "how messages arrive: the service binds a push endpoint",
        ),
        (
            "dead_letter_subscription",
            "where `replay KEY` takes from: a replay's, not the runtime's Options",
        ),
        (
            "push",
            "the push endpoint's table: leasehold-push, not the runtime's Options",
        ),
        (
            "progress_store",
            "set on the Registration, not in Options: the table names a store to open",
        ),
        (
            "outbox",
            "the outbox relay's table: leasehold-relay's RelayOptions, not the runtime's",
        ),
    ];

    /// Fields of [`leasehold::Options`] the configuration deliberately has no key for, and why.
    const NOT_EXPOSED: &[(&str, &str)] = &[];

    /// The keys a table of `T` accepts: the field names its `Deserialize` asks for.
    fn keys_of<T: serde::de::DeserializeOwned>() -> BTreeSet<String> {
        /// A deserializer that only records the fields of the struct asked of it.
        struct Fields(&'static [&'static str]);
        impl<'de> serde::Deserializer<'de> for &mut Fields {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> Result<V::Value, Self::Error> {
                Err(serde::de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = fields;
                Err(serde::de::Error::custom("fields recorded"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut fields = Fields(&[]);
        let _ = T::deserialize(&mut fields);
        fields.0.iter().map(|f| f.to_string()).collect()
    }

    /// The keys of a `progress_store` table: its tag, and the fields of every kind (read from
    /// serde's refusal of an unknown one, which lists what it expected).
    fn progress_store_keys() -> BTreeSet<String> {
        let mut keys = BTreeSet::from(["kind".to_string()]);
        for kind in ["memory", "none", "redb", "spanner"] {
            let refused = serde_json::from_value::<ProgressStoreConfig>(
                serde_json::json!({ "kind": kind, "no_such_key": 1 }),
            )
            .expect_err("every kind refuses an unknown key");
            let refused = refused.to_string();
            let expected = refused.split("expected").nth(1).unwrap_or_default();
            keys.extend(expected.split('`').skip(1).step_by(2).map(str::to_string));
        }
        assert!(keys.contains("ttl"), "{keys:?}");
        keys
    }

    /// The keys `service/docs/reference.md` lists under `### heading` of its Configuration: the
    /// names in backquotes in the first cell of each row of the table there.
    fn documented_keys(heading: &str) -> BTreeSet<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md");
        let reference = std::fs::read_to_string(path).unwrap();
        let configuration = reference
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|c| c.split("\n## ").next())
            .expect("the reference has a Configuration section");
        let section = configuration
            .split(&format!("\n### {heading}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("the reference has no section {heading}"));
        let section = section.split("\n### ").next().unwrap();
        let mut keys = BTreeSet::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let first = row.split('|').nth(1).unwrap();
            keys.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
        }
        keys
    }

    #[test]
    fn every_key_is_in_the_reference_and_the_reference_names_no_other() {
        let sections = [
            ("`[connection]`", keys_of::<ConnectionConfig>()),
            ("`[http]`", keys_of::<HttpConfig>()),
            ("`[telemetry]`", keys_of::<TelemetryConfig>()),
            ("`[subscriptions.KEY]`", keys_of::<SubscriptionConfig>()),
            ("`progress_store`", progress_store_keys()),
            ("`breaker`", keys_of::<BreakerConfig>()),
            ("`outbox`", keys_of::<OutboxConfig>()),
            ("`[subscriptions.KEY.push]`", keys_of::<PushConfig>()),
            ("`decode`", keys_of::<DecodeConfig>()),
        ];
        assert_eq!(
            keys_of::<ServiceConfig>(),
            BTreeSet::from(["connection", "http", "telemetry", "subscriptions"].map(String::from)),
            "a new section of the file needs its table in service/docs/reference.md"
        );
        let mut problems = Vec::new();
        for (heading, keys) in sections {
            assert!(!keys.is_empty(), "no keys read for {heading}");
            let documented = documented_keys(heading);
            for key in keys.difference(&documented) {
                problems.push(format!(
                    "{heading} takes {key}, which the reference does not list"
                ));
            }
            for key in documented.difference(&keys) {
                problems.push(format!(
                    "the reference lists {key} under {heading}, which it does not take"
                ));
            }
        }
        assert!(
            problems.is_empty(),
            "service/docs/reference.md: {problems:#?}"
        );
    }

    /// A struct's fields and their values, from its pretty `Debug` (`Name {\n    field: value,`).
    fn debug_fields(value: &impl std::fmt::Debug) -> BTreeMap<String, String> {
        let text = format!("{value:#?}");
        let mut fields = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in text.lines().skip(1) {
            let top = line.strip_prefix("    ").filter(|l| !l.starts_with(' '));
            match top.and_then(|l| l.split_once(": ")) {
                Some((field, value)) => {
                    fields.insert(field.to_string(), value.trim_end_matches(',').to_string());
                    current = Some(field.to_string());
                }
                None => {
                    if let Some(field) = &current
                        && line.starts_with("        ")
                    {
                        fields.get_mut(field).unwrap().push_str(line.trim());
                    }
                }
            }
        }
        fields
    }

    /// The fields of [`leasehold::Options`].
    fn option_fields() -> BTreeSet<String> {
        let fields: BTreeSet<String> = debug_fields(&leasehold::Options::default())
            .into_keys()
            .collect();
        assert!(
            fields.contains("workers") && fields.len() > 10,
            "Options' fields, from its Debug: {fields:?}"
        );
        fields
    }

    #[test]
    fn every_option_has_a_key_and_every_key_an_option() {
        let keys = keys_of::<SubscriptionConfig>();
        assert!(keys.contains("name"), "the table's keys: {keys:?}");
        let options = option_fields();
        let listed = |list: &[(&str, &str)], key: &str| list.iter().any(|(k, _)| *k == key);
        let mut problems = Vec::new();
        for option in &options {
            if !keys.contains(option.as_str()) && !listed(NOT_EXPOSED, option) {
                problems.push(format!(
                    "Options::{option} has no key in a subscription's table: add it to \
                     SubscriptionConfig and apply(), or to NOT_EXPOSED with the reason"
                ));
            }
        }
        for key in &keys {
            if !options.contains(key) && !listed(SERVICE_ONLY, key) {
                problems.push(format!(
                    "the key {key} is no field of Options: remove it, or add it to \
                     SERVICE_ONLY with the reason"
                ));
            }
        }
        for (key, _) in SERVICE_ONLY {
            if options.contains(*key) || !keys.contains(*key) {
                problems.push(format!(
                    "SERVICE_ONLY lists {key}, which is not service-only"
                ));
            }
        }
        for (option, _) in NOT_EXPOSED {
            if keys.contains(*option) || !options.contains(*option) {
                problems.push(format!("NOT_EXPOSED lists {option}, which is not hidden"));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// Every option, set to a valid value other than its default.
    const EVERY_OPTION: &str = r#"
[subscriptions.ledger]
name = "projects/p/subscriptions/ledger"
workers = 3
worker_threads = 2
streams = 2
max_outstanding_messages = 500
max_outstanding_bytes = 1048576
max_read_ahead_messages = 50
max_read_ahead_bytes = 65536
dedupe_on = "leasehold-key"
max_lease = "20m"
max_lease_extension = "30s"
max_attempts = 7
drain_timeout = "5s"
start_timeout = "3s"
health_probe_interval = "2s"
liveness_timeout = "4s"
max_batch_messages = 10
max_batch_bytes = 65536
max_batch_wait = "20ms"
trace_sample_ratio = 0.5
breaker = { window = "30s", min_messages = 5, failure_ratio = 0.8, consecutive_failures = 3, cooldown = "1s", max_cooldown = "30s", read_ahead_messages = 400, read_ahead_bytes = 262144 }
"#;

    #[test]
    fn every_key_of_a_table_reaches_the_registration() {
        let path = tempfile_path::write(EVERY_OPTION);
        let config = from_sources(Some(&path.0), []).unwrap();
        let table = &config.subscriptions["ledger"];
        let options = option_fields();
        let set = debug_fields(table);
        let unset: Vec<_> = options
            .iter()
            .filter(|o| set.get(*o).is_none_or(|v| v == "None"))
            .collect();
        assert!(unset.is_empty(), "EVERY_OPTION does not set {unset:?}");

        let registration = futures::executor::block_on(table.apply(
            "ledger",
            Registration::raw_batch(
                &table.name,
                |batch: leasehold::Batch<bytes::Bytes>| async move {
                    let mut outcomes = leasehold::BatchOutcome::new();
                    for item in &batch {
                        outcomes.set(&item.delivery, item.delivery.ack());
                    }
                    outcomes
                },
            ),
        ))
        .unwrap();
        registration.validate().unwrap();
        let (applied, default) = (
            debug_fields(registration.options()),
            debug_fields(&leasehold::Options::default()),
        );
        let ignored: Vec<_> = options
            .iter()
            .filter(|o| applied[*o] == default[*o])
            .collect();
        assert!(
            ignored.is_empty(),
            "apply() does not set {ignored:?} on the registration"
        );
    }

    /// The configuration of `text` (a file) with `env` over it, or the whole chain of its error.
    fn read(text: &str, env: &[(&str, &str)]) -> Result<ServiceConfig, String> {
        let path = tempfile_path::write(text);
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        from_sources(Some(&path.0), env).map_err(|e| {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            text
        })
    }

    /// The registration `orders`'s table of `config` builds over `registration`.
    fn applied(config: &ServiceConfig, registration: Registration) -> Registration {
        futures::executor::block_on(config.subscriptions["orders"].apply("orders", registration))
            .unwrap()
    }

    fn raw(name: &str) -> Registration {
        Registration::raw(name, |_, d: leasehold::Delivery| async move { d.ack() })
    }

    const ORDERS: &str = "[subscriptions.orders]\nname = \"projects/p/subscriptions/orders\"\n";

    #[test]
    fn a_breaker_table_sets_the_registrations_breaker_and_the_environment_wins() {
        let file = format!(
            "{ORDERS}breaker = {{ window = \"2m\", min_messages = 50, failure_ratio = 0.8, \
             consecutive_failures = 4, cooldown = \"2s\", max_cooldown = \"90s\" }}\n"
        );
        let config = read(&file, &[]).unwrap();
        let registration = applied(&config, raw("projects/p/subscriptions/orders"));
        registration.validate().unwrap();
        let expected = leasehold::Breaker::new()
            .window(Duration::from_secs(120))
            .min_messages(50)
            .failure_ratio(0.8)
            .consecutive_failures(Some(4))
            .cooldown(Duration::from_secs(2), Duration::from_secs(90));
        assert_eq!(registration.options().breaker, Some(expected));

        // 0 consecutive failures: the ratio only. From the environment, over the file.
        let env = [(
            "LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__CONSECUTIVE_FAILURES",
            "0",
        )];
        let config = read(&file, &env).unwrap();
        let breaker = applied(&config, raw("projects/p/subscriptions/orders"))
            .options()
            .breaker
            .unwrap();
        assert_eq!(breaker.consecutive_failures, None);
        assert_eq!(breaker.min_messages, 50, "the file's other keys stay");

        // No table: no breaker. An empty one, or one key from the environment alone: the
        // defaults (with that key).
        let config = read(ORDERS, &[]).unwrap();
        let registration = applied(&config, raw("projects/p/subscriptions/orders"));
        assert_eq!(registration.options().breaker, None);
        let config = read(&format!("{ORDERS}breaker = {{}}\n"), &[]).unwrap();
        let registration = applied(&config, raw("projects/p/subscriptions/orders"));
        assert_eq!(
            registration.options().breaker,
            Some(leasehold::Breaker::new())
        );
        let env = [("LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__COOLDOWN", "1s")];
        let config = read(ORDERS, &env).unwrap();
        let breaker = applied(&config, raw("projects/p/subscriptions/orders"))
            .options()
            .breaker
            .unwrap();
        assert_eq!(breaker.cooldown, Duration::from_secs(1));
        assert_eq!(breaker.window, leasehold::Breaker::new().window);

        // Over a breaker set in code: the file's keys win, the others keep the code's values.
        let config = read(&format!("{ORDERS}breaker = {{ cooldown = \"3s\" }}\n"), &[]).unwrap();
        let in_code = raw("projects/p/subscriptions/orders")
            .breaker(leasehold::Breaker::new().min_messages(7));
        let breaker = applied(&config, in_code).options().breaker.unwrap();
        assert_eq!(
            (breaker.min_messages, breaker.cooldown),
            (7, Duration::from_secs(3))
        );
    }

    #[test]
    fn a_breaker_value_out_of_range_is_refused_by_its_key() {
        for (set, option) in [
            ("window = \"500ms\"", "breaker.window"),
            ("window = \"2h\"", "breaker.window"),
            ("min_messages = 0", "breaker.min_messages"),
            ("failure_ratio = 0", "breaker.failure_ratio"),
            ("failure_ratio = 1.5", "breaker.failure_ratio"),
            ("cooldown = \"10ms\"", "breaker.cooldown"),
            ("max_cooldown = \"2h\"", "breaker.max_cooldown"),
            // A first cooldown above the default longest one, which the table leaves unset.
            ("cooldown = \"2m\"", "breaker.max_cooldown"),
        ] {
            let config = read(&format!("{ORDERS}breaker = {{ {set} }}\n"), &[]).unwrap();
            let refused = applied(&config, raw("projects/p/subscriptions/orders"))
                .validate()
                .unwrap_err();
            assert_eq!(refused.option, option, "{set}: {refused}");
            assert!(refused.to_string().starts_with(option), "{refused}");
        }
        // What does not fit the schema is refused as it is read, naming the key: a boolean
        // too, which the configuration crate would otherwise read as 0 or 1.
        let key = |k: &str| format!("key `subscriptions.orders.breaker{k}`");
        for (set, named) in [
            ("cooldwn = \"1s\"", key("")),
            ("consecutive_failures = -1", key(".consecutive_failures")),
            ("consecutive_failures = false", key(".consecutive_failures")),
            ("consecutive_failures = true", key(".consecutive_failures")),
            ("consecutive_failures = 2.5", key(".consecutive_failures")),
            ("cooldown = \"soon\"", key(".cooldown")),
        ] {
            let error = read(&format!("{ORDERS}breaker = {{ {set} }}\n"), &[]).unwrap_err();
            assert!(error.contains(&named), "{set}: {error}");
        }
        let error = read(
            ORDERS,
            &[("LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__COOLDWN", "1s")],
        )
        .unwrap_err();
        assert!(error.contains("unknown field `cooldwn`"), "{error}");
        let error = read(&format!("{ORDERS}breaker = true\n"), &[]).unwrap_err();
        assert!(error.contains("breaker"), "{error}");
    }

    #[test]
    fn an_unknown_key_anywhere_is_an_error_that_names_it_and_its_table() {
        let push = "delivery = \"push\"\npush = { path = \"/push/orders\", \
                    allow_unauthenticated = true, shadow = 1 }\n";
        let spanner = "progress_store = { kind = \"spanner\", database = \"d\", shadow = 1 }\n";
        let cases = [
            ("shadow = 1\n".to_string(), "at the top level (no table)"),
            ("[connection]\nshadow = 1\n".into(), "`connection`"),
            ("[http]\nshadow = 1\n".into(), "`http`"),
            ("[telemetry]\nshadow = 1\n".into(), "`telemetry`"),
            (format!("{ORDERS}shadow = 1\n"), "`subscriptions.orders`"),
            (
                format!("{ORDERS}breaker = {{ shadow = 1 }}\n"),
                "`subscriptions.orders.breaker`",
            ),
            (format!("{ORDERS}{push}"), "`subscriptions.orders.push`"),
            (
                format!("{ORDERS}progress_store = {{ kind = \"memory\", shadow = 1 }}\n"),
                "`subscriptions.orders.progress_store`",
            ),
            (
                format!("{ORDERS}progress_store = {{ kind = \"none\", shadow = 1 }}\n"),
                "`subscriptions.orders.progress_store`",
            ),
            (
                format!(
                    "{ORDERS}progress_store = {{ kind = \"redb\", path = \"p\", shadow = 1 }}\n"
                ),
                "`subscriptions.orders.progress_store`",
            ),
            (
                format!("{ORDERS}{spanner}"),
                "`subscriptions.orders.progress_store`",
            ),
        ];
        for (file, table) in cases {
            let error = read(&file, &[]).unwrap_err();
            assert!(error.contains("unknown field `shadow`"), "{file}: {error}");
            assert!(error.contains(table), "{file}: {table} in {error}");
        }
        // From the environment too, in a table the file does not have.
        for (variable, table) in [
            ("LEASEHOLD__SHADOW", "at the top level (no table)"),
            ("LEASEHOLD__HTTP__SHADOW", "`http`"),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__SHADOW",
                "`subscriptions.orders`",
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__PROGRESS_STORE__SHADOW",
                "`subscriptions.orders.progress_store`",
            ),
        ] {
            let file = format!("{ORDERS}progress_store = {{ kind = \"memory\" }}\n");
            let error = read(&file, &[(variable, "1")]).unwrap_err();
            assert!(
                error.contains("unknown field `shadow`"),
                "{variable}: {error}"
            );
            assert!(error.contains(table), "{variable}: {table} in {error}");
        }
        // The kinds without keys still read.
        for kind in ["memory", "none"] {
            let file = format!("{ORDERS}progress_store = {{ kind = \"{kind}\" }}\n");
            assert!(read(&file, &[]).is_ok(), "{kind}");
        }
    }
}
