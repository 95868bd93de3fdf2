//! Protocol Buffers: a revision's `.proto` definition compiled at run time into the descriptor
//! of its one top-level message (`compile.rs`, with protox), and payloads of both encodings into
//! the user's `prost` type or, through a dynamic message, a serde type (`format.rs`).

pub(crate) mod compile;
pub(crate) mod format;
