//! The admin REST API of the real node (`shardalloc serve` as a child
//! process): placements (external allocation), every bad input's status and
//! error body, rebalance requests, tokens, the loopback guard, and the
//! snapshot as `shardalloc strategy eval` reads it.

mod node;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shardalloc_client::region::InMemoryTransport;

use node::{Journal, Node, assert_error, registered, run_binary};

const PLACEMENTS: &str = "/v1/cluster/shards/cart/placements";

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_is_set_listed_persisted_and_removed() {
    let mut node = Node::start(&["--type", "cart"]).await;
    let answer = node.request(Method::POST, PLACEMENTS, Some(r#"{"shardId":42,"target":"b"}"#)).await;
    assert_eq!(answer, (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}]})));
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}]}))
    );
    let (status, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_eq!(status, StatusCode::OK, "{shard}");
    assert_eq!(shard["placement"], "b", "{shard}");

    // Durable: a restart on the same data directory still has it.
    let exit = node.terminate().await;
    assert!(exit.success(), "SIGTERM: the node exited with {exit}");
    node.restart().await;
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}]})),
        "the placement did not survive a restart"
    );

    let (status, body) = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_eq!((status, &body), (StatusCode::NO_CONTENT, &Value::Null));
    let again = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_error("DELETE of a removed placement", &again, StatusCode::NOT_FOUND);
    assert_eq!(node.request(Method::GET, PLACEMENTS, None).await, (StatusCode::OK, json!({"placements":[]})));
    // The admin client reads the same.
    assert!(!node.admin().remove_placement("cart", "42").await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_placements_is_all_or_nothing() {
    let node = Node::start(&["--type", "cart"]).await;
    let first = node.request(Method::POST, PLACEMENTS, Some(r#"{"shardId":"1","target":"a"}"#)).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    let before = json!({"placements":[{"shardId":"1","target":"a"}]});
    let bad_batches = [
        ("an empty shard id", r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":"","target":"c"}]}"#),
        ("a float shard id", r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":3.5,"target":"c"}]}"#),
        ("an empty target", r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":3,"target":""}]}"#),
        ("a missing target", r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":3}]}"#),
        ("a duplicate shard", r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":"2","target":"c"}]}"#),
        ("an overwrite plus a bad id", r#"{"placements":[{"shardId":1,"target":"z"},{"shardId":"","target":"c"}]}"#),
        ("an empty batch", r#"{"placements":[]}"#),
        ("fields beside placements", r#"{"placements":[{"shardId":2,"target":"b"}],"x":1}"#),
    ];
    for (what, body) in bad_batches {
        let answer = node.request(Method::POST, PLACEMENTS, Some(body)).await;
        assert_error(&format!("a batch with {what}"), &answer, StatusCode::BAD_REQUEST);
        assert_eq!(
            node.request(Method::GET, PLACEMENTS, None).await,
            (StatusCode::OK, before.clone()),
            "a refused batch with {what} changed the placements"
        );
    }
    let good = r#"{"placements":[{"shardId":2,"target":"b"},{"shardId":"3","target":"c"},{"shardId":1,"target":"d"}]}"#;
    let (status, body) = node.request(Method::POST, PLACEMENTS, Some(good)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut listed: Vec<(String, String)> = body["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["shardId"].as_str().unwrap().to_owned(), p["target"].as_str().unwrap().to_owned()))
        .collect();
    listed.sort();
    let expected: Vec<(String, String)> =
        [("1", "d"), ("2", "b"), ("3", "c")].iter().map(|(s, t)| (s.to_string(), t.to_string())).collect();
    assert_eq!(listed, expected, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_input_gets_its_status_and_an_error_body() {
    let node = Node::start(&["--type", "cart"]).await;
    let long_id = "x".repeat(257);
    let longest_id = "y".repeat(256);
    let cases: Vec<(&str, Method, String, Option<String>, StatusCode)> = vec![
        ("malformed JSON", Method::POST, PLACEMENTS.into(), Some(r#"{"shardId":42,"#.into()), StatusCode::BAD_REQUEST),
        ("an empty body", Method::POST, PLACEMENTS.into(), Some(String::new()), StatusCode::BAD_REQUEST),
        ("a JSON array", Method::POST, PLACEMENTS.into(), Some("[1,2]".into()), StatusCode::BAD_REQUEST),
        (
            "a float shard id",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"shardId":4.5,"target":"b"}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a boolean shard id",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"shardId":true,"target":"b"}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "an empty shard id",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"shardId":"","target":"b"}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a 257-byte shard id",
            Method::POST,
            PLACEMENTS.into(),
            Some(json!({"shardId": long_id, "target": "b"}).to_string()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "an empty shard id in a dry run",
            Method::POST,
            "/v1/cluster/shards/cart/strategy/dry-run".into(),
            Some(r#"{"strategy":"hash","shardIds":[""]}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "an unknown field",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"shardId":1,"target":"b","weight":3}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a 257-byte target",
            Method::POST,
            PLACEMENTS.into(),
            Some(json!({"shardId": 1, "target": "t".repeat(257)}).to_string()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a 257-byte shard id in the path",
            Method::DELETE,
            format!("{PLACEMENTS}/{long_id}"),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            "a placement for an unknown type",
            Method::POST,
            "/v1/cluster/shards/nope/placements".into(),
            Some(r#"{"shardId":1,"target":"b"}"#.into()),
            StatusCode::NOT_FOUND,
        ),
        ("an unknown type", Method::GET, "/v1/cluster/shards/nope".into(), None, StatusCode::NOT_FOUND),
        (
            "the strategy of an unknown type",
            Method::GET,
            "/v1/cluster/shards/nope/strategy".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            "draining an unknown region",
            Method::POST,
            "/v1/cluster/regions/nowhere/drain".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            "undraining an unknown region",
            Method::DELETE,
            "/v1/cluster/regions/nowhere/drain".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        ("an unknown /v1 route", Method::GET, "/v1/nope".into(), None, StatusCode::NOT_FOUND),
        ("an unknown route", Method::GET, "/nope".into(), None, StatusCode::NOT_FOUND),
        ("a shard without a home", Method::GET, "/v1/cluster/shards/cart/shards/7".into(), None, StatusCode::NOT_FOUND),
        ("removing a placement never set", Method::DELETE, format!("{PLACEMENTS}/7"), None, StatusCode::NOT_FOUND),
        ("an unknown strategy digest", Method::DELETE, "/v1/strategies/sha256:00".into(), None, StatusCode::NOT_FOUND),
        (
            "activating an unknown strategy",
            Method::PUT,
            "/v1/cluster/shards/cart/strategy".into(),
            Some(r#"{"strategy":"no-such-strategy"}"#.into()),
            StatusCode::NOT_FOUND,
        ),
        (
            "a rebalance of no shards",
            Method::POST,
            "/v1/cluster/shards/cart/rebalance".into(),
            Some(r#"{"shardIds":[]}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a rebalance with a float shard id",
            Method::POST,
            "/v1/cluster/shards/cart/rebalance".into(),
            Some(r#"{"shardIds":[1.5]}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a rebalance with an empty shard id",
            Method::POST,
            "/v1/cluster/shards/cart/rebalance".into(),
            Some(r#"{"shardIds":[""]}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a rebalance of an unknown type",
            Method::POST,
            "/v1/cluster/shards/nope/rebalance".into(),
            Some(r#"{"shardIds":[1]}"#.into()),
            StatusCode::NOT_FOUND,
        ),
        (
            "a malformed signal",
            Method::PUT,
            "/v1/cluster/shards/cart/signal".into(),
            Some("{bad".into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a signal over 1 MiB",
            Method::PUT,
            "/v1/cluster/shards/cart/signal".into(),
            Some(json!({"x": "a".repeat(1 << 20)}).to_string()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a signal for an unknown type",
            Method::PUT,
            "/v1/cluster/shards/nope/signal".into(),
            Some("null".into()),
            StatusCode::NOT_FOUND,
        ),
        ("an empty upload", Method::POST, "/v1/strategies".into(), Some(String::new()), StatusCode::BAD_REQUEST),
        (
            "an upload that is not a component",
            Method::POST,
            "/v1/strategies".into(),
            Some("not wasm at all".into()),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "a rollback without a previous strategy",
            Method::POST,
            "/v1/cluster/shards/cart/strategy/rollback".into(),
            None,
            StatusCode::CONFLICT,
        ),
    ];
    let mut failures = Vec::new();
    for (what, method, path, body, status) in cases {
        let answer = node.request(method.clone(), &path, body.as_deref()).await;
        let shape_ok = answer.1["error"]["code"].as_str().is_some_and(|c| !c.is_empty())
            && answer.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty());
        if answer.0 != status || !shape_ok {
            let path: String = path.chars().take(80).collect();
            failures.push(format!(
                "{what}: {method} {path}: expected {status} with an error body, got {} {}",
                answer.0, answer.1
            ));
        }
    }
    assert!(failures.is_empty(), "{} bad inputs were answered wrongly:\n{}", failures.len(), failures.join("\n"));

    // Nothing was changed by any of them; the boundary itself is accepted.
    assert_eq!(node.request(Method::GET, PLACEMENTS, None).await, (StatusCode::OK, json!({"placements":[]})));
    let answer =
        node.request(Method::POST, PLACEMENTS, Some(&json!({"shardId": longest_id, "target": "b"}).to_string())).await;
    assert_eq!(answer.0, StatusCode::OK, "a 256-byte shard id: {}", answer.1);
}

/// openapi.json: errors answer `{"error":{"code","message"}}`; only a
/// signal's or an upload's 413 and WebSocket upgrade failures are plain text.
/// A wrong method and an undecodable path segment are neither.
#[tokio::test(flavor = "multi_thread")]
async fn failures_outside_the_handlers_still_answer_an_error_body() {
    let node = Node::start(&["--type", "cart"]).await;
    let cases = [
        ("a wrong method on a known path", Method::PUT, "/v1/cluster/shards", StatusCode::METHOD_NOT_ALLOWED),
        ("a wrong method on placements", Method::DELETE, PLACEMENTS, StatusCode::METHOD_NOT_ALLOWED),
        ("invalid UTF-8 in a type", Method::GET, "/v1/cluster/shards/%FF", StatusCode::BAD_REQUEST),
        ("invalid UTF-8 in a shard id", Method::GET, "/v1/cluster/shards/cart/shards/%FF", StatusCode::BAD_REQUEST),
    ];
    let mut failures = Vec::new();
    for (what, method, path, status) in cases {
        let answer = node.request(method.clone(), path, None).await;
        let shape_ok = answer.1["error"]["code"].as_str().is_some_and(|c| !c.is_empty())
            && answer.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty());
        if answer.0 != status || !shape_ok {
            failures.push(format!(
                "{what}: {method} {path}: expected {status} with an error body, got {} {}",
                answer.0, answer.1
            ));
        }
    }
    assert!(failures.is_empty(), "{} answers without an error body:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_over_four_mib_are_refused_with_413() {
    let node = Node::start(&["--type", "cart"]).await;
    let limit = 4 << 20;
    // Exactly at the limit: a valid placement padded with whitespace is read.
    let valid = r#"{"shardId":"big","target":"b"}"#;
    let at_limit = format!("{valid}{}", " ".repeat(limit - valid.len()));
    assert_eq!(at_limit.len(), limit);
    let answer = node.request(Method::POST, PLACEMENTS, Some(&at_limit)).await;
    assert_eq!(answer.0, StatusCode::OK, "a body of exactly 4 MiB: {}", answer.1);
    // One byte more is too large, on every JSON endpoint.
    let over = format!("{valid}{}", " ".repeat(limit + 1 - valid.len()));
    for path in [PLACEMENTS, "/v1/cluster/shards/cart/rebalance", "/v1/cluster/shards/cart/strategy/dry-run"] {
        let answer = node.request(Method::POST, path, Some(&over)).await;
        assert_error(&format!("a body of 4 MiB + 1 byte to {path}"), &answer, StatusCode::PAYLOAD_TOO_LARGE);
    }
    // A signal's and an upload's 413 have plain-text bodies (documented in openapi.json).
    let answer = node.request(Method::PUT, "/v1/cluster/shards/cart/signal", Some(&over)).await;
    assert_eq!(answer.0, StatusCode::PAYLOAD_TOO_LARGE, "a signal of 4 MiB + 1 byte: {}", answer.1);
    let upload = node.http().post(node.url("/v1/strategies")).body(vec![0u8; (32 << 20) + 1]).send().await;
    match upload {
        Ok(response) => {
            let answer = node::read(response).await;
            assert_eq!(answer.0, StatusCode::PAYLOAD_TOO_LARGE, "an upload of 32 MiB + 1 byte: {}", answer.1);
        }
        // The node may answer and close while the client still sends.
        Err(error) => assert!(error.is_request() || error.is_body(), "an upload of 32 MiB + 1 byte: {error}"),
    }
    // Without a content length (chunked), the limit holds too.
    let answer = chunked_post(&node, PLACEMENTS, &[valid.as_bytes(), &vec![b' '; limit + 1 - valid.len()]]).await;
    assert_error("a chunked body of 4 MiB + 1 byte", &answer, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"big","target":"b"}]}))
    );
}

/// POSTs `chunks` with `Transfer-Encoding: chunked` over a raw connection
/// (reqwest has no streaming bodies here); the answer's status and JSON body.
async fn chunked_post(node: &Node, path: &str, chunks: &[&[u8]]) -> (StatusCode, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        node.addr
    );
    let mut request = head.into_bytes();
    for chunk in chunks {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The node may answer and close before it read everything: a failed write is fine.
    let _ = stream.write_all(&request).await;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("an answer within 30 s")
        .ok();
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        // One chunk is enough for an error body.
        body.split("\r\n").nth(1).unwrap_or_default().to_owned()
    } else {
        body.to_owned()
    };
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (StatusCode::from_u16(status).unwrap(), body)
}

#[tokio::test(flavor = "multi_thread")]
async fn rebalance_answers_202_with_accepted_and_rejected_reasons() {
    // No periodic rebalance during the test: queued shards stay queued.
    let node = Node::start(&["--type", "cart", "--rebalance-interval-ms", "600000"]).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let region = node.region("cart", "a", &journal, &network, |_| {});
    registered(&region).await;
    let home = tokio::time::timeout(Duration::from_secs(30), region.home_of("42")).await.unwrap().unwrap();
    assert_eq!(home, "a");
    let body = r#"{"shardIds":[42,43],"immediate":false}"#;
    let (status, answer) = node.request(Method::POST, "/v1/cluster/shards/cart/rebalance", Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer, json!({"accepted":["42"],"rejected":[{"shardId":"43","reason":"unknown"}]}));
    let (status, answer) = node.request(Method::POST, "/v1/cluster/shards/cart/rebalance", Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(
        answer,
        json!({"accepted": [], "rejected": [
            {"shardId": "42", "reason": "already-moving"},
            {"shardId": "43", "reason": "unknown"},
        ]})
    );
    region.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_token_guards_v1_but_not_health() {
    let node = Node::start(&["--type", "cart", "--admin-token", "secret"]).await;
    let url = node.url("/v1/cluster/shards");
    let http = node.http();
    for (what, header) in [
        ("no token", None),
        ("a wrong token", Some("Bearer wrong")),
        ("the token as Basic", Some("Basic secret")),
        ("a token prefix", Some("Bearer secre")),
        ("a longer token", Some("Bearer secrets")),
    ] {
        let mut request = http.get(&url);
        if let Some(header) = header {
            request = request.header("authorization", header);
        }
        let answer = node::read(request.send().await.unwrap()).await;
        assert_error(&format!("/v1 with {what}"), &answer, StatusCode::UNAUTHORIZED);
    }
    let post = http.post(node.url(PLACEMENTS)).body(r#"{"shardId":1,"target":"b"}"#).send().await.unwrap();
    assert_error("a placement without the token", &node::read(post).await, StatusCode::UNAUTHORIZED);

    let (status, body) = node::read(http.get(&url).bearer_auth("secret").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["types"][0]["name"], "cart", "{body}");
    let types = node.admin_with("secret").types().await.unwrap();
    assert_eq!(types.types.len(), 1);
    assert!(node.admin().types().await.is_err(), "the admin client without a token was served");
    // Nothing without the token was applied.
    assert!(node.admin_with("secret").placements("cart").await.unwrap().placements.is_empty());

    let (status, body) = node::read(http.get(node.url("/healthz")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "/healthz without a token: {body}");
    let (status, body) = node::read(http.get(node.url("/metrics")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "/metrics without a token: {body}");
    // Not ready (no region yet), but not refused for the token either.
    let answer = node::read(http.get(node.url("/readyz")).send().await.unwrap()).await;
    assert_error("/readyz without a token and without regions", &answer, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_the_regions() {
    let node = Node::start(&["--type", "cart"]).await;
    let answer = node.request(Method::GET, "/readyz", None).await;
    let code = assert_error("/readyz without regions", &answer, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "not-ready");
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let region = node.region("cart", "a", &journal, &network, |_| {});
    registered(&region).await;
    let (status, body) = node.request(Method::GET, "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "/readyz with a region: {body}");
    let (status, body) = node.request(Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let text = body.as_str().unwrap_or_default();
    assert!(text.contains("# EOF"), "not OpenMetrics text: {text}");
    region.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn listening_beyond_loopback_without_an_admin_token_is_refused() {
    let data = node::scratch();
    let data = data.path().to_str().unwrap().to_owned();
    let (code, stdout, stderr) =
        run_binary(&["serve", "--listen", "0.0.0.0:0", "--data", &data], Duration::from_secs(60)).await;
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}; stdout {stdout}; stderr {stderr}");
    assert!(!stdout.contains("listening"), "it listened: {stdout}");
    assert!(
        stderr.contains("without an admin token") && stderr.contains("0.0.0.0"),
        "the refusal does not say why: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_snapshot_is_what_strategy_eval_reads() {
    let node = Node::start(&["--type", "cart"]).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    for shard in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        tokio::time::timeout(Duration::from_secs(30), a.home_of(shard)).await.unwrap().unwrap();
    }
    let admin = node.admin();
    admin.set_placement("cart", "p", "b").await.unwrap();
    let (status, snapshot) = node.request(Method::GET, "/v1/cluster/shards/cart/snapshot", None).await;
    assert_eq!(status, StatusCode::OK, "{snapshot}");
    let mut addresses: Vec<&str> =
        snapshot["regions"].as_array().unwrap().iter().map(|r| r["address"].as_str().unwrap()).collect();
    addresses.sort();
    assert_eq!(addresses, ["a", "b"], "{snapshot}");
    let shards: usize =
        snapshot["regions"].as_array().unwrap().iter().map(|r| r["shards"].as_array().unwrap().len()).sum();
    assert_eq!(shards, 6, "{snapshot}");
    assert_eq!(snapshot["placements"], json!({"p":"b"}), "{snapshot}");

    let dir = node::scratch();
    let file = node::path_in(&dir, "snapshot.json");
    std::fs::write(&file, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    let file = file.to_str().unwrap();
    let eval = async |args: &[&str]| {
        let mut all = vec!["strategy", "eval", "--snapshot", file];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = run_binary(&all, Duration::from_secs(120)).await;
        assert_eq!(code, Some(0), "strategy eval {args:?} failed: {stderr}");
        serde_json::from_str::<Value>(stdout.trim()).unwrap_or_else(|e| panic!("{stdout}: {e}"))
    };
    assert_eq!(eval(&["allocate", "--shard", "p"]).await, json!({"region":"b"}), "the placement is not honoured");
    let fresh = eval(&["allocate", "--shard", "fresh", "--requester", "a"]).await;
    assert!(["a", "b"].contains(&fresh["region"].as_str().unwrap_or_default()), "{fresh}");
    let rebalance = eval(&["rebalance"]).await;
    assert!(rebalance["shards"].is_array(), "{rebalance}");
    let hashed = eval(&["--strategy", "hash", "allocate", "--shard", "s1"]).await;
    assert!(hashed["region"].is_string(), "{hashed}");
    a.shutdown().await;
    b.shutdown().await;
}

/// Every path and method the OpenAPI document lists is a route of the node
/// (not the unknown-route or wrong-method answer), and the document is served.
#[tokio::test(flavor = "multi_thread")]
async fn every_documented_endpoint_exists() {
    let node = Node::start(&["--type", "cart"]).await;
    let (status, document) = node.request(Method::GET, "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let paths = document["paths"].as_object().expect("the document lists paths");
    assert!(paths.len() >= 15, "{} paths documented", paths.len());
    let mut checked = 0;
    for (path, item) in paths {
        let concrete = path
            .replace("{type}", "cart")
            .replace("{shardId}", "42")
            .replace("{digest}", "sha256:00")
            .replace("{address}", "sim-1");
        for method in ["get", "post", "put", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            if concrete == "/v1/regions/connect" {
                continue; // a WebSocket upgrade, checked by node_sessions
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let answer = node.request(method.clone(), &concrete, Some("{}")).await;
            let code = answer.1["error"]["code"].as_str().unwrap_or_default().to_owned();
            assert!(
                code != "no-route" && code != "method-not-allowed",
                "{method} {concrete} is documented but not routed: {answer:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} endpoints checked");
}
