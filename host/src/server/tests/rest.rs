//! Every REST endpoint in-process: success and error shapes, all-or-nothing
//! placements, body limits, tokens, readiness and rebalance answers. (The
//! node's own process, restarts and sockets are tested end to end under
//! `host/tests/`.)

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::{TestNode, assert_error, settings_with};
use crate::server::state::Security;

const PLACEMENTS: &str = "/v1/cluster/shards/cart/placements";

#[tokio::test]
async fn a_placement_is_set_listed_and_removed() {
    let node = TestNode::start();
    let answer = node.request(Method::POST, PLACEMENTS, Some(r#"{"shardId":42,"target":"b"}"#)).await;
    assert_eq!(answer, (StatusCode::OK, json!({"written":[{"shardId":"42","target":"b"}],"total":1})));
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}],"next":null}))
    );
    let (status, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_eq!(status, StatusCode::OK, "{shard}");
    assert_eq!(shard["placement"], "b", "{shard}");
    assert_eq!(shard["home"], Value::Null, "{shard}");
    let (status, body) = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_eq!((status, &body), (StatusCode::NO_CONTENT, &Value::Null));
    let again = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_eq!(assert_error("DELETE of a removed placement", &again, StatusCode::NOT_FOUND), "no-placement");
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[],"next":null}))
    );
}

#[tokio::test]
async fn a_batch_of_placements_is_all_or_nothing() {
    let node = TestNode::start();
    let first = node.request(Method::POST, PLACEMENTS, Some(r#"{"shardId":"1","target":"a"}"#)).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    let before = json!({"placements":[{"shardId":"1","target":"a"}],"next":null});
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
    assert_eq!(body["total"], 3, "{body}");
    let mut written: Vec<&str> =
        body["written"].as_array().unwrap().iter().map(|p| p["shardId"].as_str().unwrap()).collect();
    written.sort();
    assert_eq!(written, ["1", "2", "3"], "{body}");
    let (_, body) = node.request(Method::GET, PLACEMENTS, None).await;
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

#[tokio::test]
async fn every_bad_input_gets_its_status_and_an_error_body() {
    let node = TestNode::start();
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
            "a duplicate key",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"shardId":"1","target":"a","target":"b"}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a duplicate key in a nested object",
            Method::PUT,
            "/v1/cluster/shards/cart/signal".into(),
            Some(r#"{"zones":{"eu":1,"eu":2}}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a duplicate key in a batch",
            Method::POST,
            PLACEMENTS.into(),
            Some(r#"{"placements":[],"placements":[{"shardId":"1","target":"a"}]}"#.into()),
            StatusCode::BAD_REQUEST,
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
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[],"next":null}))
    );
    let answer =
        node.request(Method::POST, PLACEMENTS, Some(&json!({"shardId": longest_id, "target": "b"}).to_string())).await;
    assert_eq!(answer.0, StatusCode::OK, "a 256-byte shard id: {}", answer.1);
}

