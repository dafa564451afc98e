//! # shardalloc-client
//!
//! The crate applications depend on to talk to a shardalloc node, without
//! pulling in wasmtime, redb or axum.
//!
//! - [`protocol`]: the region-session messages (postcard frames over a
//!   WebSocket) and their encoding.
//! - [`api`]: the admin REST API's request and response bodies.

pub mod api;
pub mod protocol;
