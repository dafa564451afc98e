//! # shardalloc: the node
//!
//! The shard placement service's library; the `shardalloc` binary
//! (`src/main.rs`, subcommands under `src/cli/`) is built on it.
//! `docs/architecture.md` is the map of the whole repository.
//!
//! Layout, dependencies pointing one way (cli → server → {store →
//! coordinator, engine} → strategy → clock, guest SDK):
//! - [`clock`]: the node's monotonic and wall clocks behind one trait,
//!   read by the driver and the strategy slots alike (tests step them).
//! - [`strategy`]: the synchronous [`strategy::AllocationStrategy`] trait
//!   the coordinator calls, the host's view types, native adapters, answer
//!   checking with fallback, external allocation (placements), dry runs,
//!   [`strategy::StrategySource`] and the table of built-in strategies.
//! - [`engine`]: wasmtime with sandbox limits, an artifact cache, loading
//!   from a source, hot-swap slots with history, rollback and shadows.
//! - [`coordinator`]: the sans-I/O state machine per entity type: events
//!   in, commands out, time as a value.
//! - [`store`]: durable state behind the [`store::Store`] trait (redb
//!   embedded, in memory, etcd shared by several nodes) and its conformance
//!   suite.
//! - [`server`]: the I/O shell: the coordinator driver, the REST API and its
//!   generated OpenAPI document, region sessions, the event stream, the
//!   dashboard, leadership and forwarding on etcd, metrics, TLS.

pub mod clock;
pub mod coordinator;
pub mod engine;
pub mod server;
pub mod store;
pub mod strategy;

#[cfg(test)]
mod docs_facts;
