//! Avro: a writer revision prepared for decoding ([`AvroFormat`]: its schema and named types,
//! whether the reader's revision can read it), binary payloads checked (`check.rs`) then
//! decoded by apache-avro, JSON payloads read by the writer schema (`json.rs`), both resolved
//! against the reader's revision by Avro's rules, then deserialized into the handler's type.

pub(crate) mod check;
pub(crate) mod format;
pub(crate) mod json;
