//! A region session that stays alive like a real client's: its writer
//! batches frames and heartbeats every second (every 100 ms in smoke mode)
//! in the background (each followed by a load report once one is set),
//! every wait for the node has a deadline, so a benchmark fails with a
//! message instead of hanging, and the heartbeats' round trips are timed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use shardalloc_proto::protocol::{
    FRAMES_PER_FLUSH, Hello, LoadReport, NodeMessage, PROTOCOL_VERSION, RegionMessage, Register, decode, encode,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use super::{Socket, TYPE};

/// Longest wait for any one message from the node (10× more than a
/// loaded 2-core machine needs).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How often the background heartbeat goes out (the node's default marks a
/// region unreachable after 5 s without one).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// [`HEARTBEAT_EVERY`], or every 100 ms in smoke mode (a phase of
/// well under a second still times a few heartbeats).
pub fn heartbeat_every() -> Duration {
    super::sized(HEARTBEAT_EVERY, Duration::from_millis(100))
}

/// What the heartbeat task and the reader share.
#[derive(Default)]
struct Beats {
    /// When each heartbeat not yet acknowledged went out, by sequence.
    sent: HashMap<u64, Instant>,
    /// Round trips of the acknowledged heartbeats since last taken.
    round_trips: Vec<Duration>,
    /// The load report sent after each heartbeat, when set.
    report: Option<LoadReport>,
}

/// A registered region session of [`TYPE`].
pub struct LiveRegion {
    address: String,
    beats: Arc<Mutex<Beats>>,
    to_node: mpsc::UnboundedSender<RegionMessage>,
    from_node: SplitStream<Socket>,
    writer: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
}

