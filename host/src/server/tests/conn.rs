//! Timeouts and limits on every connection, over a real loopback socket:
//! slow, idle and half-open connections are closed, a flood of them cannot
//! keep a health check out, oversized heads get the JSON error, a client
//! that reads nothing of its event stream is disconnected, and a region
//! session must say Hello and Register in time.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{PATIENCE, TestNode, settings_with};
use crate::server::conn::{self, ConnectionLimits};
use crate::server::state::Security;

/// Serves `node`'s router with `limits` on 127.0.0.1; returns the address.
async fn serve(node: &TestNode, limits: ConnectionLimits) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = node.router.clone();
    tokio::spawn(conn::serve(listener, router, limits, std::future::pending()));
    address
}

fn quick() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_millis(400),
        request_body_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(400),
        session_handshake_timeout: Duration::from_millis(400),
        max_connections: 64,
        max_unauthenticated: 16,
        forward_timeout: Duration::from_millis(400),
        max_event_streams: 8,
    }
}

/// Reads until the peer closes (or `PATIENCE` passes); what it sent.
async fn until_closed(stream: &mut TcpStream) -> Option<String> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.ok().map(|()| String::from_utf8_lossy(&seen).into_owned())
}

/// One request on a fresh connection: the status line and the body.
async fn exchange(address: std::net::SocketAddr, request: &[u8]) -> (String, Value) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let answer = until_closed(&mut stream).await.expect("an answer, then the close");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())))
}

async fn healthy(address: std::net::SocketAddr) {
    let (status, body) = exchange(address, b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert!(status.contains("200"), "/healthz: {status} {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_idle_and_half_open_connections_are_closed_while_health_answers() {
    let node = TestNode::with_connections(settings_with(&["cart"]), Security::default(), quick());
    let address = serve(&node, quick()).await;
    let started = Instant::now();
    let mut half_open = TcpStream::connect(address).await.unwrap();
    half_open.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let mut idle = TcpStream::connect(address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut slow_body = TcpStream::connect(address).await.unwrap();
    let head = "PUT /v1/cluster/shards/cart/signal HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 100\r\n\r\n{\"a\":";
    slow_body.write_all(head.as_bytes()).await.unwrap();
    healthy(address).await;
    assert!(until_closed(&mut half_open).await.is_some(), "a half-open connection stayed open");
    let idle_seen = until_closed(&mut idle).await.expect("an idle keep-alive connection stayed open");
    assert!(idle_seen.starts_with("HTTP/1.1 200"), "{idle_seen}");
    let slow_seen = until_closed(&mut slow_body).await.expect("a slow body's connection stayed open");
    assert!(slow_seen.starts_with("HTTP/1.1 408"), "{slow_seen}");
    assert!(slow_seen.contains("body-timeout"), "{slow_seen}");
    assert!(started.elapsed() < Duration::from_secs(10), "closing took {:?}", started.elapsed());
    healthy(address).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_half_open_connections_cannot_keep_a_health_check_out() {
    let node = TestNode::start();
    let limits = ConnectionLimits { header_read_timeout: Duration::from_secs(60), ..quick() };
    let address = serve(&node, limits).await;
    let mut flood = Vec::new();
    for _ in 0..48 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nho").await.unwrap();
        flood.push(stream);
    }
    // Over the 16 allowed, the oldest went; a newcomer is still served.
    healthy(address).await;
    let mut closed = 0;
    for stream in &mut flood[..16] {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await {
            closed += 1;
        }
    }
    assert!(closed >= 15, "only {closed} of the oldest half-open connections were closed");
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let node = TestNode::start();
    // The four stay open however slowly this machine reaches the fifth
    // (with `quick`'s 400 ms they could go idle first and make room).
    let limits = ConnectionLimits {
        max_connections: 4,
        max_unauthenticated: 4,
        idle_timeout: Duration::from_secs(60),
        header_read_timeout: Duration::from_secs(60),
        ..quick()
    };
    let address = serve(&node, limits).await;
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        open.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(address).await.unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let seen = until_closed(&mut extra).await.expect("the fifth connection was kept");
    assert!(seen.is_empty(), "the fifth connection was served: {seen}");
    // Once the others close (idle), there is room again.
    drop(open);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, _) = exchange(address, b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        if status.contains("200") {
            break;
        }
        assert!(Instant::now() < deadline, "no room after the connections closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_heads_get_the_json_error() {
    let node = TestNode::start();
    let address = serve(&node, ConnectionLimits::default()).await;
    let long_uri =
        format!("GET /v1/cluster/shards?x={} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", "a".repeat(9000));
    let (status, body) = exchange(address, long_uri.as_bytes()).await;
    assert!(status.contains("414"), "{status}");
    assert_eq!(body["error"]["code"], "uri-too-long", "{body}");
    let big_headers: String = (0..70).map(|i| format!("x-filler-{i}: {}\r\n", "b".repeat(1000))).collect();
    let request = format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{big_headers}connection: close\r\n\r\n");
    let (status, body) = exchange(address, request.as_bytes()).await;
    assert!(status.contains("431"), "{status}");
    assert_eq!(body["error"]["code"], "headers-too-large", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_region_session_must_say_hello_and_register_in_time() {
    use futures_util::{SinkExt, StreamExt};
    use shardalloc_proto::protocol::{Hello, NodeMessage, PROTOCOL_VERSION, decode, encode};
    use tokio_tungstenite::tungstenite::Message;

    let node = TestNode::start();
    let address = serve(&node, quick()).await;
    let url = format!("ws://{address}/v1/regions/connect");
    // Silent after the upgrade.
    let (mut silent, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    // Hello, then nothing.
    let (mut hello_only, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let hello = Hello { protocol: PROTOCOL_VERSION, entity_type: "cart".into() };
    hello_only.send(Message::Binary(encode(&hello).unwrap().into())).await.unwrap();
    for (what, socket) in [("a silent session", &mut silent), ("a session without Register", &mut hello_only)] {
        let mut refused = None;
        let ended = tokio::time::timeout(PATIENCE, async {
            while let Some(Ok(message)) = socket.next().await {
                if let Message::Binary(frame) = message
                    && let Ok(NodeMessage::Refused { reason }) = decode::<NodeMessage>(&frame)
                {
                    refused = Some(reason);
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "{what} was kept open");
        let reason = refused.unwrap_or_default();
        assert!(reason.contains("Hello") || reason.contains("Register"), "{what}: {reason}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_reads_nothing_of_its_event_stream_is_disconnected() {
    let node = TestNode::start();
    let address = serve(&node, ConnectionLimits::default()).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    stream.write_all(b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    // Placement changes, one event each, several times the backlog, while
    // the client reads nothing (the kernel's socket buffers hold a few MiB).
    let total = 6 * crate::server::events::BACKLOG;
    for chunk in (0..total).collect::<Vec<_>>().chunks(5_000) {
        let placements: Vec<Value> =
            chunk.iter().map(|i| serde_json::json!({"shardId": format!("s{i}"), "target": "b"})).collect();
        let body = serde_json::json!({ "placements": placements }).to_string();
        let (status, answer) =
            node.request(axum::http::Method::POST, "/v1/cluster/shards/cart/placements", Some(&body)).await;
        assert_eq!(status, axum::http::StatusCode::OK, "{answer}");
    }
    let seen = until_closed(&mut stream).await.expect("the node closes the connection of a client that reads nothing");
    assert!(seen.starts_with("HTTP/1.1 200 OK"), "{}", &seen[..seen.len().min(200)]);
    let events = seen.matches("placement-set").count();
    assert!(events < total, "the client got all {total} events: it was not cut off");
}
