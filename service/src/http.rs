//! The HTTP surface: one actix-web server for the endpoints (`/metrics`, `/livez`, `/readyz`,
//! the status page) and the push subscriptions' routes.
//!
//! - `endpoints.rs`: each endpoint, and what they read;
//! - `server.rs`: the server, bound to an address or a socket, and the history's sampler.
//!
//! Uses [`crate::observe`] for what it serves and [`crate::error`]; the running service and a
//! replay's `--http` start it.

pub(crate) mod endpoints;
mod server;

pub(crate) use server::{Listen, serve_http};
