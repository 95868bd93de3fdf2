//! Avro's JSON encoding read into apache-avro's values, by the writer schema (apache-avro reads
//! only the binary encoding): a union is `null` or `{"branch type": value}`, bytes and fixed are
//! strings whose code points are the bytes, an enum is its symbol, a record an object with every
//! field. A problem names the field, and the JSON type found, never the value.

use crate::avro::check::{MAX_DEPTH, Names};
use crate::reader::Problem;
use apache_avro::schema::{Namespace, Schema};
use apache_avro::types::Value;
use serde_json::Value as Json;

/// `json` as a datum of `schema`.
pub(crate) fn from_json(schema: &Schema, names: &Names, json: &Json) -> Result<Value, Problem> {
    Convert {
        names,
        path: Vec::new(),
    }
    .value(schema, &None, json)
}

/// The JSON type of a value, for a problem.
fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The name a union's branch of `schema` is written under.
fn branch_name(schema: &Schema, namespace: &Namespace) -> String {
    match schema {
        Schema::Record(r) => r.name.fully_qualified_name(namespace).fullname(None),
        Schema::Enum(e) => e.name.fully_qualified_name(namespace).fullname(None),
        Schema::Fixed(f) => f.name.fully_qualified_name(namespace).fullname(None),
        Schema::Ref { name } => name.fully_qualified_name(namespace).fullname(None),
        Schema::Decimal(d) => branch_name(&d.inner, namespace),
        Schema::Date | Schema::TimeMillis => "int".into(),
        Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "long".into(),
        Schema::Uuid => "string".into(),
        Schema::BigDecimal => "bytes".into(),
        Schema::Duration => "fixed".into(),
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int => "int".into(),
        Schema::Long => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes => "bytes".into(),
        Schema::String => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Union(_) => "union".into(),
    }
}

struct Convert<'s> {
    names: &'s Names,
    path: Vec<String>,
}

