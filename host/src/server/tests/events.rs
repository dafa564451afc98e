//! The decision event stream through the router: order and ids, resume
//! with `Last-Event-ID`, the replay's end, a client that reads nothing
//! dropped and told what it missed when it resumes, the caps on streams
//! and on replays, and bad input named.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use futures_util::StreamExt;
use serde_json::Value;

use super::{PATIENCE, TestNode, assert_error};
use crate::server::events::{BACKLOG, MAX_REPLAYS, REPLAY_FREE};

/// An open stream, read frame by frame.
struct Reader {
    body: axum::body::BodyDataStream,
    buffer: String,
}

/// One frame: an event's id and data, or a comment.
#[derive(Debug, PartialEq)]
enum Frame {
    Event(Option<String>, Value),
    Comment(String),
}

impl Reader {
    async fn open(node: &TestNode, path: &str, headers: &[(&str, &str)]) -> Reader {
        let response = node.open(path, headers).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Reader { body: Body::new(response.into_body()).into_data_stream(), buffer: String::new() }
    }

    async fn frame(&mut self) -> Frame {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(comment) = line.strip_prefix(':') {
                        return Frame::Comment(comment.trim().to_owned());
                    }
                    if let Some(value) = line.strip_prefix("id: ") {
                        id = Some(value.to_owned());
                    }
                    if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(value).expect("data is JSON"));
                    }
                }
                return Frame::Event(id, data.expect("an event has data"));
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next())
                .await
                .expect("a frame in time")
                .expect("the stream goes on")
                .expect("the stream reads");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Reads until the node ends the stream.
    async fn ends(&mut self) {
        while let Some(chunk) = tokio::time::timeout(PATIENCE, self.body.next()).await.expect("the end in time") {
            chunk.expect("the stream reads");
        }
    }

    /// The next event (comments skipped): its id and data.
    async fn event(&mut self) -> (Option<String>, Value) {
        loop {
            if let Frame::Event(id, data) = self.frame().await {
                return (id, data);
            }
        }
    }

    async fn until_live(&mut self) -> Vec<Value> {
        let mut replayed = Vec::new();
        loop {
            match self.frame().await {
                Frame::Comment(c) if c == "live" => return replayed,
                Frame::Comment(_) => {}
                Frame::Event(_, data) => replayed.push(data),
            }
        }
    }
}

#[tokio::test]
async fn events_come_in_order_with_their_ids_and_say_why() {
    let node = TestNode::start();
    let mut stream = Reader::open(&node, "/v1/events?type=cart", &[]).await;
    assert_eq!(stream.until_live().await, Vec::<Value>::new(), "a stream from now replays nothing");
    let mut region = node.region("cart", "a").await;
    region.home("s1").await;
    let (id, registered) = stream.event().await;
    assert_eq!(registered["kind"], "region-registered");
    assert_eq!(registered["region"], "a");
    let seq = registered["seq"].as_u64().unwrap();
    assert_eq!(id, Some(format!("1-{seq}")));
    let (id, homed) = stream.event().await;
    assert_eq!(id, Some(format!("1-{}", seq + 1)));
    assert_eq!(homed["kind"], "shard-homed");
    assert_eq!(
        (&homed["shardId"], &homed["region"], &homed["reason"]),
        (&"s1".into(), &"a".into(), &"strategy".into())
    );
    assert!(homed["strategy"].as_str().unwrap().starts_with("least-shard@"), "{homed}");
    assert_eq!(homed["type"], "cart");

    let (status, _) = node
        .request(Method::POST, "/v1/cluster/shards/cart/placements", Some(r#"{"shardId":"s1","target":"a"}"#))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, placed) = stream.event().await;
    assert_eq!((&placed["kind"], &placed["target"]), (&"placement-set".into(), &"a".into()));
    node.request(Method::POST, "/v1/cluster/regions/a/drain", None).await;
    let (_, drained) = stream.event().await;
    assert_eq!((&drained["kind"], &drained["region"]), (&"region-drained".into(), &"a".into()));
}

#[tokio::test]
async fn a_client_resumes_after_the_last_event_it_saw() {
    let node = TestNode::start();
    let mut region = node.region("cart", "a").await;
    for shard in ["1", "2", "3", "4"] {
        region.home(shard).await;
    }
    let mut everything = Reader::open(&node, "/v1/events?from=oldest", &[]).await;
    let replayed = everything.until_live().await;
    let kinds: Vec<&str> = replayed.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["strategy-activated", "region-registered", "shard-homed", "shard-homed", "shard-homed", "shard-homed"]
    );
    let seqs: Vec<u64> = replayed.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6], "numbered from 1 without gaps");

    let mut resumed = Reader::open(&node, "/v1/events", &[("last-event-id", "1-4")]).await;
    let (id, next) = resumed.event().await;
    assert_eq!((id.as_deref(), &next["shardId"]), (Some("1-5"), &"3".into()));
    assert_eq!(resumed.event().await.0.as_deref(), Some("1-6"));

    // Another term's id: the client is told it missed events, then gets all kept.
    let mut stale = Reader::open(&node, "/v1/events", &[("last-event-id", "9-3")]).await;
    let (id, missed) = stale.event().await;
    assert_eq!((id, &missed["kind"], &missed["missed"]), (None, &"missed".into(), &0.into()));
    assert_eq!(stale.event().await.0.as_deref(), Some("1-1"));
}

