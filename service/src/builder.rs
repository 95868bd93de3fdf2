//! The service as it is built: a [`ServiceConfig`] and the handler bound to each of its keys
//! ([`Service`], its binders), what it returns when it stops ([`Summary`]), and the signals that
//! stop it.
//!
//! Uses [`crate::config`]; running it is `serve.rs`, replaying with it `replay/`.

use crate::config::{ConfigError, ServiceConfig, SubscriptionConfig, TopicKind};
use crate::error::ServiceError;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold::{Batch, Connection, Delivery, IntoBatchOutcome, IntoOutcome, Registration};
use leasehold::{
    status::StatsSnapshot,
    store::{OutboxStore, TransactionalBatchStore, TransactionalStore},
};
use leasehold_schema::{ReaderRevision, SchemaError, SchemaStats, Schemas, SerdeDecoder};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::future::Future;

/// How the registration bound to a key is built.
pub(crate) enum Build {
    /// From the subscription's name.
    Plain(Box<dyn FnOnce(&str) -> Registration>),
    /// From the subscription's name and its `decode` table's schema, once a decoder of it is
    /// built (at start: the schema is checked then).
    Schema(Box<dyn FnOnce(String, Decoding) -> Built>),
}

/// A schema handler's registration, and what its decoder counts.
type Built = LocalBoxFuture<'static, Result<(Registration, SchemaStats), SchemaError>>;

/// What a schema binder builds its decoder from.
pub(crate) struct Decoding {
    /// The process's revisions, shared by every subscription.
    pub(crate) schemas: Schemas,
    /// The `decode` table's schema.
    pub(crate) schema: String,
    /// The `decode` table's reader revision.
    pub(crate) reader: ReaderRevision,
}

/// Starts the relay of a store's outbox, its type erased.
pub(crate) type StartRelay = Box<
    dyn FnOnce(
        leasehold::Connection,
        leasehold_relay::RelayOptions,
    ) -> futures::future::LocalBoxFuture<
        'static,
        Result<leasehold_relay::Relay, leasehold_relay::RelayError>,
    >,
>;

/// A service: the subscriptions of a [`ServiceConfig`], each with the handler bound to its key.
#[must_use = "a service does nothing until it runs"]
pub struct Service {
    pub(crate) config: ServiceConfig,
    pub(crate) handlers: BTreeMap<String, Build>,
    /// The stores whose outbox a relay sends, by the key of the subscription it reports under.
    pub(crate) relays: BTreeMap<String, StartRelay>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("config", &self.config)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .field("relays", &self.relays.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What each subscription did, when the service stopped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Summary {
    /// Each subscription's counters at the end, by key.
    pub subscriptions: BTreeMap<String, StatsSnapshot>,
}

impl Service {
    /// A service for `config`; bind a handler to each of its subscriptions.
    pub fn new(config: ServiceConfig) -> Self {
        Self {
            config,
            handlers: BTreeMap::new(),
            relays: BTreeMap::new(),
        }
    }

    /// Runs a relay of `store`'s transactional outbox (`leasehold_relay::Relay`), started after
    /// the subscriptions and stopped after them (so that what their last handlers commit is
    /// sent), its metrics and status under the subscription `key`: bind it to the key whose
    /// handlers publish through the store. The key's `outbox` table sets its options
    /// (`relay = false`: not in this process). One relay per store and process is enough.
    ///
    /// ```no_run
    /// # use leasehold_service::{Service, config::ServiceConfig};
    /// # use leasehold::{Delivery, OutboxMessage};
    /// # use leasehold_spanner::{SpannerStore, SpannerTransaction};
    /// # async fn f(config: ServiceConfig, store: SpannerStore) -> Result<(), Box<dyn std::error::Error>> {
    /// // A PostgresStore (leasehold-postgres) is bound the same way.
    /// let on_order = async |order: u64, d: Delivery, tx: &mut SpannerTransaction| {
    ///     let confirmed = OutboxMessage::new("projects/p/topics/confirmations", order.to_string());
    ///     tx.publish(confirmed).await.map(|()| d.ack())
    /// };
    /// Service::new(config)
    ///     .transactional_json("orders", store.clone(), on_order)
    ///     .outbox("orders", store)
    ///     .run()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn outbox<S: OutboxStore>(mut self, key: impl Into<String>, store: S) -> Self {
        let start: StartRelay = Box::new(move |connection, options| {
            Box::pin(
                async move { leasehold_relay::Relay::start(store, &connection, options).await },
            )
        });
        self.relays.insert(key.into(), start);
        self
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Binds the subscription configured under `key` to a registration built by `build` from
    /// the subscription's name; the configuration's options are set on it after.
    pub fn registration(
        mut self,
        key: impl Into<String>,
        build: impl FnOnce(&str) -> Registration + 'static,
    ) -> Self {
        self.handlers
            .insert(key.into(), Build::Plain(Box::new(build)));
        self
    }

    /// Binds the subscription configured under `key` to a registration built by `build` from
    /// the subscription's name and a decoder of its `decode` table's schema into `T` (Avro or
    /// Protocol Buffers, whichever the schema is; built at start, when the schema and the topic
    /// are checked): for the registrations of a decoder the other schema binders do not make
    /// (`Registration::transactional_decoded`, a custom failure policy).
    pub fn schema_registration<T: DeserializeOwned + 'static>(
        mut self,
        key: impl Into<String>,
        build: impl FnOnce(&str, SerdeDecoder<T>) -> Registration + 'static,
    ) -> Self {
        let built = move |name: String, d: Decoding| {
            async move {
                let decoder = d.schemas.decoder::<T>(&d.schema, d.reader).await?;
                let stats = decoder.stats();
                Ok((build(&name, decoder), stats))
            }
            .boxed_local()
        };
        self.handlers
            .insert(key.into(), Build::Schema(Box::new(built)));
        self
    }

    /// Binds an async handler of the messages of the key's `decode` schema, decoded into `T` by
    /// the revision each was written with (see `leasehold_schema::Schemas::decoder` and
    /// [`Registration::decoded`]).
    pub fn schema<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        self.schema_registration(key, move |name, decoder: SerdeDecoder<T>| {
            Registration::decoded(name, decoder, handler)
        })
    }