impl Convert<'_> {
    fn fail<T>(&self, problem: String) -> Result<T, Problem> {
        Err(Problem::at(self.path.join(""), problem))
    }

    fn expected<T>(&self, what: &str, json: &Json) -> Result<T, Problem> {
        self.fail(format!("expected {what}, found {}", kind(json)))
    }

    fn integer(&self, json: &Json) -> Result<i64, Problem> {
        match json.as_i64() {
            Some(n) => Ok(n),
            None => self.expected("an integer", json),
        }
    }

    fn int(&self, json: &Json) -> Result<i32, Problem> {
        let n = self.integer(json)?;
        i32::try_from(n).or_else(|_| self.fail("an int beyond 32 bits".into()))
    }

    fn number(&self, json: &Json) -> Result<f64, Problem> {
        match json.as_f64() {
            Some(n) => Ok(n),
            None => self.expected("a number", json),
        }
    }

    /// A string whose code points 0 to 255 are bytes.
    fn bytes(&self, json: &Json) -> Result<Vec<u8>, Problem> {
        let Json::String(text) = json else {
            return self.expected("a string of bytes", json);
        };
        text.chars()
            .map(|c| u8::try_from(u32::from(c)).ok())
            .collect::<Option<Vec<u8>>>()
            .map_or_else(
                || self.fail("a character beyond U+00FF in bytes".into()),
                Ok,
            )
    }

    fn value(
        &mut self,
        schema: &Schema,
        namespace: &Namespace,
        json: &Json,
    ) -> Result<Value, Problem> {
        if self.path.len() > MAX_DEPTH {
            return self.fail("nested deeper than 64 levels".into());
        }
        Ok(match schema {
            Schema::Null if json.is_null() => Value::Null,
            Schema::Null => return self.expected("null", json),
            Schema::Boolean => match json {
                Json::Bool(b) => Value::Boolean(*b),
                _ => return self.expected("a boolean", json),
            },
            Schema::Int => Value::Int(self.int(json)?),
            Schema::Date => Value::Date(self.int(json)?),
            Schema::TimeMillis => Value::TimeMillis(self.int(json)?),
            Schema::Long => Value::Long(self.integer(json)?),
            Schema::TimeMicros => Value::TimeMicros(self.integer(json)?),
            Schema::TimestampMillis => Value::TimestampMillis(self.integer(json)?),
            Schema::TimestampMicros => Value::TimestampMicros(self.integer(json)?),
            Schema::TimestampNanos => Value::TimestampNanos(self.integer(json)?),
            Schema::LocalTimestampMillis => Value::LocalTimestampMillis(self.integer(json)?),
            Schema::LocalTimestampMicros => Value::LocalTimestampMicros(self.integer(json)?),
            Schema::LocalTimestampNanos => Value::LocalTimestampNanos(self.integer(json)?),
            Schema::Float => Value::Float(self.number(json)? as f32),
            Schema::Double => Value::Double(self.number(json)?),
            Schema::Bytes => Value::Bytes(self.bytes(json)?),
            Schema::String => match json {
                Json::String(s) => Value::String(s.clone()),
                _ => return self.expected("a string", json),
            },
            Schema::Uuid => match json.as_str().map(apache_avro::Uuid::parse_str) {
                Some(Ok(uuid)) => Value::Uuid(uuid),
                Some(Err(_)) => return self.fail("a string that is not a UUID".into()),
                None => return self.expected("a UUID", json),
            },
            Schema::Fixed(fixed) => {
                let bytes = self.bytes(json)?;
                if bytes.len() != fixed.size {
                    return self.fail(format!("expected {} bytes of a fixed", fixed.size));
                }
                Value::Fixed(fixed.size, bytes)
            }
            Schema::Duration => {
                let bytes: [u8; 12] = self
                    .bytes(json)?
                    .try_into()
                    .or_else(|_| self.fail("expected the 12 bytes of a duration".into()))?;
                Value::Duration(bytes.into())
            }
            Schema::Decimal(decimal) => match self.value(&decimal.inner, namespace, json)? {
                Value::Bytes(bytes) | Value::Fixed(_, bytes) => Value::Decimal(bytes.into()),
                _ => return self.fail("a decimal that is neither bytes nor fixed".into()),
            },
            Schema::BigDecimal => return self.fail("big-decimal is not read from JSON".into()),
            Schema::Enum(e) => match json
                .as_str()
                .and_then(|s| e.symbols.iter().position(|x| x == s))
            {
                Some(index) => Value::Enum(index as u32, e.symbols[index].clone()),
                None if json.is_string() => {
                    return self.fail("a symbol the enum does not have".into());
                }
                None => return self.expected("an enum's symbol", json),
            },
            Schema::Array(array) => {
                let Json::Array(items) = json else {
                    return self.expected("an array", json);
                };
                let mut values = Vec::with_capacity(items.len());
                for (n, item) in items.iter().enumerate() {
                    self.path.push(format!("[{n}]"));
                    values.push(self.value(&array.items, namespace, item)?);
                    self.path.pop();
                }
                Value::Array(values)
            }
            Schema::Map(map) => {
                let Json::Object(entries) = json else {
                    return self.expected("an object", json);
                };
                self.path.push("[…]".into());
                let mut values = std::collections::HashMap::with_capacity(entries.len());
                for (key, item) in entries {
                    values.insert(key.clone(), self.value(&map.types, namespace, item)?);
                }
                self.path.pop();
                Value::Map(values)
            }
            Schema::Record(record) => {
                let Json::Object(entries) = json else {
                    return self.expected("an object", json);
                };
                let name = record.name.fully_qualified_name(namespace);
                let mut fields = Vec::with_capacity(record.fields.len());
                for field in &record.fields {
                    let step = if self.path.is_empty() {
                        field.name.clone()
                    } else {
                        format!(".{}", field.name)
                    };
                    self.path.push(step);
                    let Some(item) = entries.get(&field.name) else {
                        return self.fail("the field is missing".into());
                    };
                    fields.push((
                        field.name.clone(),
                        self.value(&field.schema, &name.namespace, item)?,
                    ));
                    self.path.pop();
                }
                Value::Record(fields)
            }
            Schema::Union(union) => {
                let branches = union.variants();
                let (index, branch, inner) = match json {
                    Json::Null => match branches.iter().position(|b| matches!(b, Schema::Null)) {
                        Some(index) => (index, &branches[index], json),
                        None => return self.fail("null, and the union has no null branch".into()),
                    },
                    Json::Object(one) if one.len() == 1 => {
                        let (name, inner) = one.iter().next().expect("one entry");
                        let found = branches.iter().position(|b| {
                            let full = branch_name(b, namespace);
                            &full == name || full.rsplit('.').next() == Some(name)
                        });
                        match found {
                            Some(index) => (index, &branches[index], inner),
                            None => return self.fail("a branch the union does not have".into()),
                        }
                    }
                    _ => {
                        return self
                            .expected("null or a one-key object naming the union's branch", json);
                    }
                };
                Value::Union(
                    index as u32,
                    Box::new(self.value(branch, namespace, inner)?),
                )
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(namespace);
                let Some(named) = self.names.get(&name) else {
                    return self.fail("a named type the revision does not define".into());
                };
                self.value(named, &name.namespace, json)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro::check::names;

    fn convert(schema: &str, json: &str) -> Result<Value, Problem> {
        let schema = Schema::parse_str(schema).unwrap();
        let names = names(&schema).unwrap();
        from_json(&schema, &names, &serde_json::from_str(json).unwrap())
    }

    const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},
        {"name":"note","type":["null","string"]},
        {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
        {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line",
            "fields":[{"name":"price","type":"int"}]}}},
        {"name":"blob","type":"bytes"}]}"#;

    #[test]
    fn avros_json_encoding_reads_into_the_writers_values() {
        let value = convert(
            ORDER,
            r#"{"id":7,"note":{"string":"x"},"kind":"B","lines":[{"price":3}],"blob":"\u00ff\u0000"}"#,
        )
        .unwrap();
        let Value::Record(fields) = value else {
            panic!()
        };
        assert_eq!(fields[0], ("id".into(), Value::Long(7)));
        assert_eq!(
            fields[1],
            (
                "note".into(),
                Value::Union(1, Box::new(Value::String("x".into())))
            )
        );
        assert_eq!(fields[2], ("kind".into(), Value::Enum(1, "B".into())));
        assert_eq!(fields[4], ("blob".into(), Value::Bytes(vec![255, 0])));
        let null_note = convert(
            ORDER,
            r#"{"id":7,"note":null,"kind":"A","lines":[],"blob":""}"#,
        );
        assert!(null_note.is_ok());
    }

    #[test]
    fn a_problem_names_the_field_and_never_the_value() {
        let problem = convert(
            ORDER,
            r#"{"id":7,"note":null,"kind":"A","lines":[{"price":"4111-1111"}],"blob":""}"#,
        )
        .unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("lines[0].price"));
        assert_eq!(problem.problem, "expected an integer, found a string");
        let bare_union = convert(
            ORDER,
            r#"{"id":7,"note":"secret","kind":"A","lines":[],"blob":""}"#,
        )
        .unwrap_err();
        assert_eq!(bare_union.field.as_deref(), Some("note"));
        assert!(!format!("{bare_union:?}").contains("secret"));
        let missing = convert(ORDER, r#"{"id":7}"#).unwrap_err();
        assert_eq!(
            (missing.field.as_deref(), missing.problem.as_str()),
            (Some("note"), "the field is missing")
        );
    }
}
