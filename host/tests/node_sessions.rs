//! The region-session WebSocket of the real node against misbehaving peers
//! (raw tokio-tungstenite) and the region token.

use crate::node;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use shardalloc_client::region::{InMemoryTransport, RegionError};
use shardalloc_proto::protocol::{
    CONNECT_PATH, Hello, MAX_FRAME_BYTES, NodeMessage, PROTOCOL_VERSION, RegionMessage, Register, decode, encode,
};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};

use node::{Journal, Node, registered, wait_for};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long the node may take to hang up on a misbehaving peer (its
/// handshake timeout is 10 s; the rest is room for a busy machine).
const HANG_UP: Duration = Duration::from_secs(40);

async fn connect(node: &Node, token: Option<&str>) -> Result<Socket, tungstenite::Error> {
    let mut request = format!("ws://{}{CONNECT_PATH}", node.addr).into_client_request().unwrap();
    if let Some(token) = token {
        request.headers_mut().insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
    }
    let (socket, _) = tokio::time::timeout(Duration::from_secs(30), tokio_tungstenite::connect_async(request))
        .await
        .expect("connect")?;
    Ok(socket)
}

async fn send(socket: &mut Socket, message: Message) {
    // The node may already have hung up; what counts is what it answers.
    let _ = socket.send(message).await;
}

fn binary<T: serde::Serialize>(message: &T) -> Message {
    Message::Binary(encode(message).unwrap().into())
}

/// A session past its handshake: Hello sent, Welcome received.
async fn welcomed(node: &Node) -> Socket {
    let mut socket = connect(node, None).await.expect("connect");
    send(&mut socket, binary(&Hello { protocol: PROTOCOL_VERSION, entity_type: "cart".into() })).await;
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("an answer to Hello");
    match frame {
        Some(Ok(Message::Binary(bytes))) => {
            assert_eq!(decode::<NodeMessage>(&bytes).unwrap(), NodeMessage::Welcome { protocol: PROTOCOL_VERSION })
        }
        other => panic!("expected Welcome, got {other:?}"),
    }
    socket
}

/// What the node sent until it hung up: its protocol messages, and whether
/// it sent a close frame. Panics if it does not hang up within [`HANG_UP`].
async fn until_hung_up(socket: &mut Socket, what: &str) -> (Vec<NodeMessage>, bool) {
    let mut messages = Vec::new();
    let deadline = tokio::time::Instant::now() + HANG_UP;
    loop {
        let next = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: the node did not hang up within {HANG_UP:?}; it sent {messages:?}"));
        match next {
            None | Some(Err(_)) => return (messages, false),
            Some(Ok(Message::Close(_))) => return (messages, true),
            Some(Ok(Message::Binary(bytes))) => messages.push(
                decode::<NodeMessage>(&bytes)
                    .unwrap_or_else(|e| panic!("{what}: an undecodable frame from the node: {e}")),
            ),
            Some(Ok(Message::Text(text))) => panic!("{what}: the node sent a text frame {text:?}"),
            Some(Ok(_)) => {}
        }
    }
}

/// The peer is refused: a `Refused` whose reason contains `reason`, then a close.
async fn refused(socket: &mut Socket, what: &str, reason: &str) {
    let (messages, closed) = until_hung_up(socket, what).await;
    match messages.as_slice() {
        [NodeMessage::Refused { reason: got }] => {
            assert!(got.contains(reason), "{what}: the reason {got:?} does not mention {reason:?}")
        }
        other => panic!("{what}: expected one Refused frame, got {other:?}"),
    }
    assert!(closed, "{what}: no close frame after Refused");
}

/// After the handshake a protocol violation closes the session, at most with
/// a `Refused` naming it (docs/protocol.md: none; the node may say why).
fn nothing_but_a_refusal(messages: &[NodeMessage], what: &str) {
    assert!(
        matches!(messages, [] | [NodeMessage::Refused { .. }]),
        "{what} was answered {messages:?} before the node hung up"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn misbehaving_peers_are_disconnected_and_the_node_carries_on() {
    let node = Node::start(&["--type", "cart"]).await;

    // Before the handshake.
    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, binary(&Hello { protocol: PROTOCOL_VERSION + 98, entity_type: "cart".into() })).await;
    refused(&mut socket, "a wrong protocol version", &format!("protocol version {}", PROTOCOL_VERSION + 98)).await;

    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, Message::Text("hello".into())).await;
    refused(&mut socket, "a text frame instead of Hello", "text frame").await;

    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, Message::Binary(vec![0xff; 12].into())).await;
    refused(&mut socket, "garbage instead of Hello", "not a Hello").await;

    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, binary(&Hello { protocol: PROTOCOL_VERSION, entity_type: String::new() })).await;
    refused(&mut socket, "an empty entity type", "entity type").await;

    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, Message::Binary(vec![0; MAX_FRAME_BYTES + 1].into())).await;
    until_hung_up(&mut socket, "an oversized first frame").await;

    // After the handshake.
    let mut socket = welcomed(&node).await;
    send(&mut socket, binary(&RegionMessage::GetShardHome { shard: "42".into() })).await;
    refused(&mut socket, "GetShardHome before Register", "before Register").await;

    let mut socket = welcomed(&node).await;
    send(&mut socket, binary(&RegionMessage::Heartbeat { sequence: 1, metrics: Default::default() })).await;
    refused(&mut socket, "Heartbeat before Register", "before Register").await;

    let mut socket = welcomed(&node).await;
    send(&mut socket, Message::Text("{\"register\":true}".into())).await;
    let (messages, _) = until_hung_up(&mut socket, "a text frame after Welcome").await;
    nothing_but_a_refusal(&messages, "a text frame after Welcome");

    let mut socket = welcomed(&node).await;
    send(&mut socket, Message::Binary(vec![0xc8, 0x01, 0x02, 0x03].into())).await;
    let (messages, _) = until_hung_up(&mut socket, "garbage after Welcome").await;
    nothing_but_a_refusal(&messages, "garbage after Welcome");

    let mut socket = welcomed(&node).await;
    let mut trailing = encode(&RegionMessage::Leave).unwrap();
    trailing.push(0);
    send(&mut socket, Message::Binary(trailing.into())).await;
    let (messages, _) = until_hung_up(&mut socket, "a frame with trailing bytes").await;
    nothing_but_a_refusal(&messages, "a frame with trailing bytes");

    let mut socket = welcomed(&node).await;
    send(&mut socket, Message::Binary(vec![0; MAX_FRAME_BYTES + 1].into())).await;
    until_hung_up(&mut socket, "an oversized frame after Welcome").await;

    // A registered session that then sends garbage is dropped too.
    let mut socket = welcomed(&node).await;
    let register = Register { address: "rogue".into(), incarnation: 1, sequence: 1, ..Register::default() };
    send(&mut socket, binary(&RegionMessage::Register(register))).await;
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("an answer to Register");
    match frame {
        Some(Ok(Message::Binary(bytes))) => {
            let answer = decode::<NodeMessage>(&bytes).unwrap();
            assert!(matches!(answer, NodeMessage::Registered { incarnation: 1, sequence: 1, .. }), "{answer:?}");
        }
        other => panic!("expected Registered, got {other:?}"),
    }
    send(&mut socket, Message::Binary(vec![0xff; 3].into())).await;
    until_hung_up(&mut socket, "garbage after Register").await;

    // The node is alive and serves a well-behaved region.
    let (status, body) = node.request(reqwest::Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let region = node.region("cart", "good", &journal, &network, |_| {});
    registered(&region).await;
    let home = tokio::time::timeout(Duration::from_secs(30), region.home_of("7")).await.unwrap().unwrap();
    // "rogue" is registered (and silent), so either may be the home.
    assert!(home == "good" || home == "rogue", "{home}");
    let state = node.admin().type_state("cart").await.unwrap();
    assert!(state.regions.iter().any(|r| r.address == "good" && r.status == "up"), "{state:?}");
    region.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_peer_is_dropped_after_the_handshake_timeout() {
    let node = Node::start(&["--type", "cart"]).await;
    // Timed from before the connection, so a slow connect cannot make the
    // node's timeout look short.
    let started = std::time::Instant::now();
    let mut socket = connect(&node, None).await.unwrap();
    // Nothing sent: the node gives up after its 10 s handshake timeout.
    let (messages, _) = until_hung_up(&mut socket, "a silent peer").await;
    assert!(started.elapsed() >= Duration::from_secs(9), "dropped after {:?}", started.elapsed());
    assert!(
        matches!(messages.as_slice(), [NodeMessage::Refused { reason }] if reason.contains("Hello")),
        "{messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_region_token_is_required_for_region_sessions() {
    let node = Node::start(&["--type", "cart", "--region-token", "rtok"]).await;
    // Refused either before the upgrade (401, as openapi.json documents) or
    // right after it with a Refused frame (as the protocol documents).
    for (what, token) in [("no token", None), ("a wrong token", Some("wrong"))] {
        match connect(&node, token).await {
            Err(tungstenite::Error::Http(response)) => {
                assert_eq!(response.status().as_u16(), 401, "a session with {what}")
            }
            Err(error) => panic!("a session with {what}: {error}"),
            Ok(mut socket) => {
                send(&mut socket, binary(&Hello { protocol: PROTOCOL_VERSION, entity_type: "cart".into() })).await;
                refused(&mut socket, &format!("a session with {what}"), "token").await;
            }
        }
    }
    // The region token is not an admin token: the admin API stays open.
    let (status, body) = node.request(reqwest::Method::GET, "/v1/cluster/shards", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let good = node.region("cart", "good", &journal, &network, |c| c.token = Some("rtok".into()));
    registered(&good).await;
    let home = tokio::time::timeout(Duration::from_secs(30), good.home_of("1")).await.unwrap().unwrap();
    assert_eq!(home, "good");

    // A region without the token is never registered, and learns it was refused.
    let mut updates;
    let bad = node.region("cart", "bad", &journal, &network, |_| {});
    updates = bad.updates();
    let outcome = tokio::time::timeout(Duration::from_secs(10), bad.wait_registered()).await;
    let state = node.admin().type_state("cart").await.unwrap();
    assert!(!state.regions.iter().any(|r| r.address == "bad"), "the region without a token registered: {state:?}");
    assert!(!bad.is_registered());
    let mut seen = Vec::new();
    while let Ok(update) = updates.try_recv() {
        seen.push(update);
    }
    match outcome {
        Ok(Err(RegionError::Refused { reason })) => {
            assert!(reason.contains("token") || reason.contains("401"), "{reason}")
        }
        Ok(other) => panic!("the region without a token: wait_registered answered {other:?}"),
        Err(_) => panic!(
            "the region without a token was not told it is refused within 10 s \
             (wait_registered still waits; its updates: {seen:?})"
        ),
    }
    bad.shutdown().await;
    good.shutdown().await;
}

/// A welcomed session that registered `address`; its socket once
/// `Registered` came back.
async fn registered_raw(node: &Node, address: &str) -> Socket {
    let mut socket = welcomed(node).await;
    let register = Register { address: address.into(), incarnation: 1, sequence: 1, ..Register::default() };
    send(&mut socket, binary(&RegionMessage::Register(register))).await;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("Registered");
        if let Some(Ok(Message::Binary(bytes))) = frame
            && matches!(decode::<NodeMessage>(&bytes).unwrap(), NodeMessage::Registered { .. })
        {
            return socket;
        }
    }
}

/// Sends a heartbeat and waits for its ack, skipping other messages; the
/// round trip.
async fn heartbeat(socket: &mut Socket, sequence: u64) -> Duration {
    let started = std::time::Instant::now();
    send(socket, binary(&RegionMessage::Heartbeat { sequence, metrics: Default::default() })).await;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), socket.next()).await.expect("a heartbeat ack");
        match frame {
            Some(Ok(Message::Binary(bytes))) => {
                if let NodeMessage::HeartbeatAck { sequence: acked, .. } = decode::<NodeMessage>(&bytes).unwrap()
                    && acked == sequence
                {
                    return started.elapsed();
                }
            }
            Some(Ok(Message::Close(frame))) => panic!("the node closed the session: {frame:?}"),
            other => assert!(matches!(other, Some(Ok(_))), "the session ended: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_home_lookups_delays_no_other_region_and_its_sender_is_slowed_not_dropped() {
    // The busy region sends no heartbeat while its burst is held back, and
    // the quiet one stops after its part: neither may time out meanwhile,
    // nor may a rebalance hand shards off to a region that does not answer.
    let timings =
        ["--unreachable-after-ms", "120000", "--remove-after-ms", "120000", "--rebalance-interval-ms", "600000"];
    let node = Node::start(&[&["--type", "cart"][..], &timings[..]].concat()).await;
    let mut quiet = registered_raw(&node, "quiet").await;
    let busy = registered_raw(&node, "busy").await;
    // The busy region asks 60,000 homes as fast as it can and reads nothing
    // meanwhile (the attack: 120k delayed every other heartbeat by 17.3 s,
    // so 60k would still delay them past the bound below).
    let (mut sink, mut stream) = busy.split();
    const BURST: u64 = 60_000;
    let burst = tokio::spawn(async move {
        for i in 0..BURST {
            let frame = binary(&RegionMessage::GetShardHome { shard: format!("burst-{i}") });
            if sink.feed(frame).await.is_err() {
                return sink;
            }
        }
        let _ = sink.flush().await;
        sink
    });
    let mut slowest = Duration::ZERO;
    for sequence in 2..=30 {
        slowest = slowest.max(heartbeat(&mut quiet, sequence).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("the slowest heartbeat during a burst of {BURST} lookups: {slowest:?}");
    // Well under a second is expected, but how far under says more about
    // this machine than about the node: the figure is measured in release
    // by `cargo xtask busy-host` (its `burst` load). What must hold here is
    // the harm: no heartbeat held back as long as a region's lease (10 s by
    // default), after which it would stop its shards.
    assert!(slowest < Duration::from_secs(10), "a quiet region's heartbeat took {slowest:?} during the burst");
    // The busy region was slowed down, never dropped: it gets every answer
    // once it reads, and stays registered.
    let mut answered = 0;
    let mut others = std::collections::BTreeMap::new();
    while answered < BURST {
        let frame = tokio::time::timeout(Duration::from_secs(120), stream.next())
            .await
            .unwrap_or_else(|_| panic!("{answered} of {BURST} answers, then silence; also {others:?}"));
        match frame {
            Some(Ok(Message::Binary(bytes))) => match decode::<NodeMessage>(&bytes).unwrap() {
                NodeMessage::ShardHomeEpoch { .. } => answered += 1,
                other => *others.entry(format!("{other:?}").chars().take(20).collect::<String>()).or_insert(0) += 1,
            },
            other => panic!("the busy region's session ended after {answered} answers: {other:?}"),
        }
    }
    let mut busy = burst.await.unwrap().reunite(stream).unwrap();
    heartbeat(&mut busy, 2).await;
}

/// A region of protocol version 1 (before load reports) is welcomed in
/// version 1 and served as before; a `Load` is not part of its version, and
/// sending one ends its session with the rule named.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_1_region_is_served_in_version_1_and_a_load_is_refused_to_it() {
    use shardalloc_proto::protocol::{LoadReport, OLDEST_PROTOCOL_VERSION};

    let node = Node::start(&["--type", "cart"]).await;
    let mut socket = connect(&node, None).await.unwrap();
    send(&mut socket, binary(&Hello { protocol: OLDEST_PROTOCOL_VERSION, entity_type: "cart".into() })).await;
    let answer = |frame: Option<Result<Message, tungstenite::Error>>| match frame {
        Some(Ok(Message::Binary(bytes))) => decode::<NodeMessage>(&bytes).unwrap(),
        other => panic!("expected a frame, got {other:?}"),
    };
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("an answer to Hello");
    assert_eq!(answer(frame), NodeMessage::Welcome { protocol: 1 });
    let register = Register { address: "old:1".into(), incarnation: 1, sequence: 1, ..Register::default() };
    send(&mut socket, binary(&RegionMessage::Register(register))).await;
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("an answer to Register");
    assert!(matches!(answer(frame), NodeMessage::Registered { incarnation: 1, sequence: 1, .. }));
    send(&mut socket, binary(&RegionMessage::GetShardHome { shard: "s".into() })).await;
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("a home");
    assert_eq!(answer(frame), NodeMessage::ShardHome { shard: "s".into(), home: "old:1".into() });

    send(&mut socket, binary(&RegionMessage::Load(LoadReport { window_ms: 1_000, ..LoadReport::default() }))).await;
    refused(&mut socket, "a Load in version 1", "a Load in protocol version 1; it needs version 2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_region_gone_without_a_close_frame_is_no_protocol_violation() {
    let node = Node::start(&["--type", "cart"]).await;
    let mut socket = welcomed(&node).await;
    let register = Register { address: "exited".into(), incarnation: 1, sequence: 1, ..Register::default() };
    send(&mut socket, binary(&RegionMessage::Register(register))).await;
    let frame = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("an answer to Register");
    assert!(matches!(frame, Some(Ok(Message::Binary(_)))), "{frame:?}");
    // The process exits: its TCP connection ends with no close frame.
    let tcp = match socket.into_inner() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp,
        other => panic!("a plain connection expected, got {other:?}"),
    };
    drop(tcp);
    // A region that registers after it is served as before.
    let journal = Journal::default();
    let region = node.region("cart", "after", &journal, &InMemoryTransport::new(), |_| {});
    registered(&region).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = node.log_tail();
    assert!(!log.contains("protocol violation"), "{log}");
    region.shutdown().await;
}

/// A region reporting load in a loop (the third round's attack: 2,000
/// reports back to back) is paced: the reports are folded into one every
/// quarter second, not queued for the driver, the session stays open, and
/// the load they carried arrives whole.
#[tokio::test(flavor = "multi_thread")]
async fn load_reports_sent_in_a_loop_are_folded_and_their_load_arrives() {
    use shardalloc_proto::protocol::{LoadReport, ShardLoad};

    let node = Node::start(&["--type", "cart"]).await;
    let mut flood = registered_raw(&node, "flood").await;
    send(&mut flood, binary(&RegionMessage::GetShardHome { shard: "s".into() })).await;
    let report = LoadReport { window_ms: 1_000, shards: vec![ShardLoad { shard: "s".into(), load: 8.0 }], rest: 0.0 };
    wait_for("s homed on flood", Duration::from_secs(60), async || {
        let (status, shard) = node.request(reqwest::Method::GET, "/v1/cluster/shards/cart/shards/s", None).await;
        (status == StatusCode::OK && shard["home"] == "flood").then_some(())
    })
    .await;
    for _ in 0..2_000 {
        flood.feed(binary(&RegionMessage::Load(report.clone()))).await.unwrap();
    }
    flood.flush().await.unwrap();
    heartbeat(&mut flood, 7).await;
    let coalesced = wait_for("the folded reports counted", Duration::from_secs(60), async || {
        let text = node.http().get(node.url("/metrics")).send().await.ok()?.text().await.ok()?;
        let line = text.lines().find(|l| l.starts_with("shardalloc_load_reports_coalesced_total"))?;
        let count: f64 = line.rsplit(' ').next()?.parse().ok()?;
        (count > 0.0).then_some(count)
    })
    .await;
    // At most two reports a quarter second go through (one sent, one
    // waiting): fewer than 1,000 folded would mean two minutes of reading.
    assert!(coalesced >= 1_000.0, "only {coalesced} of 2,000 reports were folded");
    // Every report said 8 units a second: so does the folded one.
    let load = wait_for("s's load", Duration::from_secs(60), async || {
        let (_, shard) = node.request(reqwest::Method::GET, "/v1/cluster/shards/cart/shards/s", None).await;
        shard["load"].as_f64().filter(|load| *load > 0.0)
    })
    .await;
    assert_eq!(load, 8.0);
}

/// A region of our client that hears of 20,000 new shards at once keeps its
/// lease: it asks the node for at most 256 homes at a time (the region
/// core's `max_lookups_in_flight`), so its heartbeats never wait in its
/// connection behind its own lookups, and every message is delivered.
/// Without the bound its 20,000 lookups went out at once and its
/// heartbeats queued behind them on the node's side for longer than its
/// lease (10 s, the default; the busy-host benchmark measured 3.9–6.1 s
/// behind a raw region's 120,000 in release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_hearing_of_many_shards_at_once_keeps_its_lease() {
    const SHARDS: u64 = 20_000;
    let node = Node::start(&[
        "--type",
        "cart",
        "--heartbeat-interval-ms",
        "200",
        "--lease-ms",
        "10000",
        "--unreachable-after-ms",
        "120000",
        "--remove-after-ms",
        "120000",
        "--rebalance-interval-ms",
        "600000",
    ])
    .await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |config| {
        config.total_buffer_limit = 2 * SHARDS as usize;
        // The default: a lookup is asked again after 2 s without an answer
        // (the harness's 300 ms is shorter than a debug node on a busy
        // machine takes for 256 new shards).
        config.home_retry = Duration::from_secs(2);
    });
    registered(&a).await;
    for i in 0..SHARDS {
        a.send(&format!("many-{i}"), node::Msg::new("t", i)).expect("the buffers take every message");
    }
    // When the region was first seen fenced, and how many messages had
    // been delivered by then.
    let mut fenced: Option<(Duration, usize)> = None;
    let started = std::time::Instant::now();
    wait_for(&format!("{SHARDS} messages to be delivered"), Duration::from_secs(600), async || {
        if fenced.is_none() && a.is_fenced() {
            fenced = Some((started.elapsed(), journal.delivered_count()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        (journal.delivered_count() as u64 == SHARDS).then_some(())
    })
    .await;
    assert_eq!(
        fenced, None,
        "the region's lease ran out (after, with so many delivered) while its lookups were answered"
    );
    let stops = journal.entries().iter().filter(|e| matches!(e, node::Entry::Stopped { .. })).count();
    assert_eq!(stops, 0, "shards stopped: the region was fenced");
    a.shutdown().await;
}
