//! The configurations each round runs, in order, and where each is in that list (for the
//! ratios of the report).
//!
//! Uses nothing else of this benchmark; the `env::` names are those of `leasehold_soak::env`.

/// One configuration: which store and handler the replicas run, how many, on how many
/// streams.
pub(crate) struct Config {
    /// What the tables call it.
    pub(crate) name: &'static str,
    /// `env::STORE`: `memory`, `postgres`, `postgres-batch`, `spanner`, `spanner-batch` or
    /// `postgres-outbox`.
    pub(crate) store: &'static str,
    /// `env::DRIVER`: where the connections' I/O runs ("" for Leasehold's connection thread).
    pub(crate) driver: &'static str,
    /// Whether the handler inserts a row per message (in the transaction).
    pub(crate) row: bool,
    /// Replica processes on the one subscription.
    pub(crate) replicas: usize,
    /// `env::STREAMS`: streaming pulls per replica.
    pub(crate) streams: usize,
    /// `env::WORKERS`: handlers running at once per replica.
    pub(crate) workers: usize,
    /// The outbox store's handlers `NOTIFY` other processes' relays (`env::OUTBOX_NOTIFY`).
    pub(crate) notify: bool,
}

/// Every configuration, in the order each round runs them.
pub(crate) const CONFIGS: &[Config] = &[
    Config {
        name: "memory store, 1 replica",
        store: "memory",
        driver: "",
        row: false,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres, no row, 1 replica",
        store: "postgres",
        driver: "",
        row: false,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres + row, 1 replica",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres + row, 1 replica, opener-driven",
        store: "postgres",
        driver: "opener",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres + row, 1 replica, 3 streams",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 1,
        streams: 3,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres + row, 3 replicas",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 3,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres batches of 100 + rows, 1 replica",
        store: "postgres-batch",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    Config {
        name: "postgres batches + rows, 1 replica, 3 streams",
        store: "postgres-batch",
        driver: "",
        row: true,
        replicas: 1,
        streams: 3,
        workers: 8,
        notify: true,
    },
    Config {
        name: "spanner + row, 1 replica",
        store: "spanner",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    // One batch at a time: with 8, the emulator's aborts (it runs one read-write transaction
    // at a time) nack whole batches over and over.
    Config {
        name: "spanner batches of 100 + rows, 1 replica, 1 worker",
        store: "spanner-batch",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 1,
        notify: true,
    },
    // One handler at a time: Spanner's emulator runs one read-write transaction at a time and
    // aborts the others, so with 8 the figures above are mostly aborts; with one they are the
    // store's round trips, side by side with PostgreSQL's.
    Config {
        name: "postgres + row, 1 replica, 1 worker",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 1,
        notify: true,
    },
    Config {
        name: "spanner + row, 1 replica, 1 worker",
        store: "spanner",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 1,
        notify: true,
    },
    Config {
        name: "memory store, 1 replica, 3 streams",
        store: "memory",
        driver: "",
        row: false,
        replicas: 1,
        streams: 3,
        workers: 8,
        notify: true,
    },
    // The row and one message published through the transactional outbox, in the same
    // transaction; the replica's relay sends it (measured until it sent them all).
    Config {
        name: "postgres + row + outbox publish, 1 replica",
        store: "postgres-outbox",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: true,
    },
    // The same without the NOTIFY to other processes' relays (`notify_relays(false)`).
    Config {
        name: "postgres + row + outbox publish, no NOTIFY",
        store: "postgres-outbox",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
        workers: 8,
        notify: false,
    },
];

/// Where each configuration is in [`CONFIGS`], for the ratios.
pub(crate) const MEMORY: usize = 0;
pub(crate) const NO_ROW: usize = 1;
pub(crate) const ROW: usize = 2;
pub(crate) const OPENER: usize = 3;
pub(crate) const STREAMS: usize = 4;
pub(crate) const REPLICAS: usize = 5;
pub(crate) const BATCHES: usize = 6;
pub(crate) const BATCH_STREAMS: usize = 7;
pub(crate) const SPANNER: usize = 8;
pub(crate) const SPANNER_BATCHES: usize = 9;
pub(crate) const ROW_ONE_WORKER: usize = 10;
pub(crate) const SPANNER_ONE_WORKER: usize = 11;
pub(crate) const MEMORY_STREAMS: usize = 12;
pub(crate) const OUTBOX: usize = 13;
pub(crate) const OUTBOX_QUIET: usize = 14;

/// The configurations `LEASEHOLD_SCALE_ONLY=outbox` runs: the transactional handler with and
/// without one outbox publish (with and without its `NOTIFY`), side by side.
pub(crate) const OUTBOX_PAIR: &[usize] = &[ROW, OUTBOX, OUTBOX_QUIET];

impl Config {
    /// Whether its store is Spanner's (the Spanner emulator), not PostgreSQL's.
    pub(crate) fn on_spanner(&self) -> bool {
        self.store.starts_with("spanner")
    }

    /// Whether its handler publishes through the outbox (its replica's relay sends each).
    pub(crate) fn outbox(&self) -> bool {
        self.store.ends_with("-outbox")
    }
}
