//! Integration tests against Google's Pub/Sub emulator: the one `PUBSUB_EMULATOR_HOST` names,
//! or one this test binary starts on a free port and stops when it exits. Each test makes its
//! own random topic and subscription and deletes them at the end.

#[path = "emulator/outcomes.rs"]
mod outcomes;

#[path = "emulator/dead_letter.rs"]
mod dead_letter;

#[path = "emulator/exactly_once.rs"]
mod exactly_once;

#[path = "emulator/workers.rs"]
mod workers;

#[path = "emulator/faults.rs"]
mod faults;

#[path = "emulator/drain.rs"]
mod drain;

#[path = "emulator/threads.rs"]
mod threads;

#[path = "emulator/soak.rs"]
mod soak;

#[path = "emulator/batches.rs"]
mod batches;

#[path = "emulator/replay.rs"]
mod replay;

#[path = "emulator/dedupe.rs"]
mod dedupe;
