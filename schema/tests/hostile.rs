//! Crafted bad bytes in binary Avro and Protocol Buffers (cut-off records, lengths far beyond
//! the payload, deep nesting, noise): each is a decode failure sent to the failure policy, never
//! a panic, and decoding it allocates no more than a small multiple of the payload's size (each
//! test thread's allocations are counted by this binary's allocator).

use bytes::Bytes;
use leasehold::testing::delivery;
use leasehold::{DecodeError, Decoder, Delivery};
use leasehold_schema::{FixedRevisions, ReaderRevision, Revision, SchemaType, Schemas};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the bytes the current thread has allocated and not freed, and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; only thread-local
// counters, which allocate nothing, are updated besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count(bytes: isize) {
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + bytes);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most a decode of `len` bytes may allocate at its peak, beyond what was live before: a
/// decoded value costs more than its bytes (a one-byte int is a 32-byte value), plus a fixed
/// amount for the schema's names and the error.
fn bound(len: usize) -> isize {
    (64 * len + 64 * 1024) as isize
}

/// Decodes `data` and returns the error and the peak of the allocations it made.
fn decode_counted<D: Decoder>(
    decoder: &D,
    data: &[u8],
    delivery: &Delivery,
) -> (DecodeError, isize) {
    let data = Bytes::copy_from_slice(data);
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let result = decoder.decode(data.clone(), delivery);
    let peak = PEAK.with(Cell::get) - before;
    match result {
        Ok(_) => panic!("{} crafted bytes decoded", data.len()),
        Err(error) => (error, peak),
    }
}

fn stamped(schema: &str, revision: &str) -> Delivery {
    delivery()
        .attribute("googclient_schemaname", schema)
        .attribute("googclient_schemarevisionid", revision)
        .attribute("googclient_schemaencoding", "BINARY")
        .build()
}

/// Every payload is refused, each with a schema error, within the bound.
fn all_refused<D: Decoder>(decoder: &D, payloads: &[(&str, Vec<u8>)], delivery: &Delivery) {
    for (what, payload) in payloads {
        let (error, peak) = decode_counted(decoder, payload, delivery);
        assert!(
            matches!(error, DecodeError::Schema { .. }),
            "{what}: {error:?}"
        );
        assert!(
            peak <= bound(payload.len()),
            "{what}: {peak} bytes allocated for {} bytes of payload",
            payload.len()
        );
        println!(
            "{what}: {} bytes, peak {peak} bytes allocated: {error}",
            payload.len()
        );
    }
}

const AVRO: &str = "projects/p/schemas/nodes";
const NODE: &str = r#"{"type":"record","name":"Node","fields":[
    {"name":"id","type":"long"},
    {"name":"name","type":"string"},
    {"name":"tags","type":{"type":"map","values":"bytes"}},
    {"name":"children","type":{"type":"array","items":"Node"}},
    {"name":"next","type":["null","Node"]}]}"#;

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Node {
    id: i64,
    name: String,
    tags: std::collections::HashMap<String, serde_bytes_free::Ignored>,
    children: Vec<Node>,
    next: Option<Box<Node>>,
}

mod serde_bytes_free {
    /// Any value, read and dropped.
    #[derive(Debug)]
    pub struct Ignored;
    impl<'de> serde::Deserialize<'de> for Ignored {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            serde::de::IgnoredAny::deserialize(d).map(|_| Ignored)
        }
    }
}

