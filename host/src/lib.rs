//! # shardalloc: the node
//!
//! The shard placement service's library; the `shardalloc` binary
//! (`src/main.rs`, subcommands under `src/cli/`) is built on it.
//!
//! Layout (dependencies point one way: cli → server → {coordinator, engine,
//! store} → strategy):
//! - [`strategy`]: the synchronous [`strategy::AllocationStrategy`] trait
//!   the coordinator calls, the host's view types, native and component
//!   adapters, answer checking with fallback, external allocation
//!   (placements) and the built-in strategies.
//!
//! - [`engine`]: wasmtime with sandbox limits, an artifact cache, hot-swap
//!   slots with history and rollback, dry runs and shadows.
//!
//! The coordinator, the store and the server follow in later work; see
//! `DESIGN.md`.

pub mod coordinator;
pub mod engine;
pub mod server;
pub mod store;
pub mod strategy;
