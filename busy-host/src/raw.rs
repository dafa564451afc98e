//! Raw region sessions (tokio-tungstenite and the protocol's frames): what
//! the reconnect storm and the burst of home lookups open, and the
//! [`keeper`] that keeps a registered region alive afterwards (heartbeats
//! every second, every hand-off answered at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use shardalloc_client::protocol::{
    CONNECT_PATH, Hello, NodeMessage, PROTOCOL_VERSION, RegionMessage, Register, decode, encode,
};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use crate::node::TYPE;

/// An open region session.
pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long one step of a handshake may take.
const STEP: Duration = Duration::from_secs(30);

/// A message as one binary frame.
pub fn frame(message: &RegionMessage) -> Message {
    Message::Binary(encode(message).expect("a small message").into())
}

/// The node's message in `frame`, if it is one.
pub fn node_message(frame: &Message) -> Option<NodeMessage> {
    match frame {
        Message::Binary(bytes) => decode(bytes).ok(),
        _ => None,
    }
}

/// The answer the protocol expects to a hand-off message, if any.
pub fn answer(message: &NodeMessage) -> Option<RegionMessage> {
    match message {
        NodeMessage::BeginHandOff { shard } => Some(RegionMessage::BeginHandOffAck { shard: shard.clone() }),
        NodeMessage::HandOff { shard } => Some(RegionMessage::ShardStopped { shard: shard.clone() }),
        _ => None,
    }
}

/// Connects, says `Hello` for the benchmark's type and registers
/// `address` with `incarnation`; the session once `Registered`.
pub async fn registered(base: &str, address: &str, incarnation: u64) -> anyhow::Result<Socket> {
    let url = format!("{}{CONNECT_PATH}", base.replacen("http://", "ws://", 1));
    let (mut socket, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
        .await
        .context("connecting took over 30 s")?
        .context("connect")?;
    socket.send(frame_of(&Hello { protocol: PROTOCOL_VERSION, entity_type: TYPE.into() })).await?;
    match next_message(&mut socket).await? {
        NodeMessage::Welcome { .. } => {}
        other => bail!("expected Welcome, got {other:?}"),
    }
    let register = Register { address: address.into(), incarnation, sequence: 1, ..Register::default() };
    socket.send(frame(&RegionMessage::Register(register))).await?;
    loop {
        match next_message(&mut socket).await? {
            NodeMessage::Registered { .. } => return Ok(socket),
            NodeMessage::RegisterRefused { reason } | NodeMessage::Refused { reason } => {
                bail!("registration refused: {reason}")
            }
            other => {
                if let Some(reply) = answer(&other) {
                    socket.send(frame(&reply)).await?;
                }
            }
        }
    }
}

fn frame_of(hello: &Hello) -> Message {
    Message::Binary(encode(hello).expect("a small message").into())
}

async fn next_message(socket: &mut Socket) -> anyhow::Result<NodeMessage> {
    loop {
        let next = tokio::time::timeout(STEP, socket.next()).await.context("the node was silent for 30 s")?;
        match next {
            Some(Ok(frame @ Message::Binary(_))) => {
                return node_message(&frame).context("an undecodable frame");
            }
            Some(Ok(Message::Close(close))) => bail!("the node closed the session: {close:?}"),
            Some(Ok(_)) => {}
            Some(Err(error)) => bail!("the session failed: {error}"),
            None => bail!("the session ended"),
        }
    }
}

/// What a [`keeper`] saw.
#[derive(Debug, Default)]
pub struct KeeperStats {
    /// `NotRegistered` answers (the node forgot the region).
    pub not_registered: AtomicU64,
    /// Sessions that ended under the keeper (it then registers again).
    pub sessions_lost: AtomicU64,
}

/// Keeps the region at `address` registered on `socket` until `stop`:
/// a heartbeat every second, hand-offs answered, a new session (same
/// incarnation) when this one ends.
pub async fn keeper(
    base: String,
    address: String,
    incarnation: u64,
    mut socket: Socket,
    mut stop: watch::Receiver<bool>,
    stats: Arc<KeeperStats>,
) {
    let mut sequence = 1;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let next = tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {
                sequence += 1;
                let heartbeat = RegionMessage::Heartbeat { sequence, metrics: Default::default() };
                if socket.send(frame(&heartbeat)).await.is_ok() {
                    continue;
                }
                None
            }
            next = socket.next() => next,
        };
        match next {
            Some(Ok(frame)) => {
                let Some(message) = node_message(&frame) else { continue };
                if message == NodeMessage::NotRegistered {
                    stats.not_registered.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(reply) = answer(&message) {
                    let _ = socket.send(self::frame(&reply)).await;
                }
                if !matches!(message, NodeMessage::NotRegistered) {
                    continue;
                }
            }
            _ => {
                stats.sessions_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Lost or forgotten: register again (as the region client does).
        loop {
            if *stop.borrow() {
                return;
            }
            match registered(&base, &address, incarnation).await {
                Ok(fresh) => {
                    socket = fresh;
                    sequence = 1;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}
