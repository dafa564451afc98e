//! # shardalloc-proto
//!
//! The types other programs depend on, and nothing else: what crosses the
//! node's boundary and must keep its shape across versions. No I/O: no
//! sockets, no runtime, no TLS, no storage (`cargo xtask shape` fails when
//! an I/O crate appears anywhere in this crate's dependencies).
//!
//! - [`protocol`]: the region wire protocol: its frames (postcard over a
//!   WebSocket, `docs/protocol.md`), their encoding, the protocol version,
//!   the limits on names, addresses and shard ids, and the time type
//!   ([`protocol::Millis`]).
//! - [`attributes`]: shard attributes (`tenant=acme`) and their limits,
//!   as REST, the node's core and its store share them.
//! - [`capacity`]: a region's declared capacity (named quantities) and its
//!   limits, as the wire, the node's core and its store share them.
//! - [`peer`]: the inter-region wire (region to region: messages to a
//!   shard's home, `ask` and its reply), versioned on its own.
//! - [`api`]: the admin REST API's request and response bodies, the shared
//!   ids ([`api::ShardId`]) and closed word sets ([`api::ErrorCode`],
//!   [`api::RegionStatus`], …). With the `openapi` feature each body is also
//!   an OpenAPI schema.
//!
//! The client crate (`shardalloc-client`) re-exports both modules under the
//! same names; the node's sans-I/O core (coordinator, strategy layer,
//! engine, store) uses them from here, never through the client.
//! Their bytes and JSON are frozen by the golden fixtures in `contracts/`
//! (`contracts/README.md`).

#![warn(missing_docs)]

pub mod api;
pub mod attributes;
pub mod capacity;
pub mod peer;
pub mod protocol;
