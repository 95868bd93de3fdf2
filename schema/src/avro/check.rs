//! A binary Avro datum checked against its writer schema before apache-avro reads it, without
//! allocating: apache-avro allocates what a length prefix claims before it reads the bytes
//! (`vec![0; len]`, `Vec::reserve(count)`, up to 512 MiB each), reads a cut-off string,
//! boolean or union as a null, and follows nesting as deep as the data goes. Here every length
//! must fit in the bytes left, every array and map together hold at most one item per byte of
//! the payload, nesting stops at [`MAX_DEPTH`], and the datum must end exactly where the payload
//! does. What passes decodes into values whose size is bounded by the payload's.

use crate::reader::Problem;
use apache_avro::schema::{Name, Namespace, Schema};
use std::collections::HashMap;

/// The deepest nesting of records, arrays, maps and unions a datum may have: far beyond a
/// schema written by hand, and shallow enough for the decoder's recursion on a worker thread.
pub const MAX_DEPTH: usize = 64;

/// The named types of a schema, by full name (what a `Ref` resolves to).
pub(crate) type Names = HashMap<Name, Schema>;

/// Checks that `data` is one datum of `schema`, and nothing more.
pub(crate) fn check(schema: &Schema, names: &Names, data: &[u8]) -> Result<(), Problem> {
    let mut walk = Walk {
        data,
        at: 0,
        items: data.len(),
        depth: 0,
        path: Vec::new(),
        names,
    };
    walk.value(schema, &None)?;
    if walk.at != data.len() {
        return Err(Problem::new(
            "bytes left after the datum: it is longer than the revision's record",
        ));
    }
    Ok(())
}

/// Where the walk is in the datum, for a problem's field.
enum Step<'s> {
    Field(&'s str),
    Item(usize),
    Value,
}

struct Walk<'a, 's> {
    data: &'a [u8],
    at: usize,
    /// Array and map items the rest of the datum may still hold.
    items: usize,
    depth: usize,
    path: Vec<Step<'s>>,
    names: &'s Names,
}

impl<'s> Walk<'_, 's> {
    /// The path walked so far: `items[2].price`, a map's value as `tags[…]`.
    fn field(&self) -> String {
        let mut field = String::new();
        for step in &self.path {
            match step {
                Step::Field(name) => {
                    if !field.is_empty() {
                        field.push('.');
                    }
                    field.push_str(name);
                }
                Step::Item(n) => field.push_str(&format!("[{n}]")),
                Step::Value => field.push_str("[…]"),
            }
        }
        field
    }

    fn fail<T>(&self, problem: &str) -> Result<T, Problem> {
        Err(Problem::at(self.field(), problem))
    }

    fn take(&mut self, n: usize) -> Result<&[u8], Problem> {
        if n > self.data.len() - self.at {
            return self
                .fail("the payload ends before this value (cut short, or a length beyond it)");
        }
        let bytes = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    /// A zigzag varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, Problem> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&byte) = self.data.get(self.at) else {
                return self.fail("the payload ends inside a number");
            };
            self.at += 1;
            if shift == 63 && byte > 1 {
                return self.fail("a number longer than 64 bits");
            }
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        self.fail("a number longer than 64 bits")
    }

    fn int(&mut self) -> Result<i32, Problem> {
        let long = self.long()?;
        i32::try_from(long).or_else(|_| self.fail("an int beyond 32 bits"))
    }

    /// A length that fits in what is left of the payload.
    fn len(&mut self) -> Result<usize, Problem> {
        let len = self.long()?;
        match usize::try_from(len) {
            Ok(len) if len <= self.data.len() - self.at => Ok(len),
            Ok(_) => self.fail("a length beyond the end of the payload"),
            Err(_) => self.fail("a negative length"),
        }
    }

    /// The count of a block of array or map items (0 ends the array or map), within what the
    /// payload can hold.
    fn block(&mut self) -> Result<usize, Problem> {
        let count = self.long()?;
        let count = if count < 0 {
            // A negative count is followed by the block's size in bytes.
            let size = self.long()?;
            if size < 0 {
                return self.fail("a negative block size");
            }
            count.unsigned_abs()
        } else {
            count as u64
        };
        match usize::try_from(count) {
            Ok(count) if count <= self.items => {
                self.items -= count;
                Ok(count)
            }
            _ => self.fail("more array or map items than the payload can hold"),
        }
    }

    fn utf8(&mut self, len: usize) -> Result<(), Problem> {
        let bytes = self.take(len)?;
        if std::str::from_utf8(bytes).is_err() {
            return self.fail("a string that is not UTF-8");
        }
        Ok(())
    }

    fn value(&mut self, schema: &'s Schema, namespace: &Namespace) -> Result<(), Problem> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail("nested deeper than 64 levels");
        }
        self.walk(schema, namespace)?;
        self.depth -= 1;
        Ok(())
    }

    fn walk(&mut self, schema: &'s Schema, namespace: &Namespace) -> Result<(), Problem> {
        match schema {
            Schema::Null => {}
            Schema::Boolean => {
                if !matches!(self.take(1)?, [0 | 1]) {
                    return self.fail("a boolean that is neither 0 nor 1");
                }
            }
            Schema::Int | Schema::Date | Schema::TimeMillis => {
                self.int()?;
            }
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => {
                self.long()?;
            }
            Schema::Float => {
                self.take(4)?;
            }
            Schema::Double => {
                self.take(8)?;
            }
            Schema::Bytes | Schema::BigDecimal => {
                let len = self.len()?;
                self.take(len)?;
            }
            Schema::Uuid => {
                // Sixteen bytes, or the UUID's text.
                let len = self.len()?;
                if len == 16 {
                    self.take(len)?;
                } else {
                    self.utf8(len)?;
                }
            }
            Schema::String => {
                let len = self.len()?;
                self.utf8(len)?;
            }
            Schema::Fixed(fixed) => {
                self.take(fixed.size)?;
            }
            Schema::Duration => {
                self.take(12)?;
            }
            Schema::Decimal(decimal) => self.value(&decimal.inner, namespace)?,
            Schema::Enum(e) => {
                let index = self.int()?;
                if usize::try_from(index).map_or(true, |i| i >= e.symbols.len()) {
                    return self.fail("an enum symbol the revision does not have");
                }
            }
            Schema::Union(union) => {
                let index = self.long()?;
                let Some(branch) = usize::try_from(index)
                    .ok()
                    .and_then(|i| union.variants().get(i))
                else {
                    return self.fail("a union branch the revision does not have");
                };
                self.value(branch, namespace)?;
            }
            Schema::Array(array) => {
                let mut n = 0;
                loop {
                    let count = self.block()?;
                    if count == 0 {
                        break;
                    }
                    for _ in 0..count {
                        self.path.push(Step::Item(n));
                        self.value(&array.items, namespace)?;
                        self.path.pop();
                        n += 1;
                    }
                }
            }
            Schema::Map(map) => loop {
                let count = self.block()?;
                if count == 0 {
                    break;
                }
                self.path.push(Step::Value);
                for _ in 0..count {
                    let len = self.len()?;
                    self.utf8(len)?;
                    self.value(&map.types, namespace)?;
                }
                self.path.pop();
            },
            Schema::Record(record) => {
                let name = record.name.fully_qualified_name(namespace);
                for field in &record.fields {
                    self.path.push(Step::Field(&field.name));
                    self.value(&field.schema, &name.namespace)?;
                    self.path.pop();
                }
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(namespace);
                let Some(named) = self.names.get(&name) else {
                    return self.fail("a named type the revision does not define");
                };
                self.value(named, &name.namespace)?;
            }
        }
        Ok(())
    }
}

