//! The region client end to end: real WebSocket sessions to a scripted
//! node (one shard table, hand-offs driven by the test), regions connected
//! through an `InMemoryTransport`, applications that log what they see.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use shardalloc_client::protocol::{self, Hello, NodeMessage, PROTOCOL_VERSION, RegionMessage};
use shardalloc_client::region::{
    Application, InMemoryTransport, Region, RegionConfig, RegionError, RegionHandle, Update,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

/// Generous: every wait here takes milliseconds when things work.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Default)]
struct NodeState {
    /// Address → (session id, its outgoing messages).
    sessions: HashMap<String, (u64, mpsc::UnboundedSender<NodeMessage>)>,
    /// (address, incarnation, sequence) of every registration.
    registrations: Vec<(String, u64, u64)>,
    homes: HashMap<String, String>,
    /// Shard → (regions that have not acknowledged, new home).
    moving: HashMap<String, (BTreeSet<String>, String)>,
    parked: Vec<(String, String)>,
    leaving: BTreeSet<String>,
    acking: bool,
    heartbeats: usize,
    /// Every load report, by sender.
    loads: Vec<(String, shardalloc_client::protocol::LoadReport)>,
}

/// A node speaking the region protocol, reduced: new shards go to
/// `default_home`; hand-offs are started by the test or by a leave.
struct FakeNode {
    url: String,
    token: Option<String>,
    default_home: String,
    lease_ms: u64,
    heartbeat_interval_ms: u64,
    next_session: std::sync::atomic::AtomicU64,
    state: Mutex<NodeState>,
}

impl FakeNode {
    async fn start(token: Option<&str>, default_home: &str, lease_ms: u64, heartbeat_interval_ms: u64) -> Arc<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = Arc::new(FakeNode {
            url: format!("http://{}", listener.local_addr().unwrap()),
            token: token.map(str::to_owned),
            default_home: default_home.to_owned(),
            lease_ms,
            heartbeat_interval_ms,
            next_session: std::sync::atomic::AtomicU64::new(1),
            state: Mutex::new(NodeState { acking: true, ..NodeState::default() }),
        });
        let server = node.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(server.clone().serve(stream));
            }
        });
        node
    }

    async fn serve(self: Arc<Self>, stream: TcpStream) {
        let mut authorization = None;
        // The callback's signature is tungstenite's.
        #[allow(clippy::result_large_err, reason = "tungstenite's upgrade callback answers its own Result")]
        let callback = |request: &Request, response: Response| {
            assert_eq!(request.uri().path(), protocol::CONNECT_PATH);
            authorization = request.headers().get("authorization").map(|v| v.to_str().unwrap().to_owned());
            Ok(response)
        };
        let socket = tokio_tungstenite::accept_hdr_async(stream, callback).await.unwrap();
        let (mut sink, mut frames) = socket.split();
        let Some(Ok(Message::Binary(first))) = frames.next().await else { return };
        let hello: Hello = protocol::decode(&first).unwrap();
        assert_eq!(hello, Hello { protocol: PROTOCOL_VERSION, entity_type: "cart".into() });
        let expected = self.token.as_ref().map(|t| format!("Bearer {t}"));
        if authorization != expected {
            let refused = NodeMessage::Refused { reason: "bad region token".into() };
            let _ = sink.send(Message::Binary(protocol::encode(&refused).unwrap().into())).await;
            let _ = sink.close().await;
            return;
        }
        let welcome = NodeMessage::Welcome { protocol: PROTOCOL_VERSION };
        sink.send(Message::Binary(protocol::encode(&welcome).unwrap().into())).await.unwrap();
        let (outgoing, mut to_region) = mpsc::unbounded_channel::<NodeMessage>();
        tokio::spawn(async move {
            while let Some(message) = to_region.recv().await {
                if sink.send(Message::Binary(protocol::encode(&message).unwrap().into())).await.is_err() {
                    return;
                }
            }
            let _ = sink.close().await;
        });
        // Only the sessions table holds the sender: removing it closes the socket.
        let id = self.next_session.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut outgoing = Some(outgoing);
        let mut address = None;
        while let Some(Ok(frame)) = frames.next().await {
            let Message::Binary(bytes) = frame else { continue };
            let message: RegionMessage = protocol::decode(&bytes).unwrap();
            if let RegionMessage::Register(register) = &message
                && let Some(outgoing) = outgoing.take()
            {
                address = Some(register.address.clone());
                self.state.lock().unwrap().sessions.insert(register.address.clone(), (id, outgoing));
            }
            let Some(from) = &address else { panic!("{message:?} before registering") };
            self.handle(from, message);
        }
        // The region closed the session: drop it, which ends the connection.
        if let Some(address) = address {
            let mut state = self.state.lock().unwrap();
            if state.sessions.get(&address).is_some_and(|(session, _)| *session == id) {
                state.sessions.remove(&address);
            }
        }
    }

    fn handle(&self, from: &str, message: RegionMessage) {
        let mut state = self.state.lock().unwrap();
        let send = |state: &NodeState, to: &str, message: NodeMessage| {
            if let Some((_, session)) = state.sessions.get(to) {
                let _ = session.send(message);
            }
        };
        match message {
            RegionMessage::Register(r) | RegionMessage::RegisterWithCapacity { register: r, .. } => {
                state.registrations.push((r.address, r.incarnation, r.sequence));
                let registered = NodeMessage::Registered {
                    incarnation: r.incarnation,
                    sequence: r.sequence,
                    lease_ms: self.lease_ms,
                    heartbeat_interval_ms: self.heartbeat_interval_ms,
                };
                send(&state, from, registered);
            }
            RegionMessage::Heartbeat { sequence, .. } => {
                state.heartbeats += 1;
                if state.acking {
                    let incarnation = state.registrations.iter().rev().find(|r| r.0 == from).unwrap().1;
                    send(&state, from, NodeMessage::HeartbeatAck { incarnation, sequence, lease_ms: self.lease_ms });
                }
            }
            RegionMessage::GetShardHome { shard } | RegionMessage::GetShardHomeWithAttributes { shard, .. } => {
                if state.moving.contains_key(&shard) {
                    state.parked.push((from.to_owned(), shard));
                } else {
                    let home = state.homes.entry(shard.clone()).or_insert_with(|| self.default_home.clone()).clone();
                    send(&state, from, NodeMessage::ShardHome { shard, home });
                }
            }
            RegionMessage::BeginHandOffAck { shard } => {
                let Some((waiting, _)) = state.moving.get_mut(&shard) else { return };
                waiting.remove(from);
                if waiting.is_empty() {
                    let owner = state.homes[&shard].clone();
                    send(&state, &owner, NodeMessage::HandOff { shard });
                }
            }
            RegionMessage::ShardStopped { shard } => {
                let (_, to) = state.moving.remove(&shard).expect("a hand-off in flight");
                state.homes.insert(shard.clone(), to.clone());
                for (waiting, parked) in std::mem::take(&mut state.parked) {
                    if parked == shard {
                        send(&state, &waiting, NodeMessage::ShardHome { shard: shard.clone(), home: to.clone() });
                    } else {
                        state.parked.push((waiting, parked));
                    }
                }
                self.finish_leaves(&mut state);
            }
            RegionMessage::Leave => {
                state.leaving.insert(from.to_owned());
                let other = state.sessions.keys().find(|a| *a != from).cloned().expect("another region");
                let owned: Vec<String> =
                    state.homes.iter().filter(|(_, h)| *h == from).map(|(s, _)| s.clone()).collect();
                for shard in owned {
                    Self::begin(&mut state, &shard, &other);
                }
                self.finish_leaves(&mut state);
            }
            RegionMessage::Drain { .. } => {}
            RegionMessage::Load(report) => state.loads.push((from.to_owned(), report)),
        }
    }

    fn begin(state: &mut NodeState, shard: &str, to: &str) {
        let regions: BTreeSet<String> = state.sessions.keys().cloned().collect();
        for region in &regions {
            let _ = state.sessions[region].1.send(NodeMessage::BeginHandOff { shard: shard.to_owned() });
        }
        state.moving.insert(shard.to_owned(), (regions, to.to_owned()));
    }

    fn finish_leaves(&self, state: &mut NodeState) {
        let done: Vec<String> =
            state.leaving.iter().filter(|l| !state.homes.values().any(|h| h == *l)).cloned().collect();
        for address in done {
            state.leaving.remove(&address);
            if let Some((_, session)) = state.sessions.remove(&address) {
                let _ = session.send(NodeMessage::LeaveDone);
            }
        }
    }

    /// Moves a shard to `to` (the test waits for it with [`FakeNode::home`]).
    fn hand_off(&self, shard: &str, to: &str) {
        Self::begin(&mut self.state.lock().unwrap(), shard, to);
    }

    fn home(&self, shard: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        if state.moving.contains_key(shard) { None } else { state.homes.get(shard).cloned() }
    }

    /// Drops a region's session (its socket closes).
    fn disconnect(&self, address: &str) {
        self.state.lock().unwrap().sessions.remove(address);
    }

    fn registrations_of(&self, address: &str) -> Vec<(u64, u64)> {
        let state = self.state.lock().unwrap();
        state.registrations.iter().filter(|r| r.0 == address).map(|r| (r.1, r.2)).collect()
    }
}

