//! The host's integration tests that need no process but this one: the
//! built-ins, the contracts (REST bodies, strategy components, WIT), the
//! coordinator's scenarios and simulation, and the engine. One test binary
//! (as wasmtime's `tests/all`): each file below was a binary of its own,
//! and linking 35 of them against wasmtime and axum was most of a fresh
//! test build. `cargo test -p shardalloc --test in_process -- engine::`
//! runs one file's tests.

mod bless;
mod common;
mod coordinator;

mod builtins;
mod contract_rest;
mod contract_strategy;
mod contract_wit;
mod coordinator_external;
mod coordinator_placements;
mod coordinator_sim;
mod engine;
mod engine_contracts;