#[tokio::test]
async fn a_resume_from_before_a_restart_is_told_it_missed_events() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::on_disk(dir.path());
    let mut region = node.region("cart", "a").await;
    region.home("s1").await;
    let mut everything = Reader::open(&node, "/v1/events?from=oldest", &[]).await;
    everything.until_live().await;
    let mut live = Reader::open(&node, "/v1/events", &[]).await;
    live.until_live().await;
    region.home("s2").await;
    let (before, _) = live.event().await;
    let before = before.expect("an event has an id");
    drop((region, everything, live));
    node.stop().await;

    // The same store, a new start: new events, numbered from 1 again.
    let node = TestNode::on_disk(dir.path());
    let mut region = node.region("cart", "b").await;
    region.home("s3").await;
    let mut resumed = Reader::open(&node, "/v1/events", &[("last-event-id", &before)]).await;
    let (id, first) = resumed.event().await;
    assert_eq!((id, &first["kind"]), (None, &"missed".into()), "a resume from {before} got {first}");
    let (id, _) = resumed.event().await;
    let id = id.expect("an event has an id");
    assert_ne!(id.split('-').next(), before.split('-').next(), "the new start's term is the old one's: {id}");
}

#[tokio::test]
async fn a_slow_client_is_told_what_it_missed_and_never_slows_the_node() {
    let node = TestNode::start();
    let mut slow = Reader::open(&node, "/v1/events", &[]).await;
    assert!(slow.until_live().await.is_empty());
    // More placement changes than the backlog keeps, while the client reads nothing.
    let total = BACKLOG + 1_500;
    let started = std::time::Instant::now();
    for chunk in (0..total).collect::<Vec<_>>().chunks(5_000) {
        let placements: Vec<Value> =
            chunk.iter().map(|i| serde_json::json!({"shardId": format!("s{i}"), "target": "b"})).collect();
        let body = serde_json::json!({ "placements": placements }).to_string();
        let (status, answer) = node.request(Method::POST, "/v1/cluster/shards/cart/placements", Some(&body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(300), "the writes waited for the stream");
    // It took nothing while a whole backlog was published (the writes
    // publish a slice's events per turn): dropped, it resumes where it was
    // and is told what it missed.
    slow.ends().await;
    let mut slow = Reader::open(&node, "/v1/events", &[("last-event-id", "1-1")]).await;
    let (id, missed) = slow.event().await;
    assert_eq!(id, None);
    assert_eq!((&missed["kind"], &missed["missed"]), (&"missed".into(), &1_500.into()), "{missed}");
    let (id, next) = slow.event().await;
    assert_eq!(id.as_deref(), Some("1-1502"), "{next}");
    assert_eq!(next["shardId"], "s1500");
}

#[tokio::test]
async fn bad_stream_requests_are_named() {
    let node = TestNode::start();
    let unknown = node.request(Method::GET, "/v1/events?type=nope", None).await;
    assert_eq!(assert_error("unknown type", &unknown, StatusCode::NOT_FOUND), "unknown-type");
    let answer = node
        .send(axum::http::Request::get("/v1/events").header("last-event-id", "yesterday").body(Body::empty()).unwrap())
        .await;
    assert_eq!(assert_error("bad id", &answer, StatusCode::BAD_REQUEST), "invalid-last-event-id");
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("<term>-<seq>"), "{}", answer.1);
    let answer = node.request(Method::GET, "/v1/events?from=tomorrow", None).await;
    assert_eq!(assert_error("bad from", &answer, StatusCode::BAD_REQUEST), "invalid-query");
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("`now` or `oldest`"), "{}", answer.1);
}