/// The named types of `schema`, by full name.
pub(crate) fn names(schema: &Schema) -> Result<Names, Problem> {
    let resolved = apache_avro::schema::ResolvedSchema::try_from(schema)
        .map_err(|_| Problem::new("the revision names a type it does not define"))?;
    Ok(resolved
        .get_names()
        .iter()
        .map(|(name, schema)| (name.clone(), (*schema).clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(text: &str) -> (Schema, Names) {
        let schema = Schema::parse_str(text).unwrap();
        let names = names(&schema).unwrap();
        (schema, names)
    }

    const ORDER: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"note","type":["null","string"]}]}"#;

    fn order_bytes() -> Vec<u8> {
        // id 21 (zigzag 42), tags ["ab"], note: branch 1, "x".
        vec![42, 2, 4, b'a', b'b', 0, 2, 2, b'x']
    }

    #[test]
    fn a_whole_datum_passes() {
        let (s, n) = schema(ORDER);
        assert_eq!(check(&s, &n, &order_bytes()), Ok(()));
    }

    #[test]
    fn a_cut_datum_names_where_it_was_cut() {
        let (s, n) = schema(ORDER);
        let bytes = order_bytes();
        let problem = check(&s, &n, &bytes[..4]).unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("tags[0]"));
        for end in 0..bytes.len() {
            assert!(check(&s, &n, &bytes[..end]).is_err(), "cut at {end}");
        }
        let mut longer = bytes;
        longer.push(0);
        assert!(check(&s, &n, &longer).is_err(), "bytes after the datum");
    }

    #[test]
    fn lengths_and_counts_beyond_the_payload_are_refused_before_anything_is_read() {
        let (s, n) = schema(ORDER);
        // tags: a block of 2^62 strings.
        let huge = [42, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        let problem = check(&s, &n, &huge).unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("tags"));
        // A string of length 2^40.
        let long = [42, 2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(check(&s, &n, &long).is_err());
        // An array of nulls takes no bytes per item, still at most one per byte of payload.
        let (nulls, names) = schema(r#"{"type":"array","items":"null"}"#);
        assert!(
            check(&nulls, &names, &[0x10, 0]).is_err(),
            "8 items in 2 bytes"
        );
        assert!(check(&nulls, &names, &[2, 0]).is_ok());
    }

    #[test]
    fn nesting_stops_at_the_limit() {
        let (s, n) = schema(
            r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#,
        );
        // Each level: union branch 1 (byte 2); the last: branch 0 (null).
        let mut deep = vec![2u8; 1000];
        deep.push(0);
        assert!(check(&s, &n, &deep).unwrap_err().problem.contains("deeper"));
        let mut shallow = vec![2u8; 10];
        shallow.push(0);
        assert_eq!(check(&s, &n, &shallow), Ok(()));
    }

    #[test]
    fn an_overlong_number_is_refused() {
        let (s, n) = schema(r#""long""#);
        assert!(check(&s, &n, &[0xff; 11]).is_err());
        assert!(
            check(
                &s,
                &n,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]
            )
            .is_err()
        );
        assert_eq!(
            check(
                &s,
                &n,
                &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
            ),
            Ok(())
        );
    }
}
