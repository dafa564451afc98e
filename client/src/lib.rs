//! # shardalloc-client
//!
//! The crate applications depend on to talk to a shardalloc node, without
//! pulling in wasmtime, redb or axum.
//!
//! ## Layout
//!
//! - [`protocol`]: the region-session messages (postcard frames over a
//!   WebSocket) and their encoding.
//! - [`api`]: the admin REST API's request and response bodies.
//! - [`region`]: the region client. [`region::Region::start`] connects a
//!   region to the node and returns a [`region::RegionHandle`] to send
//!   messages to shards wherever they live; the application implements
//!   [`region::Application`] (start, deliver, stop shards) and supplies a
//!   [`region::Transport`] between regions. Its decisions are made by the
//!   sans-I/O [`region::RegionCore`].
//! - [`admin`]: [`admin::AdminClient`], the typed admin REST client;
//!   [`events`]: reading its decision event stream (`GET /v1/events`).
//! - [`tls`]: the rustls client configuration both clients use for
//!   `https://` and `wss://` nodes (system roots plus an optional CA file).
//!
//! [`protocol`] and [`api`] are the `shardalloc-proto` crate's modules,
//! re-exported here under the same paths: a program that needs only the
//! types (no tokio, reqwest or rustls) can depend on `shardalloc-proto`
//! instead.
//!
//! ## Testing an application with `InMemoryTransport`
//!
//! [`region::InMemoryTransport`] is an in-process network: start several
//! regions with clones of it, against one node, and messages between them
//! travel through bounded in-memory inboxes, in order. Nothing else is
//! needed to test how the application behaves as shards move:
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//! use shardalloc_client::region::{Application, InMemoryTransport, Region, RegionConfig};
//!
//! #[derive(Clone, Default)]
//! struct Log(Arc<Mutex<Vec<String>>>);
//!
//! impl Application for Log {
//!     type Message = String;
//!     type Reply = ();
//!     async fn start_shard(&self, shard: &str) {}
//!     async fn stop_shard(&self, shard: &str) {}
//!     async fn deliver(&self, shard: &str, message: String) {
//!         self.0.lock().unwrap().push(format!("{shard}: {message}"));
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let network = InMemoryTransport::new();
//! let log = Log::default();
//! let mut regions = Vec::new();
//! for address in ["a", "b"] {
//!     let config = RegionConfig::new("http://127.0.0.1:7878", "cart", address);
//!     regions.push(Region::start(config, log.clone(), network.clone())?);
//! }
//! for region in &regions {
//!     region.wait_registered().await?;
//! }
//! regions[0].send("42", "hello".to_owned())?; // delivered wherever shard 42 lives
//! println!("shard 42 lives on {}", regions[0].home_of("42").await?);
//! for region in regions {
//!     region.leave().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! To test routing decisions without a node, drive [`region::RegionCore`]
//! directly: feed it events and compare the actions it returns.

#![warn(missing_docs)]

pub mod admin;
pub mod events;
pub mod region;
pub mod tls;

pub use shardalloc_proto::{api, attributes, capacity, peer, protocol};