    /// Binds an async batch handler of the key's `decode` schema's messages (see
    /// [`schema`](Self::schema) and [`Registration::decoded_batch`]).
    pub fn schema_batch<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        self.schema_registration(key, move |name, decoder: SerdeDecoder<T>| {
            Registration::decoded_batch(name, decoder, handler)
        })
    }

    /// Binds an async handler of the key's `decode` schema's Protocol Buffers messages, decoded
    /// into the `prost` type `M` (see `leasehold_schema::Schemas::protobuf`).
    pub fn protobuf<M, F, Fut>(mut self, key: impl Into<String>, handler: F) -> Self
    where
        M: leasehold_schema::prost::Message + Default + 'static,
        F: Fn(M, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        let built = move |name: String, d: Decoding| {
            async move {
                let decoder = d.schemas.protobuf::<M>(&d.schema).await?;
                let stats = decoder.stats();
                Ok((Registration::decoded(&name, decoder, handler), stats))
            }
            .boxed_local()
        };
        self.handlers
            .insert(key.into(), Build::Schema(Box::new(built)));
        self
    }

    /// Binds an async handler of JSON payloads (see [`Registration::json`]).
    pub fn json<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        self.registration(key, move |name| Registration::json(name, handler))
    }

    /// Binds an async handler of raw payloads (see [`Registration::raw`]).
    pub fn raw<F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(bytes::Bytes, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        self.registration(key, move |name| Registration::raw(name, handler))
    }

    /// Binds an async batch handler of JSON payloads (see [`Registration::json_batch`]); the
    /// table's `max_batch_messages`, `max_batch_bytes` and `max_batch_wait` shape its batches.
    pub fn json_batch<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        self.registration(key, move |name| Registration::json_batch(name, handler))
    }

    /// Binds an async batch handler of raw payloads (see [`Registration::raw_batch`]).
    pub fn raw_batch<F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<bytes::Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        self.registration(key, move |name| Registration::raw_batch(name, handler))
    }

    /// Binds a blocking handler of JSON payloads (see [`Registration::blocking_json`]).
    pub fn blocking_json<T, F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| Registration::blocking_json(name, handler))
    }

    /// Binds a blocking handler of raw payloads (see [`Registration::blocking_raw`]).
    pub fn blocking_raw<F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(bytes::Bytes, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| Registration::blocking_raw(name, handler))
    }

    /// Binds a blocking batch handler of JSON payloads (see
    /// [`Registration::blocking_json_batch`]).
    pub fn blocking_json_batch<T, F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::blocking_json_batch(name, handler)
        })
    }

    /// Binds a blocking batch handler of raw payloads (see
    /// [`Registration::blocking_raw_batch`]).
    pub fn blocking_raw_batch<F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<bytes::Bytes>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::blocking_raw_batch(name, handler)
        })
    }

    /// Binds a handler of JSON payloads whose writes commit with the message's record in one
    /// transaction of `store` (see [`Registration::transactional_json`]).
    pub fn transactional_json<T, S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalStore,
        H: AsyncFn(T, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_json(name, store, handler)
        })
    }

    /// Binds a handler of raw payloads whose writes commit with the message's record in one
    /// transaction of `store` (see [`Registration::transactional_raw`]).
    pub fn transactional_raw<S, H, O>(self, key: impl Into<String>, store: S, handler: H) -> Self
    where
        S: TransactionalStore,
        H: AsyncFn(bytes::Bytes, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_raw(name, store, handler)
        })
    }

    /// Binds a batch handler of JSON payloads whose writes commit with the batch's records in
    /// one transaction of `store` (see [`Registration::transactional_json_batch`]).
    pub fn transactional_json_batch<T, S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<T>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_json_batch(name, store, handler)
        })
    }

    /// Binds a batch handler of raw payloads whose writes commit with the batch's records in
    /// one transaction of `store` (see [`Registration::transactional_raw_batch`]).
    pub fn transactional_raw_batch<S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<bytes::Bytes>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_raw_batch(name, store, handler)
        })
    }
}

