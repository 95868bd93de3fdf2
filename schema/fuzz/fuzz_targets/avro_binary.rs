//! The fuzzer's bytes as a BINARY message of `AVRO`'s revision `AVRO_WRITER`, through the
//! `avro()` decoder (src/lib.rs): it must return, whatever the bytes.
#![no_main]

use leasehold::Decoder;
use leasehold_schema_fuzz::{avro, stamped, AVRO, AVRO_WRITER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoder = avro();
    let delivery = stamped(decoder, AVRO, AVRO_WRITER, "BINARY");
    let _ = decoder.decode(bytes::Bytes::copy_from_slice(data), &delivery);
});
