//! The fuzzer's bytes as a JSON message of `PROTO`'s revision `PROTO_REVISION`, through the
//! `protobuf()` decoder (src/lib.rs): it must return, whatever the bytes.
#![no_main]

use leasehold::Decoder;
use leasehold_schema_fuzz::{protobuf, stamped, PROTO, PROTO_REVISION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoder = protobuf();
    let delivery = stamped(decoder, PROTO, PROTO_REVISION, "JSON");
    let _ = decoder.decode(bytes::Bytes::copy_from_slice(data), &delivery);
});