#[tokio::test]
async fn a_quiet_stream_gets_a_comment_every_fifteen_seconds() {
    let node = TestNode::start();
    let mut stream = Reader::open(&node, "/v1/events?type=cart", &[]).await;
    assert!(stream.until_live().await.is_empty());
    let started = std::time::Instant::now();
    assert_eq!(stream.frame().await, Frame::Comment("keep-alive".into()));
    let waited = started.elapsed();
    assert!(waited >= crate::server::events::KEEP_ALIVE - Duration::from_secs(1), "after {waited:?}");
}

#[tokio::test]
async fn streams_past_the_cap_get_429_with_retry_after_until_one_ends() {
    let limits = crate::server::conn::ConnectionLimits { max_event_streams: 2, ..Default::default() };
    let node = TestNode::with_connections(super::settings_with(&["cart"]), Default::default(), limits);
    let first = Reader::open(&node, "/v1/events", &[]).await;
    let _second = Reader::open(&node, "/v1/events?from=oldest", &[]).await;
    let refused = node.open("/v1/events", &[]).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body = axum::body::to_bytes(refused.into_body(), usize::MAX).await.unwrap();
    let answer = (StatusCode::TOO_MANY_REQUESTS, serde_json::from_slice(&body).expect("a JSON body"));
    assert_eq!(assert_error("past the cap", &answer, StatusCode::TOO_MANY_REQUESTS), "too-many-streams");
    drop(first);
    Reader::open(&node, "/v1/events", &[]).await;
}

/// Places shards `s<i>` for each `i` in `shards` on `b`, one
/// `placement-set` event each.
async fn place(node: &TestNode, shards: std::ops::Range<usize>) {
    let placements: Vec<Value> =
        shards.map(|i| serde_json::json!({"shardId": format!("s{i}"), "target": "b"})).collect();
    let body = serde_json::json!({ "placements": placements }).to_string();
    let (status, answer) = node.request(Method::POST, "/v1/cluster/shards/cart/placements", Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

/// Asserts `path` with `headers` is refused with `429 replays-busy`.
async fn assert_replays_busy(node: &TestNode, path: &str, headers: &[(&str, &str)]) {
    let refused = node.open(path, headers).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{path} {headers:?}");
    assert_eq!(refused.headers()["retry-after"], "5");
    let body = axum::body::to_bytes(refused.into_body(), usize::MAX).await.unwrap();
    let answer = (StatusCode::TOO_MANY_REQUESTS, serde_json::from_slice(&body).expect("a JSON body"));
    assert_eq!(assert_error("a replay too many", &answer, StatusCode::TOO_MANY_REQUESTS), "replays-busy");
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("{MAX_REPLAYS} event streams are replaying")), "{message}");
}

