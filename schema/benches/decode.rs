//! What decoding costs per message: the same 1,000 orders as JSON (what `Registration::json`
//! does: `serde_json::from_slice` into the handler's type), Avro binary (its writer revision the
//! reader's, and an older one resolved to it), Avro JSON, and Protocol Buffers binary (into a
//! `prost` type, and into the serde type through a dynamic message), each through its decoder's
//! `decode` as a worker calls it. Five rounds, the sides interleaved in an order that rotates
//! from round to round; the medians, and each side's ratio to JSON. Run with
//! `cargo bench -p leasehold-schema --bench decode` (BENCHMARKS.md, "Schema decoding").

use apache_avro::types::Value;
use bytes::Bytes;
use leasehold::testing::delivery;
use leasehold::{Decoder, Delivery};
use leasehold_schema::{FixedRevisions, ReaderRevision, Revision, SchemaType, Schemas};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counts allocations, for the allocations per message.
struct Counting;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is bumped.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const RECORDS: usize = 1_000;
const PASSES: usize = 40;
const ROUNDS: usize = 5;

const AVRO: &str = "projects/bench/schemas/orders";
const PROTO: &str = "projects/bench/schemas/orders-pb";
/// The writer of the resolved side: no `note`, `qty` an int.
const AVRO_V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"customer","type":"string"},
    {"name":"items","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
        {"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"long"}]}}}]}"#;
/// The reader: `note` added with a default, `qty` a long.
const AVRO_V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"customer","type":"string"},
    {"name":"items","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
        {"name":"sku","type":"string"},{"name":"qty","type":"long"},{"name":"price","type":"long"}]}}},
    {"name":"note","type":["null","string"],"default":null}]}"#;
const PROTO_V1: &str = r#"syntax = "proto3";
message Order {
    message Line { string sku = 1; int64 qty = 2; int64 price = 3; }
    int64 id = 1; string customer = 2; repeated Line items = 3; optional string note = 4;
}"#;

/// The handler's type, the same for every side.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
#[allow(dead_code)]
struct Order {
    id: i64,
    customer: String,
    items: Vec<Line>,
    note: Option<String>,
}

#[derive(Debug, serde::Deserialize, serde::Serialize)]
#[allow(dead_code)]
struct Line {
    sku: String,
    qty: i64,
    price: i64,
}

/// The same order, as `prost` builds it.
#[derive(Clone, PartialEq, prost::Message)]
struct OrderPb {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(string, tag = "2")]
    customer: String,
    #[prost(message, repeated, tag = "3")]
    items: Vec<LinePb>,
    #[prost(string, optional, tag = "4")]
    note: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LinePb {
    #[prost(string, tag = "1")]
    sku: String,
    #[prost(int64, tag = "2")]
    qty: i64,
    #[prost(int64, tag = "3")]
    price: i64,
}

fn order(n: usize) -> Order {
    Order {
        id: 1_000_000 + n as i64,
        customer: format!("customer-{:05}", n % 977),
        items: (0..3)
            .map(|i| Line {
                sku: format!("SKU{:05}", (n * 7 + i) % 50_000),
                qty: 1 + (n + i) as i64 % 9,
                price: 199 + (n * 31 + i) as i64 % 10_000,
            })
            .collect(),
        note: n.is_multiple_of(3).then(|| "leave at the door".to_string()),
    }
}

