//! The schema decoders against Google's Pub/Sub emulator: Avro schemas and their revisions on
//! the emulator's schema service, topics that validate and stamp what is published; Protocol
//! Buffers messages on a plain topic with the three attributes set as Pub/Sub sets them (the
//! emulator has no Protocol Buffers schemas), their revisions given in code. Each test makes
//! its own schema, topic and subscription and deletes them at the end.

#[path = "emulator/support.rs"]
mod support;

#[path = "emulator/avro.rs"]
mod avro;

#[path = "emulator/protobuf.rs"]
mod protobuf;

#[path = "emulator/outage.rs"]
mod outage;