/// A zigzag varint.
fn long(n: i64) -> Vec<u8> {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// A valid node: id 1, name "ab", no tags, no children, no next.
fn node() -> Vec<u8> {
    [long(1), long(2), b"ab".to_vec(), long(0), long(0), long(0)].concat()
}

#[tokio::test]
async fn crafted_avro_is_refused_without_a_panic_or_an_allocation_beyond_its_size() {
    let revisions = FixedRevisions::new([Revision::new(AVRO, "0000000a", SchemaType::Avro, NODE)]);
    let decoder = Schemas::new(revisions)
        .avro::<Node>(AVRO, ReaderRevision::Latest)
        .await
        .unwrap();
    let at = stamped(AVRO, "0000000a");
    let whole = node();
    assert!(
        decoder.decode(Bytes::from(whole.clone()), &at).is_ok(),
        "the valid node decodes"
    );
    let mut payloads: Vec<(&str, Vec<u8>)> = (0..whole.len())
        .map(|end| ("a node cut short", whole[..end].to_vec()))
        .collect();
    payloads.push((
        "a name of 2^40 bytes",
        [long(1), long(1 << 40), b"ab".to_vec()].concat(),
    ));
    payloads.push(("a name of -5 bytes", [long(1), long(-5)].concat()));
    payloads.push((
        "a map of 2^62 tags",
        [long(1), long(0), long(1 << 62)].concat(),
    ));
    payloads.push((
        "an array of 2^62 children in a negative block",
        [long(1), long(0), long(0), long(-(1 << 62)), long(10)].concat(),
    ));
    payloads.push((
        "a tag of 2^50 bytes",
        [
            long(1),
            long(0),
            long(1),
            long(1),
            b"k".to_vec(),
            long(1 << 50),
        ]
        .concat(),
    ));
    // 100,000 nodes deep through `next` (branch 1, then a node's first fields).
    let level = [long(1), long(0), long(0), long(0), long(1)].concat();
    payloads.push(("100,000 levels of next", level.repeat(100_000)));
    payloads.push((
        "a union branch 7",
        [long(1), long(0), long(0), long(0), long(7)].concat(),
    ));
    payloads.push(("bytes after the node", [whole.clone(), vec![0]].concat()));
    payloads.push((
        "a name that is not UTF-8",
        [long(1), long(2), vec![0xff, 0xfe]].concat(),
    ));
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    payloads.push(("4 KiB of noise", noise));
    all_refused(&decoder, &payloads, &at);
}

const PROTO: &str = "projects/p/schemas/trees";
const TREE: &str = r#"syntax = "proto3";
    message Tree { int64 id = 1; string name = 2; repeated int64 sizes = 3; repeated Tree children = 4; }"#;

/// The same message, as `prost` builds it.
#[derive(Clone, PartialEq, prost::Message)]
struct Tree {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(int64, repeated, tag = "3")]
    sizes: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    children: Vec<Tree>,
}

/// A protobuf varint.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

fn crafted_protobuf() -> Vec<(&'static str, Vec<u8>)> {
    let whole = prost::Message::encode_to_vec(&Tree {
        id: 1,
        name: "ab".into(),
        sizes: vec![1, 2],
        children: vec![Tree::default()],
    });
    // A cut between two fields is a shorter message, valid in Protocol Buffers: only cuts inside
    // a field are bad bytes.
    let mut payloads: Vec<(&str, Vec<u8>)> = (1..whole.len())
        .map(|end| ("a tree cut inside a field", whole[..end].to_vec()))
        .filter(|(_, cut)| <Tree as prost::Message>::decode(cut.as_slice()).is_err())
        .collect();
    assert!(
        payloads.len() >= whole.len() / 2,
        "most cuts are inside a field"
    );
    payloads.push((
        "a name of 2^40 bytes",
        [vec![0x12], varint(1 << 40), b"ab".to_vec()].concat(),
    ));
    payloads.push((
        "packed sizes of 2^40 bytes",
        [vec![0x1a], varint(1 << 40), vec![1]].concat(),
    ));
    payloads.push((
        "a child of 2^62 bytes",
        [vec![0x22], varint(1 << 62)].concat(),
    ));
    // 100,000 children deep: each level a child field whose length is all that follows.
    let mut deep = Vec::new();
    for _ in 0..100_000 {
        deep = [vec![0x22], varint(deep.len() as u64), deep].concat();
    }
    payloads.push(("100,000 levels of children", deep));
    payloads.push((
        "a varint of 11 bytes",
        [vec![0x08], vec![0xff; 11]].concat(),
    ));
    payloads.push(("field number 0", vec![0x00, 0x01]));
    payloads.push(("wire type 7", vec![0x0f]));
    payloads
}

#[tokio::test]
async fn crafted_protobuf_is_refused_without_a_panic_or_an_allocation_beyond_its_size() {
    let revisions = FixedRevisions::new([Revision::new(
        PROTO,
        "0000000b",
        SchemaType::ProtocolBuffer,
        TREE,
    )]);
    let schemas = Schemas::new(revisions);
    let at = stamped(PROTO, "0000000b");
    let prost_decoder = schemas.protobuf::<Tree>(PROTO).await.unwrap();
    all_refused(&prost_decoder, &crafted_protobuf(), &at);

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Plain {
        id: i64,
    }
    let dynamic = schemas.protobuf_serde::<Plain>(PROTO).await.unwrap();
    all_refused(&dynamic, &crafted_protobuf(), &at);
}
