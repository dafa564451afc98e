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
//! - Failures to reach the leader are logged at most once per
//!   [`throttle::PERIOD`](super::throttle::PERIOD), with the count left
//!   out (a failover under load fails hundreds of calls a second).
//! - When this node shuts down (SIGTERM), calls in flight complete: the
//!   leader answers them and the answer is passed on whole, while the
//!   connections close after it. A forwarded event stream (`text/event-stream`,
//!   which would never end by itself) ends cleanly at once, as the
//!   leader's own streams do when it stops: the client resumes on another
//!   node with `Last-Event-ID`.
//! - No leader known: `503 {"error":{"code":"no-leader",…}}`.
//! - A leader that does not answer (paused, overloaded, unreachable):
//!   `503 leader-unavailable` with `Retry-After`, once its answer's head has
//!   not come within `--forward-timeout-ms` (5 s by default;
//!   [`UPLOAD_ANSWER_TIMEOUT`] for a component upload, whose answer waits
//!   for its compile). A forwarded event stream ends once nothing came for
//!   [`STREAM_IDLE_TIMEOUT`] (30 s: two of the leader's 15 s comments
//!   missed), so it ends 30 to 45 s after the leader stopped sending,
//!   depending on when its last comment came.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::api_error::{ApiError, ErrorCode};
use super::state::AppState;

/// The header naming the node a request was forwarded by.
pub const HOP: &str = "x-shardalloc-forwarded-by";

/// How long connecting to the leader may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the head of a forwarded upload's answer may take (a component
/// upload is answered once the leader has compiled it).
pub const UPLOAD_ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a forwarded event stream may stay silent before it is ended:
/// twice the leader's keep-alive interval.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The `Retry-After` of a `leader-unavailable` answer, in seconds.
const RETRY_AFTER_S: &str = "1";

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
        && path != shardalloc_proto::protocol::CONNECT_PATH
}

fn no_leader(message: impl Into<String>) -> Response {
    ApiError::unavailable(ErrorCode::NoLeader, message).into_response()
}

fn leader_unavailable(message: impl Into<String>) -> Response {
    let mut response = ApiError::unavailable(ErrorCode::LeaderUnavailable, message).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static(RETRY_AFTER_S));
    response
}

/// A component upload (its body is WebAssembly).
fn is_upload(headers: &header::HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_some_and(|value| value.as_bytes().starts_with(b"application/wasm"))
}

/// `stream`, ended when it stays silent for `idle`.
fn ending_when_silent<S, T>(stream: S, idle: Duration) -> impl futures_util::Stream<Item = T>
where
    S: futures_util::Stream<Item = T> + Unpin,
{
    futures_util::stream::unfold(stream, move |mut stream| async move {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(item)) => Some((item, stream)),
            Ok(None) | Err(_) => None,
        }
    })
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
    let bound = if is_upload(&parts.headers) {
        UPLOAD_ANSWER_TIMEOUT.max(state.connections.forward_timeout)
    } else {
        state.connections.forward_timeout
    };
    let mut outgoing = client.request(parts.method.clone(), &target).header(HOP, me.name.as_str());
    // A call without a body goes on without one: a streamed empty body
    // would reach the leader as a chunked body of no media type (415).
    if !axum::body::HttpBody::is_end_stream(&body) {
        outgoing = outgoing.body(reqwest::Body::wrap_stream(body.into_data_stream()));
    }
    for name in PASSED {
        for value in parts.headers.get_all(&name) {
            outgoing = outgoing.header(name.clone(), value.clone());
        }
    }
    let answer = match tokio::time::timeout(bound, outgoing.send()).await {
        Ok(answer) => answer,
        Err(_) => {
            if let Some(left_out) = failure_to_log() {
                tracing::warn!(leader = %leader.name, url = %leader.url, ?bound, left_out, "the leader did not answer a forwarded call");
            }
            return leader_unavailable(format!(
                "the leader {} ({}) did not answer within {} s; the call was not retried (it may or may not have \
                 been applied); retry",
                leader.name,
                leader.url,
                bound.as_secs_f64()
            ));
        }
    };
    match answer {
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
                let stream = ending_when_silent(answer.bytes_stream(), STREAM_IDLE_TIMEOUT);
                Body::from_stream(stream.take_until(async move { shutdown.cancelled().await }))
            } else {
                Body::from_stream(answer.bytes_stream())
            };
            response
                .header(HOP, me.name.as_str())
                .body(body)
                .unwrap_or_else(|_| no_leader("the leader's answer could not be passed on"))
        }
        Err(error) => {
            if let Some(left_out) = failure_to_log() {
                tracing::warn!(leader = %leader.name, url = %leader.url, %error, left_out, "cannot forward a call to the leader");
            }
            leader_unavailable(format!(
                "the leader {} ({}) did not answer: {error}; the call was not retried",
                leader.name, leader.url
            ))
        }
    }
}

/// The failed forwards of every call together: `Some(left out since the
/// last one logged)` when this one is to be logged.
fn failure_to_log() -> Option<u64> {
    static FAILURES: std::sync::LazyLock<std::sync::Mutex<super::throttle::Throttle>> =
        std::sync::LazyLock::new(Default::default);
    FAILURES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).allow(std::time::Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_forwards_are_logged_at_most_once_a_period() {
        // Other tests of this binary may fail forwards too: at most one of
        // these 200 in a row is logged, whoever logged last.
        let logged = (0..200).filter(|_| failure_to_log().is_some()).count();
        assert!(logged <= 1, "{logged} of 200 failed forwards in a row were logged");
    }

    #[tokio::test]
    async fn a_forwarded_stream_ends_its_idle_time_after_the_last_thing_it_carried() {
        let idle = Duration::from_millis(300);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let mut stream = Box::pin(super::ending_when_silent(tokio_stream_of(rx), idle));
        // Items closer together than the idle time keep it going.
        for n in 0..4 {
            tx.send(n).unwrap();
            assert_eq!(stream.next().await, Some(n));
            tokio::time::sleep(idle / 3).await;
        }
        let last = std::time::Instant::now();
        // Then silence (the sender still open: a paused leader): it ends.
        assert_eq!(tokio::time::timeout(idle * 20, stream.next()).await, Ok(None));
        assert!(last.elapsed() >= idle, "it ended {:?} after the last item", last.elapsed());
        drop(tx);
    }

    fn tokio_stream_of<T>(
        mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
