//! The report: what the benchmark prints. The end-to-end table ([`end_to_end`]), binary against
//! binary ([`against`]), the in-memory figures ([`in_memory`]), the traces-on table
//! ([`observability`]), and the medians, cells and ratios they are made of ([`stats`]). Each
//! table runs its own rounds (through the harness) in the order its figures need, then prints.
//! The targets these figures are held to are in BENCHMARKS.md, not printed here.
//!
//! Uses [`sides`](crate::sides) and [`harness`](crate::harness).

pub(crate) mod against;
pub(crate) mod end_to_end;
pub(crate) mod in_memory;
pub(crate) mod observability;
pub(crate) mod stats;