/// openapi.json: errors answer `{"error":{"code","message"}}`; only a
/// signal's or an upload's 413 and WebSocket upgrade failures are plain text.
/// A wrong method and an undecodable path segment are neither.
#[tokio::test]
async fn failures_outside_the_handlers_still_answer_an_error_body() {
    let node = TestNode::start();
    let cases = [
        ("a wrong method on a known path", Method::PUT, "/v1/cluster/shards", StatusCode::METHOD_NOT_ALLOWED),
        ("a wrong method on placements", Method::DELETE, PLACEMENTS, StatusCode::METHOD_NOT_ALLOWED),
        ("invalid UTF-8 in a type", Method::GET, "/v1/cluster/shards/%FF", StatusCode::BAD_REQUEST),
        ("invalid UTF-8 in a shard id", Method::GET, "/v1/cluster/shards/cart/shards/%FF", StatusCode::BAD_REQUEST),
        ("invalid UTF-8 in a dashboard file", Method::GET, "/ui/%FF", StatusCode::BAD_REQUEST),
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

#[tokio::test]
async fn bodies_over_four_mib_are_refused_with_413() {
    let node = TestNode::start();
    let limit = 4 << 20;
    // Exactly at the limit: a valid placement padded with whitespace is read.
    let valid = r#"{"shardId":"big","target":"b"}"#;
    let at_limit = format!("{valid}{}", " ".repeat(limit - valid.len()));
    assert_eq!(at_limit.len(), limit);
    let answer = node.request(Method::POST, PLACEMENTS, Some(&at_limit)).await;
    assert_eq!(answer.0, StatusCode::OK, "a body of exactly 4 MiB: {}", answer.1);
    // One byte more is too large, on every JSON endpoint.
    let over = format!("{valid}{}", " ".repeat(limit + 1 - valid.len()));
    for path in [
        PLACEMENTS,
        "/v1/cluster/shards/cart/rebalance",
        "/v1/cluster/shards/cart/strategy/dry-run",
        "/v1/cluster/shards/cart/signal",
        "/v1/cluster/shards/cart/strategy",
    ] {
        let method = if path.ends_with("signal") || path.ends_with("strategy") { Method::PUT } else { Method::POST };
        let answer = node.request(method, path, Some(&over)).await;
        assert_error(&format!("a body of 4 MiB + 1 byte to {path}"), &answer, StatusCode::PAYLOAD_TOO_LARGE);
    }
    let upload = Request::post("/v1/strategies")
        .header("content-type", "application/wasm")
        .body(Body::from(vec![0u8; (32 << 20) + 1]))
        .unwrap();
    assert_error("an upload of 32 MiB + 1 byte", &node.send(upload).await, StatusCode::PAYLOAD_TOO_LARGE);
    // Without a content length (chunked), the limit holds too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(valid.as_bytes().to_vec()), Ok(vec![b' '; limit + 1 - valid.len()])];
    let chunked = Request::post(PLACEMENTS)
        .header("content-type", "application/json")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    assert_error("a chunked body of 4 MiB + 1 byte", &node.send(chunked).await, StatusCode::PAYLOAD_TOO_LARGE);
    // Routes that read no body answer a declared oversized one with 413
    // too (they used to drop the connection).
    for path in ["/v1/cluster/shards/cart/strategy/rollback", "/v1/cluster/regions/a/drain"] {
        let big = Request::post(path)
            .header("content-type", "application/json")
            .header("content-length", (5 << 20).to_string())
            .body(Body::from(vec![b' '; 5 << 20]))
            .unwrap();
        let answer = node.send(big).await;
        assert_error(&format!("a body of 5 MiB to {path}"), &answer, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(answer.1["error"]["message"].as_str().unwrap_or("").contains("5242880"), "{}", answer.1);
    }
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"big","target":"b"}],"next":null}))
    );
}

#[tokio::test]
async fn rebalance_answers_202_with_accepted_and_rejected_reasons() {
    // No periodic rebalance during the test: queued shards stay queued.
    let mut settings = settings_with(&["cart"]);
    settings.coordinator.rebalance_interval_ms = 600_000;
    let node = TestNode::with(settings, Security::default());
    let mut region = node.region("cart", "a").await;
    assert_eq!(region.home("42").await, "a");
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
}

