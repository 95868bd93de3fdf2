//! [`AvroFormat`]: Avro messages of any revision into one serde type, by the reader revision
//! the decoder was built with. A writer revision is parsed once; whether the reader can read it
//! is known then (apache-avro's schema compatibility), and names the field when it cannot. Each
//! message is still resolved by Avro's rules (added fields take their defaults, removed fields
//! are skipped, ints promote to longs, floats and doubles, strings to bytes and back), so a
//! message that resolves is delivered even when the revision as a whole is not compatible.

use crate::attributes::Encoding;
use crate::avro::check::{Names, check, names};
use crate::avro::json::from_json;
use crate::reader::{Format, Problem, field_of, json_problem};
use crate::source::{Revision, SchemaType};
use apache_avro::Schema;
use apache_avro::error::CompatibilityError;
use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::types::Value;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// Avro into `T`, read as the reader revision `reader`.
pub(crate) struct AvroFormat<T> {
    reader: Schema,
    reader_revision: String,
    _output: PhantomData<fn() -> T>,
}

impl<T> AvroFormat<T> {
    /// A format reading as `reader`, whose definition must parse.
    pub(crate) fn new(reader: &Revision) -> Result<Self, Problem> {
        Ok(Self {
            reader: parse(reader)?,
            reader_revision: reader.revision_id.clone(),
            _output: PhantomData,
        })
    }

    pub(crate) fn reader_revision(&self) -> &str {
        &self.reader_revision
    }
}

/// A writer revision, prepared.
pub(crate) struct Writer {
    schema: Schema,
    names: Names,
    /// The reader's own revision: nothing to resolve.
    same_as_reader: bool,
    /// Why the reader cannot read every message of it, if it cannot.
    incompatible: Option<Problem>,
}

fn parse(revision: &Revision) -> Result<Schema, Problem> {
    Schema::parse_str(&revision.definition)
        .map_err(|e| Problem::new(format!("the definition is not an Avro schema: {e}")))
}

/// Why the reader cannot read a writer, naming the field.
fn incompatible(error: &CompatibilityError, reader_revision: &str) -> Problem {
    let (field, why) = match error {
        CompatibilityError::FieldTypeMismatch(field, inner) => (field.clone(), inner.to_string()),
        CompatibilityError::MissingDefaultValue(field) => (
            field.clone(),
            "the reader's field has no default, and this revision does not write it".into(),
        ),
        other => (String::new(), other.to_string()),
    };
    Problem::at(
        field,
        format!("cannot be read as revision {reader_revision}: {why}"),
    )
}

impl<T: DeserializeOwned + 'static> Format for AvroFormat<T> {
    type Output = T;
    type Compiled = Writer;
    const SCHEMA_TYPE: SchemaType = SchemaType::Avro;

    fn compile(&self, revision: &Revision) -> Result<Writer, Problem> {
        let schema = parse(revision)?;
        let same_as_reader = revision.revision_id == self.reader_revision;
        let incompatible = (!same_as_reader)
            .then(|| SchemaCompatibility::can_read(&schema, &self.reader).err())
            .flatten()
            .map(|e| incompatible(&e, &self.reader_revision));
        Ok(Writer {
            names: names(&schema)?,
            schema,
            same_as_reader,
            incompatible,
        })
    }

    fn decode(
        &self,
        writer: Option<&Writer>,
        encoding: Encoding,
        data: &[u8],
    ) -> Result<T, Problem> {
        let writer = writer.expect("an Avro message needs its revision");
        let value = match encoding {
            Encoding::Binary => {
                check(&writer.schema, &writer.names, data)?;
                apache_avro::from_avro_datum(&writer.schema, &mut &data[..], None)
                    .map_err(|_| Problem::new("the bytes do not decode with the revision"))?
            }
            Encoding::Json => {
                let json: serde_json::Value =
                    serde_json::from_slice(data).map_err(|e| json_problem(&e))?;
                from_json(&writer.schema, &writer.names, &json)?
            }
        };
        let value = if writer.same_as_reader {
            value
        } else {
            value.resolve(&self.reader).map_err(|_| {
                writer.incompatible.clone().unwrap_or_else(|| {
                    Problem::new(format!(
                        "a value does not resolve to the reader's revision {}",
                        self.reader_revision
                    ))
                })
            })?
        };
        deserialize(&value)
    }
}