/// Logs (region, event) for every call the region makes.
#[derive(Clone)]
struct Recorder {
    region: &'static str,
    log: Arc<Mutex<Vec<(&'static str, String)>>>,
}

impl Application for Recorder {
    type Message = u32;
    type Reply = ();

    async fn start_shard(&self, shard: &str) {
        self.log.lock().unwrap().push((self.region, format!("start {shard}")));
    }

    async fn stop_shard(&self, shard: &str) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.log.lock().unwrap().push((self.region, format!("stop {shard}")));
    }

    async fn deliver(&self, shard: &str, message: u32) {
        self.log.lock().unwrap().push((self.region, format!("{shard}:{message}")));
    }

    fn metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([("cpu".to_owned(), 0.25)])
    }
}

type Log = Arc<Mutex<Vec<(&'static str, String)>>>;

fn start_region(
    node: &FakeNode,
    address: &'static str,
    log: &Log,
    network: &InMemoryTransport<u32>,
    token: Option<&str>,
) -> RegionHandle<u32> {
    let mut config = RegionConfig::new(&node.url, "cart", address);
    config.token = token.map(str::to_owned);
    config.reconnect_max = Duration::from_millis(300);
    Region::start(config, Recorder { region: address, log: log.clone() }, network.clone()).unwrap()
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn registered(region: &RegionHandle<u32>) {
    tokio::time::timeout(PATIENCE, region.wait_registered()).await.expect("registered in time").unwrap();
}

async fn next_update(updates: &mut tokio::sync::broadcast::Receiver<Update>, wanted: impl Fn(&Update) -> bool) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if wanted(&updates.recv().await.unwrap()) {
                return;
            }
        }
    })
    .await
    .expect("the update in time");
}