#[tokio::test]
async fn replays_past_the_limit_get_429_until_one_reaches_live() {
    let node = TestNode::start();
    // More events than a stream may start behind without replaying: the
    // strategy's activation (1), then one placement each.
    let placed = REPLAY_FREE as usize + 100;
    place(&node, 0..placed).await;
    let newest = 1 + placed;
    let mut replaying = Vec::new();
    for _ in 0..MAX_REPLAYS {
        replaying.push(Reader::open(&node, "/v1/events?from=oldest", &[]).await);
    }
    assert_replays_busy(&node, "/v1/events?from=oldest", &[]).await;
    assert_replays_busy(&node, "/v1/events?type=cart&from=oldest", &[]).await;
    assert_replays_busy(&node, "/v1/events", &[("last-event-id", "1-1")]).await;
    assert_replays_busy(&node, "/v1/events", &[("last-event-id", "7-1")]).await;

    // A stream from now, or a resume a few events behind, is no replay.
    let mut now = Reader::open(&node, "/v1/events", &[]).await;
    assert!(now.until_live().await.is_empty());
    let a_few = format!("1-{}", newest - 5);
    let mut resumed = Reader::open(&node, "/v1/events", &[("last-event-id", &a_few)]).await;
    let shards: Vec<Value> = resumed.until_live().await.into_iter().map(|e| e["shardId"].clone()).collect();
    let expected: Vec<Value> = (placed - 5..placed).map(|i| format!("s{i}").into()).collect();
    assert_eq!(shards, expected);
    let just_free = format!("1-{}", newest as u64 - REPLAY_FREE);
    Reader::open(&node, "/v1/events", &[("last-event-id", &just_free)]).await;

    // A replay read to live gives its permit back.
    let replayed = replaying[0].until_live().await;
    assert_eq!(replayed.len(), newest, "every event kept");
    assert_eq!(replayed.last().unwrap()["seq"], newest);
    let mut again = Reader::open(&node, "/v1/events?from=oldest", &[]).await;
    assert_replays_busy(&node, "/v1/events?from=oldest", &[]).await;
    // And so does one that ends.
    drop(replaying.pop());
    Reader::open(&node, "/v1/events?from=oldest", &[]).await;

    // The replay is all there, in order, then news.
    let seqs: Vec<u64> = again.until_live().await.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=newest as u64).collect::<Vec<_>>());
    place(&node, placed..placed + 1).await;
    let (id, news) = again.event().await;
    assert_eq!((id, &news["shardId"]), (Some(format!("1-{}", newest + 1)), &format!("s{placed}").into()));
}

/// A live stream that sent all there was waits [`GATHER`] before it takes
/// more: a node publishing at every turn wakes each stream a few times a
/// second, not once per turn (500 readers cut a node's writes to a
/// seventh, issue 41).
#[tokio::test]
async fn a_live_stream_takes_what_a_busy_node_publishes_a_few_times_a_second() {
    use crate::server::events::{CHUNK, GATHER};

    let node = TestNode::start();
    let mut stream = Reader::open(&node, "/v1/events", &[]).await;
    assert!(stream.until_live().await.is_empty());
    const EVENTS: usize = 60;
    let reader = tokio::spawn(async move {
        let mut arrivals = Vec::new();
        let mut events = 0;
        while events < EVENTS {
            let chunk = tokio::time::timeout(PATIENCE, stream.body.next())
                .await
                .expect("a chunk in time")
                .expect("the stream goes on")
                .expect("the stream reads");
            events += std::str::from_utf8(&chunk).unwrap().matches("data: ").count();
            arrivals.push((std::time::Instant::now(), chunk.len()));
        }
        arrivals
    });
    // One placement a turn, each turn publishing its event.
    for i in 0..EVENTS {
        place(&node, i..i + 1).await;
    }
    let arrivals = reader.await.unwrap();
    for (i, pair) in arrivals.windows(2).enumerate() {
        let gap = pair[1].0 - pair[0].0;
        // A chunk that is not nearly full took all there was, and the next
        // waited (a full one may have left events behind: the next goes at
        // once). Half of GATHER: the client's own scheduling may delay one
        // arrival and not the next.
        let nearly_full = pair[0].1 + 1_024 > CHUNK;
        assert!(nearly_full || gap >= GATHER / 2, "chunk {} came {gap:?} after the one before", i + 1);
    }
    assert!(arrivals.len() < EVENTS, "{} events came in {} chunks", EVENTS, arrivals.len());
}
