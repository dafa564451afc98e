//! What the benchmarks share: smoke mode ([`smoke`], [`sized`]), a node's
//! settings over a redb store in a directory, with the type `bench`
//! declared, and a raw region session (not every bench uses every helper).
//!
//! Smoke mode (`SHARDALLOC_BENCH_SMOKE=1`) checks that a benchmark still
//! runs to its end, not what it measures: every benchmark takes its tiny
//! sizes (a few regions, shards, sessions and requests, waits of at most
//! about a second, no million-shard store) and keeps every assertion it
//! makes. Run under `cargo test --benches`, criterion runs each of its
//! benchmarks once instead of measuring it (its test mode); the figures a
//! benchmark prints itself come from the tiny sizes and mean nothing.
//! `cargo xtask test` runs every benchmark this way, in a debug build: one
//! that panics or no longer speaks the protocol fails CI.

#![allow(dead_code, reason = "shared by benchmarks that each use a part")]

pub mod first_call;
pub mod live;

use std::path::Path;

use futures_util::{SinkExt, StreamExt};
use shardalloc::server::driver::{DriverSettings, TypeDeclaration};
use shardalloc::server::{NodeSettings, Security};
use shardalloc::store::StoreConfig;
use shardalloc::strategy::StrategySource;
use shardalloc_proto::protocol::{Hello, NodeMessage, PROTOCOL_VERSION, RegionMessage, Register, decode, encode};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The environment variable that turns smoke mode on.
pub const SMOKE: &str = "SHARDALLOC_BENCH_SMOKE";

/// True in smoke mode: [`SMOKE`] is set to anything but empty or `0`
/// (`SHARDALLOC_BENCH_SMOKE=1`). A benchmark then runs once at its tiny
/// sizes to show that it completes; its figures mean nothing.
pub fn smoke() -> bool {
    std::env::var(SMOKE).is_ok_and(|value| !value.is_empty() && value != "0")
}

/// `full`, the size a benchmark measures at, or `tiny` in smoke mode
/// ([`smoke`]): `sized(1_000_000, 2_000)`.
pub fn sized<T>(full: T, tiny: T) -> T {
    if smoke() { tiny } else { full }
}

/// The entity type every benchmark uses.
pub const TYPE: &str = "bench";

/// A region session's WebSocket.
pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The least-shard built-in.
pub fn least_shard() -> StrategySource {
    StrategySource::builtin("least-shard").expect("a built-in")
}

/// A node over a redb store in `data`, declaring [`TYPE`], with `driver`'s
/// other settings.
pub fn settings(data: &Path, mut driver: DriverSettings) -> NodeSettings {
    driver.types.insert(TYPE.into(), TypeDeclaration { strategy: least_shard(), config: String::new() });
    NodeSettings {
        store: StoreConfig::Embedded { dir: data.to_owned(), migrate: true },
        cache_dir: Some(data.join("cache")),
        driver,
        security: Security::default(),
        max_instances: 64,
        connections: Default::default(),
        cluster: Default::default(),
        uploads: Default::default(),
    }
}

/// The next message from the node.
pub async fn next(socket: &mut Socket) -> NodeMessage {
    loop {
        match socket.next().await.expect("open").expect("frame") {
            Message::Binary(frame) => return decode(&frame).expect("a node message"),
            _ => continue,
        }
    }
}

/// Sends a message to the node.
pub async fn send(socket: &mut Socket, message: &RegionMessage) {
    socket.send(Message::Binary(encode(message).unwrap().into())).await.unwrap();
}

/// A session of [`TYPE`] at `base` (`ws://…`), registered as `address`.
pub async fn region(base: &str, address: &str) -> Socket {
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{base}/v1/regions/connect")).await.unwrap();
    let hello = Hello { protocol: PROTOCOL_VERSION, entity_type: TYPE.into() };
    socket.send(Message::Binary(encode(&hello).unwrap().into())).await.unwrap();
    assert!(matches!(next(&mut socket).await, NodeMessage::Welcome { .. }));
    let register = Register { address: address.into(), incarnation: 1, sequence: 1, ..Register::default() };
    send(&mut socket, &RegionMessage::Register(register)).await;
    while !matches!(next(&mut socket).await, NodeMessage::Registered { .. }) {}
    socket
}
