//! Every crate of the workspace keeps its layout (`leasehold_test_support::layout`): its
//! folders by role, stacked bottom to top as listed here, imports only downward, no import loop,
//! no file over 350 lines of logic. ARCHITECTURE.md draws the same stacks.

use leasehold_test_support::layout::{Layout, reachable};
use std::path::{Path, PathBuf};

/// A crate's `src`, from the workspace root (`""` for the root crate's).
fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(krate)
        .join("src")
}

/// `leasehold-actors`: the runtime.
fn actors() -> Layout {
    Layout::new(
        src("actors"),
        &[
            "error",
            "rt",
            "rules",
            "status",
            "source",
            "store",
            "lease",
            "api",
            "pool",
            "transactional",
            "supervisor",
            "replay",
            "testing",
        ],
    )
}

/// `leasehold-service`: the configuration at the bottom, then what is measured and rendered,
/// the HTTP surface, the service built and run, and the replay command on top.
fn service() -> Layout {
    Layout::new(
        src("service"),
        &[
            "config",
            "error",
            "telemetry",
            "observe",
            "http",
            "builder",
            "serve",
            "replay",
        ],
    )
}

/// `leasehold-push`: its counters and admission gate, the envelope and the token check, then
/// the stream the runtime reads and the endpoint that feeds it; on top, what only fuzz builds
/// open to the fuzz targets.
fn push() -> Layout {
    Layout::new(
        src("push"),
        &[
            "stats", "gate", "envelope", "auth", "source", "endpoint", "fuzzing",
        ],
    )
}

/// `leasehold-spanner`: its errors, the driver thread, where Spanner is, the schema and the
/// emulator, then the store.
fn spanner() -> Layout {
    Layout::new(
        src("spanner"),
        &["error", "driver", "endpoint", "schema", "local", "store"],
    )
}

/// `leasehold-postgres`: the driver and the schema, then the store.
fn postgres() -> Layout {
    Layout::new(src("postgres"), &["driver", "schema", "local", "store"])
}

/// `leasehold-schema`: its errors, where revisions come from, the schema attributes, what a
/// decoder counts, Google's schema service, the process's cache, what every decoder does, the
/// formats, then the decoders a registration takes.
fn schema() -> Layout {
    Layout::new(
        src("schema"),
        &[
            "error",
            "source",
            "attributes",
            "stats",
            "google",
            "cache",
            "reader",
            "avro",
            "protobuf",
            "decoders",
        ],
    )
}

/// `leasehold-relay`: its rules, its counters, the sender over Google's publisher, then the
/// relay's loop and handle.
fn relay() -> Layout {
    Layout::new(src("relay"), &["rules", "stats", "sender", "relay"])
}

/// `leasehold`: Google's client behind the runtime's traits, and the emulator.
fn root() -> Layout {
    Layout::new(src(""), &["redb_store", "google", "connection", "emulator"])
}

#[test]
fn the_runtime_keeps_its_layout() {
    actors().check(40);
}

#[test]
fn the_service_keeps_its_layout() {
    service().check(20);
}

#[test]
fn the_push_crate_keeps_its_layout() {
    push().check(6);
}

#[test]
fn the_postgres_store_keeps_its_layout() {
    postgres().check(5);
}

#[test]
fn the_spanner_store_keeps_its_layout() {
    spanner().check(6);
}

#[test]
fn the_schema_crate_keeps_its_layout() {
    schema().check(10);
}

#[test]
fn the_relay_keeps_its_layout() {
    relay().check(8);
}

#[test]
fn the_user_facing_crate_keeps_its_layout() {
    root().check(4);
}

#[test]
fn the_scan_sees_the_folders_and_their_imports() {
    let graph = actors().graph();
    assert!(
        graph["pool/worker_pool"].contains("rules/schedule"),
        "{graph:?}"
    );
    assert!(graph["supervisor/actor"].contains("pool/messages"));
    assert!(graph["transactional/batch"].contains("store"));
    let graph = service().graph();
    assert!(
        graph["observe/status"].contains("observe/charts"),
        "{graph:?}"
    );
    assert!(graph["serve"].contains("http"), "{graph:?}");
}

#[test]
fn the_handle_does_not_know_the_supervisor_actor() {
    assert!(!reachable(&actors().graph(), "supervisor/subscription").contains("supervisor/actor"));
}

#[test]
fn what_the_service_measures_does_not_know_how_it_is_served() {
    let graph = service().graph();
    for module in graph.keys().filter(|m| m.starts_with("observe")) {
        let reached = reachable(&graph, module);
        assert!(
            !reached
                .iter()
                .any(|m| m.starts_with("http") || m.starts_with("replay")),
            "{module} reaches {reached:?}"
        );
    }
}