#[tokio::test]
async fn the_admin_token_guards_v1_but_not_health() {
    let security = Security { admin_token: Some("secret".into()), ..Security::default() };
    let node = TestNode::with(settings_with(&["cart"]), security);
    let get = |authorization: Option<&str>| {
        let mut request = Request::get("/v1/cluster/shards");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.body(Body::empty()).unwrap()
    };
    for (what, header) in [
        ("no token", None),
        ("a wrong token", Some("Bearer wrong")),
        ("the token as Basic", Some("Basic secret")),
        ("a token prefix", Some("Bearer secre")),
        ("a longer token", Some("Bearer secrets")),
    ] {
        assert_error(&format!("/v1 with {what}"), &node.send(get(header)).await, StatusCode::UNAUTHORIZED);
    }
    for (method, path) in [
        (Method::POST, PLACEMENTS),
        (Method::GET, "/v1/openapi.json"),
        (Method::GET, "/v1/no-such-route"),
        (Method::DELETE, "/v1/strategies/hash"),
    ] {
        let answer = node.request(method.clone(), path, Some(r#"{"shardId":1,"target":"b"}"#)).await;
        assert_error(&format!("{method} {path} without the token"), &answer, StatusCode::UNAUTHORIZED);
    }

    let (status, body) = node.send(get(Some("Bearer secret"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["types"][0]["name"], "cart", "{body}");
    let base = node.serve().await;
    let admin = shardalloc_client::admin::AdminClient::new(&base, Some("secret".into())).unwrap();
    assert_eq!(admin.types().await.unwrap().types.len(), 1);
    let anonymous = shardalloc_client::admin::AdminClient::new(&base, None).unwrap();
    assert!(anonymous.types().await.is_err(), "the admin client without a token was served");
    // Nothing without the token was applied.
    assert!(admin.placements("cart").await.unwrap().placements.is_empty());

    let (status, body) = node.request(Method::GET, "/healthz", None).await;
    assert_eq!((status, body), (StatusCode::OK, Value::String("ok\n".into())), "/healthz without a token");
    let (status, body) = node.request(Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "/metrics without a token: {body}");
    // Not ready (no region yet), but not refused for the token either.
    let answer = node.request(Method::GET, "/readyz", None).await;
    assert_error("/readyz without a token and without regions", &answer, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn readiness_follows_the_regions() {
    let node = TestNode::start();
    let answer = node.request(Method::GET, "/readyz", None).await;
    let code = assert_error("/readyz without regions", &answer, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "not-ready");
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("cart"), "{}", answer.1);
    let _region = node.region("cart", "a").await;
    let (status, body) = node.request(Method::GET, "/readyz", None).await;
    assert_eq!((status, &body), (StatusCode::OK, &Value::String("ready\n".into())), "/readyz with a region");
    let (status, body) = node.request(Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let text = body.as_str().unwrap_or_default();
    assert!(text.contains("# EOF"), "not OpenMetrics text: {text}");
    assert!(text.contains("shardalloc_region_sessions 1"), "{text}");
}

#[tokio::test]
async fn types_regions_shards_and_drain_answer_their_shapes() {
    let node = TestNode::start();
    let mut region = node.region("cart", "a").await;
    assert_eq!(region.home("7").await, "a");
    let (status, types) = node.request(Method::GET, "/v1/cluster/shards", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types["types"][0]["name"], "cart", "{types}");
    assert_eq!(types["types"][0]["regions"], 1, "{types}");
    assert_eq!(types["types"][0]["shards"], 1, "{types}");
    assert!(types["types"][0]["strategy"].as_str().unwrap().starts_with("least-shard@"), "{types}");

    let (status, state) = node.request(Method::GET, "/v1/cluster/shards/cart", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state["regions"][0]["address"], "a", "{state}");
    assert_eq!(state["regions"][0]["status"], "up", "{state}");
    assert_eq!(state["regions"][0]["shardCount"], 1, "{state}");
    assert_eq!(state["shards"], json!([{"shardId": "7", "region": "a", "reason": "strategy"}]), "{state}");
    assert_eq!((&state["handOffs"], &state["next"]), (&json!([]), &Value::Null), "{state}");
    assert_eq!(state["strategy"]["cause"], "initial", "{state}");
    assert_eq!(state["strategy"]["digest"], "least-shard", "{state}");

    let (status, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/7", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((&shard["home"], &shard["reason"], &shard["moving"]), (&json!("a"), &json!("strategy"), &json!(false)));
    assert!(shard["detail"].as_str().unwrap().starts_with("least-shard@"), "{shard}");

    let (status, snapshot) = node.request(Method::GET, "/v1/cluster/shards/cart/snapshot", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(snapshot["regions"][0]["shards"], json!(["7"]), "{snapshot}");

    let (status, regions) = node.request(Method::GET, "/v1/cluster/regions", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        regions,
        json!({"regions":[{"address":"a","types":{"cart":"up"},"shards":1,"draining":false}],"next":null})
    );
    let answer = node.request(Method::POST, "/v1/cluster/regions/a/drain", None).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
    let (_, regions) = node.request(Method::GET, "/v1/cluster/regions", None).await;
    assert_eq!(regions["regions"][0]["draining"], true, "{regions}");
    let answer = node.request(Method::DELETE, "/v1/cluster/regions/a/drain", None).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
    let (_, regions) = node.request(Method::GET, "/v1/cluster/regions", None).await;
    assert_eq!(regions["regions"][0]["draining"], false, "{regions}");

    let answer = node.request(Method::PUT, "/v1/cluster/shards/cart/signal", Some(r#"{"zone":"eu"}"#)).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
    let (_, snapshot) = node.request(Method::GET, "/v1/cluster/shards/cart/snapshot", None).await;
    assert_eq!(snapshot["signal"], json!({"zone":"eu"}), "{snapshot}");
    let answer = node.request(Method::PUT, "/v1/cluster/shards/cart/signal", Some("null")).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
}

#[tokio::test]
async fn shard_attributes_are_written_shown_and_refused_by_name() {
    let node = TestNode::start();
    let many = "/v1/cluster/shards/cart/attributes";
    let body = json!({"shards": {"42": {"tier": "gold", "tenant": "acme"}, "43": {"tenant": "globex"}, "44": {}}});
    let answer = node.request(Method::POST, many, Some(&body.to_string())).await;
    assert_eq!(answer, (StatusCode::OK, json!({"changed": ["42", "43"]})));
    // A shard with attributes and nothing else is known.
    let (status, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_eq!(status, StatusCode::OK, "{shard}");
    assert_eq!(shard["attributes"], json!({"tenant": "acme", "tier": "gold"}), "{shard}");
    assert_eq!(shard["home"], Value::Null, "{shard}");
    let one = "/v1/cluster/shards/cart/shards/43/attributes";
    assert_eq!(
        node.request(Method::PUT, one, Some(r#"{"tenant":"globex"}"#)).await,
        (StatusCode::OK, json!({"changed": []}))
    );
    assert_eq!(node.request(Method::PUT, one, Some("{}")).await, (StatusCode::OK, json!({"changed": ["43"]})));
    let gone = node.request(Method::GET, "/v1/cluster/shards/cart/shards/43", None).await;
    assert_eq!(assert_error("a shard whose attributes were cleared", &gone, StatusCode::NOT_FOUND), "unknown-shard");

    let seventeen: serde_json::Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(""))).collect();
    let too_many: Vec<Value> = (0..=10_000).map(|i| json!([i.to_string(), {}])).collect();
    let too_many: serde_json::Map<String, Value> =
        too_many.iter().map(|p| (p[0].as_str().unwrap().to_owned(), p[1].clone())).collect();
    let cases = [
        (
            "a key with a space",
            many,
            json!({"shards": {"1": {"a b": "x"}}}),
            "invalid-attributes",
            r#"shard "1": an attribute key"#,
        ),
        (
            "a value of 257 bytes",
            many,
            json!({"shards": {"1": {"k": "v".repeat(257)}}}),
            "invalid-attributes",
            "257 bytes",
        ),
        ("17 pairs", many, json!({"shards": {"1": seventeen}}), "invalid-attributes", "17 attributes"),
        ("10,001 shards", many, json!({"shards": too_many}), "invalid-attributes", "10001 shards named"),
        ("an empty shard id", many, json!({"shards": {"": {"k": "v"}}}), "invalid-shard-id", "shard:"),
        ("no shards", many, json!({"shards": {}}), "invalid-attributes", "no shards named"),
        ("a number as a value", many, json!({"shards": {"1": {"k": 1}}}), "invalid-body", "invalid JSON body"),
        ("a field beside shards", many, json!({"shards": {}, "x": 1}), "invalid-body", "unknown field"),
        ("a list for one shard", one, json!(["tenant"]), "invalid-body", "invalid JSON body"),
    ];
    for (what, path, body, code, says) in cases {
        let method = if path == one { Method::PUT } else { Method::POST };
        let answer = node.request(method, path, Some(&body.to_string())).await;
        assert_eq!(assert_error(what, &answer, StatusCode::BAD_REQUEST), code, "{what}: {}", answer.1);
        let message = answer.1["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {message}");
    }
    let unknown =
        node.request(Method::POST, "/v1/cluster/shards/nope/attributes", Some(r#"{"shards":{"1":{}}}"#)).await;
    assert_eq!(assert_error("an unknown type", &unknown, StatusCode::NOT_FOUND), "unknown-type");
    // Nothing refused was written.
    let (_, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_eq!(shard["attributes"], json!({"tenant": "acme", "tier": "gold"}), "{shard}");
    assert_eq!(node.request(Method::GET, "/v1/cluster/shards/cart/shards/1", None).await.0, StatusCode::NOT_FOUND);
}