/// The handler's type from a resolved value; when it does not fit, the field where it does not
/// (found on a JSON copy of the value, only then).
fn deserialize<T: DeserializeOwned>(value: &Value) -> Result<T, Problem> {
    apache_avro::from_value::<T>(value).map_err(|_| {
        let field = serde_path_to_error::deserialize::<_, T>(to_json(value))
            .err()
            .map(|e| field_of(e.path()))
            .unwrap_or_default();
        Problem::at(field, "the value does not fit the handler's type")
    })
}

/// A value as JSON, only to find where it does not fit the handler's type.
fn to_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        Value::Null | Value::Decimal(_) | Value::BigDecimal(_) | Value::Duration(_) => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Int(n) | Value::Date(n) | Value::TimeMillis(n) => Json::from(*n),
        Value::Long(n)
        | Value::TimeMicros(n)
        | Value::TimestampMillis(n)
        | Value::TimestampMicros(n)
        | Value::TimestampNanos(n)
        | Value::LocalTimestampMillis(n)
        | Value::LocalTimestampMicros(n)
        | Value::LocalTimestampNanos(n) => Json::from(*n),
        Value::Float(x) => Json::from(f64::from(*x)),
        Value::Double(x) => Json::from(*x),
        Value::Bytes(b) | Value::Fixed(_, b) => Json::from(b.clone()),
        Value::String(s) | Value::Enum(_, s) => Json::from(s.clone()),
        Value::Uuid(u) => Json::from(u.to_string()),
        Value::Union(_, inner) => to_json(inner),
        Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect(),
        Value::Record(fields) => fields
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"int"},{"name":"note","type":"string"}]}"#;
    const V2: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"qty","type":"int","default":1}]}"#;
    const V3: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"string"}]}"#;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Order {
        id: i64,
        qty: i32,
    }

    fn revision(id: &str, definition: &str) -> Revision {
        Revision::new(
            "projects/p/schemas/orders",
            id,
            SchemaType::Avro,
            definition,
        )
    }

    #[test]
    fn an_older_revision_resolves_to_the_reader_by_avros_rules() {
        let format = AvroFormat::<Order>::new(&revision("00000002", V2)).unwrap();
        let v1 = format.compile(&revision("00000001", V1)).unwrap();
        assert!(v1.incompatible.is_none(), "int promotes, qty has a default");
        // id 5 (zigzag 10), note "hi".
        let order = format.decode(Some(&v1), Encoding::Binary, &[10, 4, b'h', b'i']);
        assert_eq!(order, Ok(Order { id: 5, qty: 1 }));
        let json = format.decode(Some(&v1), Encoding::Json, br#"{"id":5,"note":"hi"}"#);
        assert_eq!(json, Ok(Order { id: 5, qty: 1 }));
    }

    #[test]
    fn an_incompatible_revision_names_the_field() {
        let format = AvroFormat::<Order>::new(&revision("00000002", V2)).unwrap();
        let v3 = format.compile(&revision("00000003", V3)).unwrap();
        let problem = format
            .decode(Some(&v3), Encoding::Json, br#"{"id":"4111"}"#)
            .unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("id"));
        assert!(
            problem
                .problem
                .starts_with("cannot be read as revision 00000002"),
            "{problem:?}"
        );
        assert!(!format!("{problem:?}").contains("4111"));
    }

    #[test]
    fn a_type_that_does_not_fit_names_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Wrong {
            id: i64,
            qty: String,
        }
        let format = AvroFormat::<Wrong>::new(&revision("00000002", V2)).unwrap();
        let v2 = format.compile(&revision("00000002", V2)).unwrap();
        let problem = format
            .decode(Some(&v2), Encoding::Binary, &[10, 6])
            .unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("qty"));
        assert_eq!(problem.problem, "the value does not fit the handler's type");
    }
}