impl LiveRegion {
    /// Connects to `base` (`ws://…`), says hello and registers as `address`.
    pub async fn connect(base: &str, address: &str) -> Self {
        // As the region client does: no Nagle delay on small frames.
        let connected = tokio_tungstenite::connect_async_with_config(format!("{base}/v1/regions/connect"), None, true);
        let (socket, _) = tokio::time::timeout(DEADLINE, connected)
            .await
            .unwrap_or_else(|_| panic!("{address}: no WebSocket within {DEADLINE:?}"))
            .unwrap_or_else(|e| panic!("{address}: cannot connect: {e}"));
        let (mut sink, from_node) = socket.split();
        let hello = Hello { protocol: PROTOCOL_VERSION, entity_type: TYPE.into() };
        sink.send(Message::Binary(encode(&hello).unwrap().into())).await.unwrap();
        let (to_node, mut outgoing) = mpsc::unbounded_channel::<RegionMessage>();
        let writer = tokio::spawn(async move {
            while let Some(first) = outgoing.recv().await {
                let mut message = Some(first);
                let mut batched = 0;
                while let Some(m) = message.take() {
                    if sink.feed(Message::Binary(encode(&m).unwrap().into())).await.is_err() {
                        return;
                    }
                    batched += 1;
                    if batched < FRAMES_PER_FLUSH {
                        message = outgoing.try_recv().ok();
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
        });
        let beats = Arc::new(Mutex::new(Beats::default()));
        let mut region = LiveRegion {
            address: address.to_owned(),
            beats: beats.clone(),
            to_node: to_node.clone(),
            from_node,
            writer,
            heartbeat: tokio::spawn(async {}),
        };
        assert!(matches!(region.next().await, NodeMessage::Welcome { .. }), "{address}: no Welcome");
        let register = Register { address: address.into(), incarnation: 1, sequence: 1, ..Register::default() };
        region.send(RegionMessage::Register(register));
        loop {
            match region.next().await {
                NodeMessage::Registered { .. } => break,
                NodeMessage::ShardHome { .. }
                | NodeMessage::ShardHomeEpoch { .. }
                | NodeMessage::PlacementChanged { .. }
                | NodeMessage::RegionRemoved { .. } => {}
                other => panic!("{address}: registration answered with {other:?}"),
            }
        }
        region.heartbeat = tokio::spawn(async move {
            let mut sequence = 2;
            let mut every = tokio::time::interval(heartbeat_every());
            loop {
                every.tick().await;
                let report = {
                    let mut beats = beats.lock().unwrap();
                    beats.sent.insert(sequence, Instant::now());
                    beats.report.clone()
                };
                if to_node.send(RegionMessage::Heartbeat { sequence, metrics: Default::default() }).is_err() {
                    return;
                }
                if let Some(report) = report
                    && to_node.send(RegionMessage::Load(report)).is_err()
                {
                    return;
                }
                sequence += 1;
            }
        });
        region
    }

    /// The address it registered as.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sends `report` after every heartbeat from now on (`None`: no more
    /// reports).
    pub fn report_load(&self, report: Option<LoadReport>) {
        self.beats.lock().unwrap().report = report;
    }

    /// The round trips of the heartbeats acknowledged since the last call.
    pub fn take_round_trips(&self) -> Vec<Duration> {
        std::mem::take(&mut self.beats.lock().unwrap().round_trips)
    }

    /// Reads what the node sends for `period`, timing heartbeats; other
    /// messages are passed over (a session that only heartbeats).
    pub async fn idle(&mut self, period: Duration) {
        let until = tokio::time::Instant::now() + period;
        while let Ok(frame) = tokio::time::timeout_at(until, self.from_node.next()).await {
            match frame {
                Some(Ok(Message::Binary(frame))) => {
                    if let NodeMessage::HeartbeatAck { sequence, .. } = decode(&frame).expect("a node message") {
                        self.acknowledged(sequence);
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("{}: the session ended while idle: {other:?}", self.address),
            }
        }
    }

    fn acknowledged(&self, sequence: u64) {
        let mut beats = self.beats.lock().unwrap();
        if let Some(sent) = beats.sent.remove(&sequence) {
            beats.round_trips.push(sent.elapsed());
        }
    }

    /// Queues a message for the node.
    pub fn send(&self, message: RegionMessage) {
        self.to_node.send(message).unwrap_or_else(|_| panic!("{}: the session's writer stopped", self.address));
    }

    /// The next message from the node other than a heartbeat's answer;
    /// panics after [`DEADLINE`] or when the session ends.
    pub async fn next(&mut self) -> NodeMessage {
        loop {
            let frame = tokio::time::timeout(DEADLINE, self.from_node.next())
                .await
                .unwrap_or_else(|_| panic!("{}: nothing from the node within {DEADLINE:?}", self.address));
            match frame {
                Some(Ok(Message::Binary(frame))) => match decode(&frame).expect("a node message") {
                    NodeMessage::HeartbeatAck { sequence, .. } => self.acknowledged(sequence),
                    message => return message,
                },
                Some(Ok(Message::Close(reason))) => panic!("{}: the node closed the session: {reason:?}", self.address),
                Some(Ok(_)) => continue,
                Some(Err(error)) => panic!("{}: the session failed: {error}", self.address),
                None => panic!("{}: the session ended", self.address),
            }
        }
    }

    /// Asks the homes of `shards`, pipelined, and waits for every answer
    /// (shard, home) in order; fails on any other answer than a home.
    pub async fn homes(&mut self, shards: impl IntoIterator<Item = String>) -> Vec<(String, String)> {
        let mut asked = 0;
        for shard in shards {
            self.send(RegionMessage::GetShardHome { shard });
            asked += 1;
        }
        let mut answers = Vec::with_capacity(asked);
        for _ in 0..asked {
            answers.push(self.home().await);
        }
        answers
    }

    /// Waits for one home answer (`ShardHomeEpoch` since protocol 3, which
    /// this session speaks); fails on any other answer.
    pub async fn home(&mut self) -> (String, String) {
        match self.next().await {
            NodeMessage::ShardHome { shard, home } | NodeMessage::ShardHomeEpoch { shard, home, .. } => (shard, home),
            other => panic!("{}: expected a home answer, got {other:?}", self.address),
        }
    }
}

/// Runs [`LiveRegion::idle`] on every session at once for `period` and
/// gives them back in their order.
pub async fn idle_all(sessions: Vec<LiveRegion>, period: Duration) -> Vec<LiveRegion> {
    let tasks: Vec<_> = (sessions.into_iter())
        .map(|mut s| {
            tokio::spawn(async move {
                s.idle(period).await;
                s
            })
        })
        .collect();
    futures_util::future::join_all(tasks).await.into_iter().map(|done| done.expect("an idle session")).collect()
}

impl Drop for LiveRegion {
    fn drop(&mut self) {
        self.heartbeat.abort();
        self.writer.abort();
    }
}
