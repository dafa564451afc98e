//! No cross-site writes: an `Origin` that is not the node's own is refused
//! on writes and WebSocket upgrades, bodies must say what they are, no
//! CORS header is ever sent, every answer says `nosniff`, and a node
//! without an admin token answers only requests addressed to it (`Host`).

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;

use super::{TestNode, assert_error, settings_with};
use crate::server::guard::OwnOrigins;
use crate::server::state::Security;

const PLACEMENTS: &str = "/v1/cluster/shards/cart/placements";
const BODY: &str = r#"{"shardId":"42","target":"b"}"#;

fn node() -> TestNode {
    let origins = OwnOrigins::new("127.0.0.1:7878".parse().unwrap(), None, &[]);
    TestNode::with(settings_with(&["cart"]), Security { origins, ..Security::default() })
}

fn post(content_type: Option<&str>, origin: Option<&str>) -> Request<Body> {
    let mut request = Request::post(PLACEMENTS);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.body(Body::from(BODY)).unwrap()
}

#[tokio::test]
async fn a_web_page_cannot_write() {
    let node = node();
    let cases = [
        ("a text/plain form post from another site", post(Some("text/plain"), Some("http://evil.example"))),
        ("JSON from another site", post(Some("application/json"), Some("http://evil.example"))),
        ("an opaque origin", post(Some("application/json"), Some("null"))),
        ("another port on loopback", post(Some("application/json"), Some("http://127.0.0.1:9999"))),
    ];
    for (what, request) in cases {
        assert_eq!(assert_error(what, &node.send(request).await, StatusCode::FORBIDDEN), "cross-origin");
    }
    let delete =
        Request::delete(format!("{PLACEMENTS}/42")).header("origin", "http://evil.example").body(Body::empty());
    assert_error("a DELETE from another site", &node.send(delete.unwrap()).await, StatusCode::FORBIDDEN);
    let upgrade = Request::get("/v1/regions/connect")
        .header("origin", "http://evil.example")
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(Body::empty());
    assert_error("a WebSocket from another site", &node.send(upgrade.unwrap()).await, StatusCode::FORBIDDEN);
    // Nothing was written.
    let (_, placements) = node.request(Method::GET, PLACEMENTS, None).await;
    assert_eq!(placements["placements"], Value::Array(vec![]), "{placements}");

    // The node's own page may write; a client without Origin too.
    let own = node.send(post(Some("application/json"), Some("http://localhost:7878"))).await;
    assert_eq!(own.0, StatusCode::OK, "{}", own.1);
    let cli = node.send(post(Some("application/json; charset=utf-8"), None)).await;
    assert_eq!(cli.0, StatusCode::OK, "{}", cli.1);
    // Reads from another origin pass (a browser shows them to nobody: no CORS headers).
    let read = Request::get(PLACEMENTS).header("origin", "http://evil.example").body(Body::empty()).unwrap();
    assert_eq!(node.send(read).await.0, StatusCode::OK);
}

#[tokio::test]
async fn bodies_must_say_what_they_are() {
    let node = node();
    for (what, content_type) in [
        ("no content type", None),
        ("text/plain", Some("text/plain")),
        ("a form", Some("application/x-www-form-urlencoded")),
    ] {
        let answer = node.send(post(content_type, None)).await;
        assert_eq!(assert_error(what, &answer, StatusCode::UNSUPPORTED_MEDIA_TYPE), "unsupported-media-type");
    }
    let upload = Request::post("/v1/strategies").header("content-type", "application/json").body(Body::from("x"));
    let answer = node.send(upload.unwrap()).await;
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("application/wasm"), "{}", answer.1);
    assert_error("an upload sent as JSON", &answer, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Body-less writes need no content type.
    let _region = node.region("cart", "a").await;
    let drain = Request::post("/v1/cluster/regions/a/drain").body(Body::empty()).unwrap();
    assert_eq!(node.send(drain).await.0, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn no_cors_header_is_ever_sent() {
    let node = node();
    let preflight = Request::builder()
        .method(Method::OPTIONS)
        .uri(PLACEMENTS)
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST")
        .body(Body::empty())
        .unwrap();
    use tower::ServiceExt;
    for request in
        [preflight, Request::get(PLACEMENTS).header("origin", "http://evil.example").body(Body::empty()).unwrap()]
    {
        let response = node.router.clone().oneshot(request).await.unwrap();
        let cors: Vec<_> = response.headers().keys().filter(|k| k.as_str().starts_with("access-control-")).collect();
        assert!(cors.is_empty(), "CORS headers were sent: {cors:?}");
    }
}

#[tokio::test]
async fn every_answer_says_nosniff() {
    use tower::ServiceExt;
    let node = node();
    let long = format!("/v1/cluster/shards?x={}", "a".repeat(9_000));
    let requests = [
        Request::get("/healthz").body(Body::empty()).unwrap(),
        Request::get("/metrics").body(Body::empty()).unwrap(),
        Request::get("/ui/").body(Body::empty()).unwrap(),
        Request::get("/ui/app.js").body(Body::empty()).unwrap(),
        Request::get("/no/such/thing").body(Body::empty()).unwrap(),
        Request::get(long.as_str()).body(Body::empty()).unwrap(),
        Request::get(PLACEMENTS).body(Body::empty()).unwrap(),
        post(Some("text/plain"), None),
        Request::get("/v1/events").body(Body::empty()).unwrap(),
    ];
    for request in requests {
        let target = request.uri().path().to_owned();
        let response = node.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        assert_eq!(
            response.headers().get("x-content-type-options").map(|v| v.as_bytes()),
            Some(&b"nosniff"[..]),
            "{target} ({status}) has no nosniff"
        );
    }
}

#[tokio::test]
async fn a_node_without_a_token_answers_only_requests_addressed_to_it() {
    let node = node();
    let get = |path: &str, host: Option<&str>| {
        let mut request = Request::get(path);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        request.body(Body::empty()).unwrap()
    };
    for path in [PLACEMENTS, "/v1/events", "/ui/", "/healthz"] {
        for host in ["evil.example:7878", "evil.example", "localhost", "127.0.0.1:9999"] {
            let answer = node.send(get(path, Some(host))).await;
            assert_eq!(assert_error(host, &answer, StatusCode::MISDIRECTED_REQUEST), "unknown-host");
            assert!(answer.1["error"]["message"].as_str().unwrap().contains(host), "{}", answer.1);
        }
    }
    for host in [Some("127.0.0.1:7878"), Some("localhost:7878"), Some("[::1]:7878"), None] {
        assert_eq!(node.send(get(PLACEMENTS, host)).await.0, StatusCode::OK, "{host:?}");
    }
    // With an admin token, the token guards the node: any Host may ask.
    let origins = OwnOrigins::new("127.0.0.1:7878".parse().unwrap(), None, &[]);
    let guarded = TestNode::with(
        settings_with(&["cart"]),
        Security { admin_token: Some("T".into()), origins, ..Security::default() },
    );
    let request = Request::get(PLACEMENTS).header("host", "evil.example").header("authorization", "Bearer T");
    assert_eq!(guarded.send(request.body(Body::empty()).unwrap()).await.0, StatusCode::OK);
}