impl Build {
    /// The registration bound to `key`, built for its table (the options not set yet), and what
    /// its decoder counts: a schema binder's once its `decode` table's schema exists, is of a
    /// type it reads, and is its topic's (`schemas`, the process's revisions, made at the
    /// first).
    pub(crate) async fn build(
        self,
        key: &str,
        table: &SubscriptionConfig,
        connection: &Connection,
        schemas: &mut Option<Schemas>,
    ) -> Result<(Registration, Option<SchemaStats>), ServiceError> {
        let refused = |problem: &str| ConfigError::Decode {
            key: key.to_string(),
            problem: problem.to_string(),
        };
        let schema_error = |cause| ServiceError::Schema {
            key: key.to_string(),
            cause,
        };
        match (self, &table.decode) {
            (Build::Plain(build), None) => Ok((build(&table.name), None)),
            (Build::Plain(_), Some(_)) => Err(refused(
                "a decode table, but its handler reads no schema: bind it with \
                 Service::schema, schema_batch, protobuf or schema_registration",
            )
            .into()),
            (Build::Schema(_), None) => Err(refused(
                "its handler reads a schema: its table needs \
                 decode = { schema = \"projects/P/schemas/S\" }",
            )
            .into()),
            (Build::Schema(build), Some(decode)) => {
                if decode.topic == TopicKind::Schema {
                    let topic = leasehold_schema::topic_schema(connection, &table.name)
                        .await
                        .map_err(schema_error)?;
                    let encoding = topic
                        .readable_with(&table.name, &decode.schema)
                        .map_err(schema_error)?;
                    tracing::info!(%key, schema = %decode.schema, encoding = encoding.name(),
                        "the topic's schema is the one the handler reads");
                }
                let schemas = match schemas {
                    Some(schemas) => schemas.clone(),
                    None => schemas
                        .insert(Schemas::connect(connection).await.map_err(schema_error)?)
                        .clone(),
                };
                let decoding = Decoding {
                    schemas,
                    schema: decode.schema.clone(),
                    reader: decode.reader(),
                };
                let (registration, stats) = build(table.name.clone(), decoding)
                    .await
                    .map_err(schema_error)?;
                Ok((registration, Some(stats)))
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub(crate) async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    let which = futures::select! {
        _ = term.recv().fuse() => "SIGTERM",
        _ = int.recv().fuse() => "SIGINT",
    };
    tracing::info!(signal = which, "stop requested");
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::future::LocalBoxFuture;
    use leasehold::{
        BatchOutcome, Outcome,
        error::{Cause, StoreError},
        store::{BatchClaims, Claim, Completed},
    };
    use std::sync::Arc;

    /// A transactional store that is never asked anything: the registrations are only built.
    struct Unused;

    impl TransactionalStore for Unused {
        type Transaction = ();
        fn begin(
            &self,
            _: &str,
            _: &str,
        ) -> LocalBoxFuture<'static, Result<Claim<()>, StoreError>> {
            async { Err(StoreError::Backend(Cause::message("unused"))) }.boxed_local()
        }
        fn commit(&self, _: (), _: Completed) -> LocalBoxFuture<'static, Result<(), StoreError>> {
            async { Ok(()) }.boxed_local()
        }
        fn rollback(&self, _: ()) -> LocalBoxFuture<'static, ()> {
            async {}.boxed_local()
        }
    }

