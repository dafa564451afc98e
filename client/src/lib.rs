//! # shardalloc-client
//!
//! The crate applications depend on to talk to a shardalloc node. It will
//! hold the region-session protocol's message types, the region client and
//! the typed admin client; it deliberately depends on no wasmtime, redb or
//! axum. Nothing is implemented yet: the node and its protocols come with
//! the node issue.
