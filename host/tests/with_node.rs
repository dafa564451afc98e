//! The host's integration tests that start our node (`shardalloc serve`,
//! the binary this crate builds) on 127.0.0.1: the CLI, the dashboard in a
//! headless browser, and the node's REST API, sessions, strategies, stops,
//! restarts and TLS. One test binary (see `in_process.rs`);
//! `cargo test -p shardalloc --test with_node -- node_rest::` runs one
//! file's tests.

mod browser;
mod common;
mod node;

mod cli;
mod cli_drain;
mod dashboard;
mod dashboard_freeze;
mod dashboard_load;
mod dashboard_plan;
mod node_epochs;
mod node_freeze;
mod node_load;
mod node_plan;
mod node_regions;
mod node_rest;
mod node_restart;
mod node_sessions;
mod node_stops;
mod node_strategies;
mod node_tls;
mod node_types;
mod node_uploads;