    impl TransactionalBatchStore for Unused {
        fn begin_batch(
            &self,
            _: &str,
            _: &[Arc<str>],
        ) -> LocalBoxFuture<'static, Result<BatchClaims<()>, StoreError>> {
            async { Err(StoreError::Backend(Cause::message("unused"))) }.boxed_local()
        }
        fn commit_batch(
            &self,
            _: (),
            _: Vec<(Arc<str>, Completed)>,
            _: Vec<Arc<str>>,
        ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
            async { Ok(()) }.boxed_local()
        }
    }

    fn ack_all<T>(batch: Batch<T>) -> BatchOutcome {
        let mut outcomes = BatchOutcome::new();
        for item in &batch {
            outcomes.set(&item.delivery, item.delivery.ack());
        }
        outcomes
    }

    /// What a binder bound under `key`: its registration, built for `name`, as `Debug` prints
    /// it, and whether it takes batches (batch options are refused on the others).
    fn bound(mut service: Service, key: &str) -> (String, bool) {
        assert_eq!(service.handlers.keys().collect::<Vec<_>>(), [key]);
        let Some(Build::Plain(build)) = service.handlers.remove(key) else {
            panic!("{key}: a plain binder");
        };
        let registration = build("projects/p/subscriptions/s");
        assert_eq!(registration.subscription(), "projects/p/subscriptions/s");
        let debug = format!("{registration:?}");
        (
            debug,
            registration.max_batch_messages(10).validate().is_ok(),
        )
    }

    #[test]
    fn each_binder_binds_its_kind_of_registration_under_the_key() {
        let new = || Service::new(ServiceConfig::default());
        let one = async |_: bytes::Bytes, d: Delivery| d.ack();
        let json = async |_: u64, d: Delivery| d.ack();
        let blocking = |_: bytes::Bytes, d: Delivery| -> Outcome { d.ack() };
        let blocking_json = |_: u64, d: Delivery| -> Outcome { d.ack() };
        let batch = async |b: Batch<bytes::Bytes>| ack_all(b);
        let json_batch = async |b: Batch<u64>| ack_all(b);
        let in_tx = async |_: bytes::Bytes, d: Delivery, _: &mut ()| d.ack();
        let json_in_tx = async |_: u64, d: Delivery, _: &mut ()| d.ack();
        let batch_in_tx = async |b: Batch<bytes::Bytes>, _: &mut ()| ack_all(b);
        let json_batch_in_tx = async |b: Batch<u64>, _: &mut ()| ack_all(b);
        // (binder, blocking, batch, transactional)
        let cases = [
            ("json", new().json("k", json), false, false, false),
            ("raw", new().raw("k", one), false, false, false),
            (
                "blocking_json",
                new().blocking_json("k", blocking_json),
                true,
                false,
                false,
            ),
            (
                "blocking_raw",
                new().blocking_raw("k", blocking),
                true,
                false,
                false,
            ),
            (
                "json_batch",
                new().json_batch("k", json_batch),
                false,
                true,
                false,
            ),
            ("raw_batch", new().raw_batch("k", batch), false, true, false),
            (
                "blocking_json_batch",
                new().blocking_json_batch("k", ack_all::<u64>),
                true,
                true,
                false,
            ),
            (
                "blocking_raw_batch",
                new().blocking_raw_batch("k", ack_all::<bytes::Bytes>),
                true,
                true,
                false,
            ),
            (
                "transactional_json",
                new().transactional_json("k", Unused, json_in_tx),
                false,
                false,
                true,
            ),
            (
                "transactional_raw",
                new().transactional_raw("k", Unused, in_tx),
                false,
                false,
                true,
            ),
            (
                "transactional_json_batch",
                new().transactional_json_batch("k", Unused, json_batch_in_tx),
                false,
                true,
                true,
            ),
            (
                "transactional_raw_batch",
                new().transactional_raw_batch("k", Unused, batch_in_tx),
                false,
                true,
                true,
            ),
        ];
        for (binder, service, blocking, batch, transactional) in cases {
            let (debug, takes_batches) = bound(service, "k");
            assert!(
                debug.contains(&format!("blocking: {blocking}")),
                "{binder}: {debug}"
            );
            assert!(
                debug.contains(&format!("transactional: {transactional}")),
                "{binder}: {debug}"
            );
            assert_eq!(takes_batches, batch, "{binder}: batch options refused?");
        }
    }
}