fn avro_value(o: &Order, with_note: bool) -> Value {
    let items = o
        .items
        .iter()
        .map(|l| {
            let qty = if with_note {
                Value::Long(l.qty)
            } else {
                Value::Int(l.qty as i32)
            };
            Value::Record(vec![
                ("sku".into(), Value::String(l.sku.clone())),
                ("qty".into(), qty),
                ("price".into(), Value::Long(l.price)),
            ])
        })
        .collect();
    let mut fields = vec![
        ("id".into(), Value::Long(o.id)),
        ("customer".into(), Value::String(o.customer.clone())),
        ("items".into(), Value::Array(items)),
    ];
    if with_note {
        let note = match &o.note {
            Some(n) => Value::Union(1, Box::new(Value::String(n.clone()))),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        fields.push(("note".into(), note));
    }
    Value::Record(fields)
}

fn avro_json(o: &Order) -> Vec<u8> {
    let mut json = serde_json::to_value(o).unwrap();
    if let Some(note) = o.note.as_ref() {
        json["note"] = serde_json::json!({ "string": note });
    }
    serde_json::to_vec(&json).unwrap()
}

fn protobuf(o: &Order) -> Vec<u8> {
    prost::Message::encode_to_vec(&OrderPb {
        id: o.id,
        customer: o.customer.clone(),
        items: o
            .items
            .iter()
            .map(|l| LinePb {
                sku: l.sku.clone(),
                qty: l.qty,
                price: l.price,
            })
            .collect(),
        note: o.note.clone(),
    })
}

fn stamped<D: Decoder>(decoder: &D, schema: &str, revision: &str, encoding: &str) -> Delivery {
    let delivery = delivery()
        .attribute("googclient_schemaname", schema)
        .attribute("googclient_schemarevisionid", revision)
        .attribute("googclient_schemaencoding", encoding)
        .build();
    if let Some(fetch) = decoder.prepare(&delivery) {
        futures::executor::block_on(fetch).unwrap();
    }
    delivery
}

/// One side: its name, and a pass over every payload.
struct Side {
    name: &'static str,
    payload_bytes: usize,
    pass: Box<dyn Fn()>,
}

fn decoding<D: Decoder + 'static>(
    name: &'static str,
    decoder: D,
    delivery: Delivery,
    payloads: Vec<Bytes>,
) -> Side {
    Side {
        name,
        payload_bytes: payloads.iter().map(Bytes::len).sum::<usize>() / payloads.len(),
        pass: Box::new(move || {
            for payload in &payloads {
                std::hint::black_box(decoder.decode(payload.clone(), &delivery).unwrap());
            }
        }),
    }
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let orders: Vec<Order> = (0..RECORDS).map(order).collect();
    let v1 = apache_avro::Schema::parse_str(AVRO_V1).unwrap();
    let v2 = apache_avro::Schema::parse_str(AVRO_V2).unwrap();
    let schemas = Schemas::new(FixedRevisions::new([
        Revision::new(AVRO, "00000001", SchemaType::Avro, AVRO_V1),
        Revision::new(AVRO, "00000002", SchemaType::Avro, AVRO_V2),
        Revision::new(PROTO, "00000003", SchemaType::ProtocolBuffer, PROTO_V1),
    ]));
    let avro =
        futures::executor::block_on(schemas.avro::<Order>(AVRO, ReaderRevision::Latest)).unwrap();
    let prost = futures::executor::block_on(schemas.protobuf::<OrderPb>(PROTO)).unwrap();
    let dynamic = futures::executor::block_on(schemas.protobuf_serde::<Order>(PROTO)).unwrap();
    let bytes = |f: &dyn Fn(&Order) -> Vec<u8>| {
        orders.iter().map(|o| Bytes::from(f(o))).collect::<Vec<_>>()
    };
    let json_payloads = bytes(&|o| serde_json::to_vec(o).unwrap());
    let sides = vec![
        Side {
            name: "JSON (Registration::json)",
            payload_bytes: json_payloads.iter().map(Bytes::len).sum::<usize>() / RECORDS,
            pass: Box::new(move || {
                for payload in &json_payloads {
                    std::hint::black_box(serde_json::from_slice::<Order>(payload).unwrap());
                }
            }),
        },
        decoding(
            "Avro binary, the reader's revision",
            avro.clone(),
            stamped(&avro, AVRO, "00000002", "BINARY"),
            bytes(&|o| apache_avro::to_avro_datum(&v2, avro_value(o, true)).unwrap()),
        ),
        decoding(
            "Avro binary, an older revision resolved",
            avro.clone(),
            stamped(&avro, AVRO, "00000001", "BINARY"),
            bytes(&|o| apache_avro::to_avro_datum(&v1, avro_value(o, false)).unwrap()),
        ),
        decoding(
            "Avro JSON, the reader's revision",
            avro.clone(),
            stamped(&avro, AVRO, "00000002", "JSON"),
            bytes(&avro_json),
        ),
        decoding(
            "Protocol Buffers binary, into a prost type",
            prost.clone(),
            stamped(&prost, PROTO, "00000003", "BINARY"),
            bytes(&protobuf),
        ),
        decoding(
            "Protocol Buffers binary, into the serde type",
            dynamic.clone(),
            stamped(&dynamic, PROTO, "00000003", "BINARY"),
            bytes(&protobuf),
        ),
    ];
    let mut nanos = vec![Vec::new(); sides.len()];
    let mut allocations = vec![0u64; sides.len()];
    for side in &sides {
        (side.pass)(); // warm
    }
    for round in 0..ROUNDS {
        for k in 0..sides.len() {
            let at = (k + round) % sides.len();
            let side = &sides[at];
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let began = Instant::now();
            for _ in 0..PASSES {
                (side.pass)();
            }
            let elapsed = began.elapsed();
            allocations[at] += ALLOCATIONS.load(Ordering::Relaxed) - before;
            nanos[at].push(elapsed.as_nanos() as f64 / (PASSES * RECORDS) as f64);
        }
    }
    let messages = (ROUNDS * PASSES * RECORDS) as f64;
    let json = median(&mut nanos[0].clone());
    println!(
        "Schema decoding at {}: {RECORDS} orders, {PASSES} passes a round, {ROUNDS} rounds; median ns per message [min-max]",
        commit()
    );
    println!("| side | payload bytes | ns per message | ÷ JSON | allocations per message |");
    println!("|---|---|---|---|---|");
    for (k, side) in sides.iter().enumerate() {
        let mut all = nanos[k].clone();
        let m = median(&mut all);
        println!(
            "| {} | {} | {:.0} [{:.0}–{:.0}] | {:.2} | {:.1} |",
            side.name,
            side.payload_bytes,
            m,
            all[0],
            all[all.len() - 1],
            m / json,
            allocations[k] as f64 / messages
        );
    }
}