fn events(log: &Log, region: &str) -> Vec<String> {
    log.lock().unwrap().iter().filter(|(r, _)| *r == region).map(|(_, e)| e.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_senders_messages_arrive_in_order_across_a_hand_off() {
    let node = FakeNode::start(None, "b", 5_000, 100).await;
    let log: Log = Arc::default();
    let network = InMemoryTransport::new();
    let a = start_region(&node, "a", &log, &network, None);
    let b = start_region(&node, "b", &log, &network, None);
    registered(&a).await;
    registered(&b).await;
    assert_eq!(a.home_of("s").await.unwrap(), "b");
    assert_eq!(network.addresses(), ["a", "b"]);

    for n in 0..300 {
        if n == 100 {
            node.hand_off("s", "a");
        }
        a.send("s", n).unwrap();
        if n % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    eventually("every message delivered", || {
        log.lock().unwrap().iter().filter(|(_, e)| e.starts_with("s:")).count() == 300
    })
    .await;
    assert_eq!(node.home("s").as_deref(), Some("a"));

    let log = log.lock().unwrap().clone();
    let delivered: Vec<String> = log.iter().filter(|(_, e)| e.starts_with("s:")).map(|(_, e)| e.clone()).collect();
    let expected: Vec<String> = (0..300).map(|n| format!("s:{n}")).collect();
    assert_eq!(delivered, expected, "in send order, exactly once");
    // b started, delivered, stopped; then a started and delivered the rest.
    let first_on_a = log.iter().position(|(r, e)| *r == "a" && e.starts_with("s:")).unwrap();
    let stop_on_b = log.iter().position(|(r, e)| *r == "b" && e == "stop s").unwrap();
    let start_on_a = log.iter().position(|(r, e)| *r == "a" && e == "start s").unwrap();
    assert!(stop_on_b < start_on_a && start_on_a < first_on_a, "{log:?}");
    assert!(log[..stop_on_b].iter().all(|(r, e)| *r == "b" || !e.starts_with("s:")));
    assert_eq!(log[0], ("b", "start s".to_owned()));
    assert_eq!(a.running_shards(), ["s"]);
    assert!(b.running_shards().is_empty());
    a.shutdown().await;
    b.shutdown().await;
    assert!(network.addresses().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_load_reaches_the_node_after_a_heartbeat_as_a_rate() {
    let node = FakeNode::start(None, "a", 5_000, 100).await;
    let log: Log = Arc::default();
    let network = InMemoryTransport::new();
    let a = start_region(&node, "a", &log, &network, None);
    registered(&a).await;
    a.send("hot", 1).unwrap();
    a.send("cold", 1).unwrap();
    eventually("both shards running on a", || a.running_shards() == ["cold", "hot"]).await;
    a.set_load("cold", 2.5);
    a.set_load("elsewhere", 1_000.0);
    let reports = || node.state.lock().unwrap().loads.clone();
    // Recorded in a steady stream until a report's window holds some of it.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let report = loop {
        a.record_load("hot", 10.0);
        if let Some((from, report)) = reports().into_iter().find(|(_, r)| r.shards.len() == 2) {
            assert_eq!(from, "a");
            break report;
        }
        assert!(tokio::time::Instant::now() < deadline, "no report naming both shards: {:?}", reports());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(report.window_ms >= shardalloc_client::protocol::MIN_LOAD_WINDOW_MS, "{report:?}");
    assert_eq!(report.shards[0].shard, "hot", "most loaded first: {report:?}");
    assert!(report.shards[0].load > 2.5, "{report:?}");
    assert_eq!((report.shards[1].shard.as_str(), report.shards[1].load), ("cold", 2.5));
    assert_eq!(report.rest, 0.0, "a shard that does not run here is not reported");
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_hands_the_shards_off_and_stops() {
    let node = FakeNode::start(None, "b", 5_000, 100).await;
    let log: Log = Arc::default();
    let network = InMemoryTransport::new();
    let a = start_region(&node, "a", &log, &network, None);
    let b = start_region(&node, "b", &log, &network, None);
    registered(&a).await;
    registered(&b).await;
    let mut updates = b.updates();
    a.send("s", 1).unwrap();
    eventually("the shard running on b", || b.running_shards() == ["s"]).await;

    tokio::time::timeout(PATIENCE, b.clone().leave()).await.expect("left in time").unwrap();
    next_update(&mut updates, |u| *u == Update::Left).await;
    assert_eq!(events(&log, "b"), ["start s", "s:1", "stop s"]);
    assert_eq!(network.addresses(), ["a"]);
    assert_eq!(b.send("s", 2), Err(shardalloc_client::region::SendError::Stopped));
    assert_eq!(b.home_of("s").await, Err(RegionError::Left));

    a.send("s", 3).unwrap();
    eventually("the shard running on a", || events(&log, "a") == ["start s", "s:3"]).await;
    a.shutdown().await;
    assert_eq!(events(&log, "a"), ["start s", "s:3", "stop s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_by_name_and_the_right_one_registers() {
    let node = FakeNode::start(Some("t0k3n"), "a", 5_000, 100).await;
    let log: Log = Arc::default();
    let network = InMemoryTransport::new();
    let wrong = start_region(&node, "a", &log, &network, Some("guess"));
    let error = tokio::time::timeout(PATIENCE, wrong.wait_registered()).await.unwrap().unwrap_err();
    assert_eq!(error, RegionError::Refused { reason: "bad region token".into() });
    assert_eq!(error.to_string(), "the node refused the region: bad region token");
    wrong.shutdown().await;
    let right = start_region(&node, "b", &log, &network, Some("t0k3n"));
    registered(&right).await;
    assert!(right.is_registered());
    right.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_lease_fences_the_region_and_a_reconnect_keeps_its_incarnation() {
    let node = FakeNode::start(None, "a", 400, 50).await;
    let log: Log = Arc::default();
    let network = InMemoryTransport::new();
    let a = start_region(&node, "a", &log, &network, None);
    registered(&a).await;
    let mut updates = a.updates();
    a.send("s", 1).unwrap();
    eventually("the shard running", || events(&log, "a") == ["start s", "s:1"]).await;

    node.state.lock().unwrap().acking = false;
    next_update(&mut updates, |u| *u == Update::Fenced).await;
    assert!(a.is_fenced());
    eventually("the shard stopped", || events(&log, "a").last().map(String::as_str) == Some("stop s")).await;
    eventually("the stop noted", || a.running_shards().is_empty()).await;

    node.state.lock().unwrap().acking = true;
    next_update(&mut updates, |u| *u == Update::LeaseRegained).await;
    assert!(!a.is_fenced());
    a.send("s", 2).unwrap();
    eventually("the shard running again", || events(&log, "a") == ["start s", "s:1", "stop s", "start s", "s:2"]).await;

    node.disconnect("a");
    next_update(&mut updates, |u| matches!(u, Update::Disconnected { .. })).await;
    next_update(&mut updates, |u| matches!(u, Update::Registered { .. })).await;
    let registrations = node.registrations_of("a");
    assert_eq!(registrations.len(), 2);
    assert_eq!(registrations[0].0, registrations[1].0, "the same incarnation");
    assert_eq!(registrations[0].0, a.incarnation());
    assert!(registrations[1].1 > registrations[0].1, "a later sequence");
    // The shard kept running through the reconnect (the lease held).
    a.send("s", 3).unwrap();
    eventually("delivered after the reconnect", || events(&log, "a").last().map(String::as_str) == Some("s:3")).await;
    assert_eq!(a.running_shards(), ["s"]);
    a.shutdown().await;
}
