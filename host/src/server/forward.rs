//! A follower forwards admin calls to the leader and returns its answer,
//! so clients and load balancers need not know who leads.
//!
//! - Forwarded: every `/v1/…` call but `GET /v1/cluster/leader` (each node
//!   answers it itself), the OpenAPI document and the region WebSocket
//!   (regions are redirected in their handshake instead).
//! - Passed on: method, path, query string, `Authorization`, the content
//!   headers and the body, streamed both ways (a 32 MiB upload is never
//!   held whole). `Origin` is not: this node's guard already checked it.
//! - [`HOP`] names the forwarding node; a request that carries it is never
//!   forwarded again (`503 no-leader` instead), so two nodes that each
//!   believe the other leads cannot bounce a request between them.
//! - Nothing is retried once sent: a write whose answer was lost is the
//!   caller's to check.
//! - When this node shuts down (SIGTERM), calls in flight complete: the
//!   leader answers them and the answer is passed on whole, while the
//!   connections close after it. A forwarded event stream (`text/event-stream`,
//!   which would never end by itself) ends cleanly at once, as the
//!   leader's own streams do when it stops: the client resumes on another
//!   node with `Last-Event-ID`.
//! - No leader known: `503 {"error":{"code":"no-leader",…}}`.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::AppState;
use super::api_error::ApiError;

/// The header naming the node a request was forwarded by.
pub const HOP: &str = "x-shardalloc-forwarded-by";

/// How long connecting to the leader may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Request headers passed on to the leader.
const PASSED: [HeaderName; 5] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::ACCEPT,
    HeaderName::from_static("last-event-id"),
];

/// Answer headers passed back (the body's framing is the server's own).
const RETURNED: [HeaderName; 3] = [header::CONTENT_TYPE, header::CACHE_CONTROL, header::RETRY_AFTER];

fn forwarded(path: &str) -> bool {
    path.starts_with("/v1/")
        && path != "/v1/cluster/leader"
        && path != "/v1/openapi.json"
        && path != shardalloc_client::protocol::CONNECT_PATH
}

fn no_leader(message: impl Into<String>) -> Response {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no-leader", message).into_response()
}

fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let tls = shardalloc_client::tls::client_config(None).map_err(|e| e.to_string())?;
            reqwest::Client::builder()
                .use_preconfigured_tls((*tls).clone())
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The middleware. See the module documentation.
pub async fn forward(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if state.leadership.leading() || !forwarded(request.uri().path()) {
        return next.run(request).await;
    }
    let me = state.leadership.me().clone();
    if let Some(from) = request.headers().get(HOP) {
        let from = String::from_utf8_lossy(from.as_bytes()).into_owned();
        return no_leader(format!("{from} forwarded this call here, but {} does not lead either; retry", me.name));
    }
    let role = state.leadership.role();
    let Some(leader) = role.leader_other_than(&me.name).cloned() else {
        return no_leader("no leader is known right now (an election is under way); retry in a moment");
    };
    let target = format!(
        "{}{}",
        leader.url.trim_end_matches('/'),
        request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let client = match client() {
        Ok(client) => client,
        Err(error) => return no_leader(format!("cannot build the client that forwards to the leader: {error}")),
    };
    let (parts, body) = request.into_parts();
    let mut outgoing = client
        .request(parts.method.clone(), &target)
        .header(HOP, me.name.as_str())
        .body(reqwest::Body::wrap_stream(body.into_data_stream()));
    for name in PASSED {
        for value in parts.headers.get_all(&name) {
            outgoing = outgoing.header(name.clone(), value.clone());
        }
    }
    match outgoing.send().await {
        Ok(answer) => {
            let mut response = Response::builder().status(answer.status());
            for name in RETURNED {
                if let Some(value) = answer.headers().get(&name) {
                    response = response.header(name, value.clone());
                }
            }
            let stream = answer
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
            let body = if stream {
                let shutdown = state.shutdown.clone();
                Body::from_stream(answer.bytes_stream().take_until(async move { shutdown.cancelled().await }))
            } else {
                Body::from_stream(answer.bytes_stream())
            };
            response
                .header(HOP, me.name.as_str())
                .body(body)
                .unwrap_or_else(|_| no_leader("the leader's answer could not be passed on"))
        }
        Err(error) => {
            tracing::warn!(leader = %leader.name, url = %leader.url, %error, "cannot forward a call to the leader");
            no_leader(format!(
                "the leader {} ({}) did not answer: {error}; the call was not retried",
                leader.name, leader.url
            ))
        }
    }
}
