//! A revision's `.proto` definition compiled at run time (protox) into the descriptor of the
//! message it defines (prost-reflect): Pub/Sub's Protocol Buffers schemas define one top-level
//! message; the well-known types (`google/protobuf/*.proto`) may be imported.

use crate::reader::Problem;
use prost_reflect::MessageDescriptor;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The name the definition is compiled under.
const FILE: &str = "pubsub_schema.proto";

/// The definition, as the one file a compile opens.
struct Definition(String);

impl FileResolver for Definition {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == FILE {
            File::from_source(FILE, &self.0)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// The descriptor of the one top-level message `definition` defines.
pub(crate) fn message_of(definition: &str) -> Result<MessageDescriptor, Problem> {
    let mut files = ChainFileResolver::new();
    files.add(Definition(definition.to_string()));
    files.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(files);
    compiler.include_imports(true);
    compiler.open_file(FILE).map_err(|e| {
        let first = e.to_string().lines().next().unwrap_or_default().to_string();
        Problem::new(format!("the definition does not compile: {first}"))
    })?;
    let pool = compiler.descriptor_pool();
    let file = pool
        .get_file_by_name(FILE)
        .ok_or_else(|| Problem::new("the definition compiled to nothing"))?;
    let mut messages = file.messages();
    match (messages.next(), messages.next()) {
        (Some(message), None) => Ok(message),
        (None, _) => Err(Problem::new("the definition defines no message")),
        (Some(_), Some(_)) => Err(Problem::new(
            "the definition defines more than one top-level message (Pub/Sub's define one)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_top_level_message_is_found_with_its_nested_ones() {
        let order = message_of(
            r#"syntax = "proto3";
            import "google/protobuf/timestamp.proto";
            message Order {
                message Line { int32 price = 1; }
                int64 id = 1;
                repeated Line lines = 2;
                google.protobuf.Timestamp at = 3;
            }"#,
        )
        .unwrap();
        assert_eq!(order.full_name(), "Order");
        assert_eq!(order.fields().count(), 3);
        let two = message_of("syntax = \"proto3\"; message A {} message B {}").unwrap_err();
        assert!(two.problem.contains("more than one"), "{two:?}");
        assert!(message_of("message {").is_err());
    }
}
