//! Writes each fuzz target's seeds into `corpus/<target>/`: payloads that decode (so that the
//! fuzzer starts from every type the schemas have) and a few crafted bad ones (cut short,
//! lengths far beyond the payload, deep nesting). Run in schema/fuzz: `cargo run --bin seeds`.

use apache_avro::Schema;
use apache_avro::types::Value;
use leasehold_schema_fuzz::{AVRO_V1, Tree};
use std::collections::HashMap;
use std::path::Path;

/// A `Node` of revision 1 with `children` and `next`.
fn node(id: i32, children: Vec<Value>, next: Value) -> Value {
    Value::Record(vec![
        ("id".into(), Value::Int(id)),
        ("flag".into(), Value::Boolean(id % 2 == 0)),
        ("ratio".into(), Value::Float(0.5)),
        ("weight".into(), Value::Double(-2.25)),
        ("name".into(), Value::String(format!("node {id}"))),
        ("blob".into(), Value::Bytes(vec![0, 255, 7])),
        ("hash".into(), Value::Fixed(4, vec![1, 2, 3, 4])),
        ("kind".into(), Value::Enum(1, "B".into())),
        (
            "tags".into(),
            Value::Map(HashMap::from([("a".to_string(), Value::Long(-1))])),
        ),
        ("at".into(), Value::TimestampMillis(1_765_000_000_000)),
        ("price".into(), Value::Decimal(vec![0x01, 0x2c].into())),
        ("children".into(), Value::Array(children)),
        ("next".into(), next),
    ])
}

fn avro_binary() -> Vec<Vec<u8>> {
    let schema = Schema::parse_str(AVRO_V1).unwrap();
    let leaf = || node(2, vec![], Value::Union(0, Box::new(Value::Null)));
    let datums = [
        leaf(),
        node(1, vec![leaf(), leaf()], Value::Union(1, Box::new(leaf()))),
        node(3, vec![], Value::Union(2, Box::new(Value::String("end".into())))),
    ];
    let mut seeds: Vec<Vec<u8>> = datums
        .into_iter()
        .map(|d| apache_avro::to_avro_datum(&schema, d).unwrap())
        .collect();
    let whole = seeds[1].clone();
    seeds.push(whole[..whole.len() / 2].to_vec());
    // id 1, then a name of 2^40 bytes.
    seeds.push(vec![2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
    seeds
}

fn avro_json() -> Vec<Vec<u8>> {
    let leaf = r#"{"id":2,"flag":true,"ratio":0.5,"weight":1.0,"name":"n","blob":"\u0000\u00ff",
        "hash":"abcd","kind":"A","tags":{"a":1},"at":1765000000000,"price":"\u0001,",
        "children":[],"next":null}"#;
    let nested = format!(
        r#"{{"id":1,"flag":false,"ratio":1.5,"weight":2.0,"name":"m","blob":"","hash":"wxyz",
        "kind":"C","tags":{{}},"at":0,"price":"","children":[{leaf}],"next":{{"fuzz.Node":{leaf}}}}}"#
    );
    let string_next = leaf.replace(r#""next":null"#, r#""next":{"string":"end"}"#);
    vec![leaf.into(), nested.into_bytes(), string_next.into_bytes(), br#"{"id":"#.to_vec()]
}

fn trees() -> Vec<Tree> {
    let leaf = Tree {
        id: 2,
        name: "leaf".into(),
        sizes: vec![-1, 300],
        tags: HashMap::from([("a".to_string(), 1)]),
        kind: 1,
        blob: vec![0, 255],
        hash: 7,
        ..Tree::default()
    };
    vec![
        leaf.clone(),
        Tree {
            id: 1,
            children: vec![leaf.clone(), leaf],
            ..Tree::default()
        },
    ]
}

fn protobuf_binary() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = trees().iter().map(prost::Message::encode_to_vec).collect();
    let whole = seeds[1].clone();
    seeds.push(whole[..whole.len() - 1].to_vec());
    // name: a length of 2^40.
    seeds.push(vec![0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    // Children nested 200 deep.
    let mut deep = Vec::new();
    for _ in 0..200 {
        let mut level = vec![0x22, deep.len() as u8];
        if deep.len() >= 0x80 {
            level = vec![0x22, (deep.len() as u8) | 0x80, (deep.len() >> 7) as u8];
        }
        deep = [level, deep].concat();
    }
    seeds.push(deep);
    seeds
}

fn protobuf_json() -> Vec<Vec<u8>> {
    vec![
        br#"{"id":"2","name":"leaf","sizes":["-1","300"],"tags":{"a":1},"kind":"B","blob":"AP8=","hash":7}"#.to_vec(),
        br#"{"id":"1","children":[{"id":"2"},{"ratio":0.5}]}"#.to_vec(),
        br#"{"id":"#.to_vec(),
    ]
}

fn write(target: &str, seeds: Vec<Vec<u8>>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    for (n, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{n:02}")), seed).unwrap();
    }
    println!("{target}: {} seeds", seeds.len());
}

fn main() {
    write("avro_binary", avro_binary());
    write("avro_json", avro_json());
    write("protobuf_binary", protobuf_binary());
    write("protobuf_dynamic", protobuf_binary());
    write("protobuf_json", protobuf_json());
}
