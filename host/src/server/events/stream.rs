//! `GET /v1/events`: the decision event stream as Server-Sent Events.
//!
//! Each event is `id: <term>-<seq>` and one `data:` line of JSON (a
//! [`DecisionEvent`]); a comment line every [`KEEP_ALIVE`] keeps proxies
//! from closing a quiet stream. A `missed` event (no `id`) tells a client
//! that fell behind the backlog, or resumed from an event no longer kept,
//! how many it lost. The comment `: live` comes once the stream has sent
//! what was kept (at once when it starts with the next event): what follows
//! is news, which a page that draws its first view from REST applies on
//! top of that view. The stream ends when the node shuts down or stops
//! leading, so the client reconnects (with `Last-Event-ID`) to the leader.
//!
//! At most `--max-event-streams` streams are open at once (429
//! `too-many-streams` with `Retry-After` past it), at most
//! [`MAX_REPLAYS`](super::MAX_REPLAYS) of them replay at once (a start
//! more than [`REPLAY_FREE`](super::REPLAY_FREE) events behind the newest;
//! 429 `replays-busy` past it; a replay not at the newest event within
//! [`REPLAY_DEADLINE`](super::REPLAY_DEADLINE) is ended with its
//! connection), and a stream whose client reads nothing is dropped with
//! its connection (`hub.rs`).
//!
//! The body is written by hand rather than with axum's `Sse`, so that one
//! chunk carries many events (up to [`CHUNK`] bytes) of frames made once
//! per event, not per stream (`frame.rs`): a replay of the whole backlog
//! is a few hundred chunks of copied bytes, not ten thousand events
//! serialised one by one. A live stream that has sent everything there was
//! waits [`GATHER`] before it takes more, so a busy node's events go out
//! in a few chunks a second per stream, not one wake-up and one write per
//! stream per turn.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use shardalloc_proto::api::DecisionEvent;
use tokio::time::Instant;

use super::frame;
use super::{Refused, Start, Subscription};
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::conn::Closer;
use crate::server::driver::request::AdminRequest;
use crate::server::openapi::{BadRequest, TooManyStreams, Unauthorized, Unavailable, UnknownType};
use crate::server::state::AppState;

/// How often a comment line is sent on a quiet stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// About the most bytes of events in one body chunk (one event's frame
/// may be more). The connection queues up to 16 chunks of a client that
/// reads slowly (`conn.rs`): at most 128 KiB per stream.
pub const CHUNK: usize = 8 * 1024;

/// How long a live stream that has sent all there was waits before it
/// takes again: what is published meanwhile goes in one chunk. A stream
/// costs the node at most twenty wake-ups a second however many turns
/// publish (500 streams on a node writing 2,000 placements a second were
/// 500 wake-ups, locks and writes per turn, and cut the writes to 299 a
/// second: issue 41); an event reaches a client at most this much later.
pub const GATHER: Duration = Duration::from_millis(50);

/// The comment that marks the end of the replay: what follows is news.
pub const LIVE: &str = "live";

/// The header a resuming client sends, as browsers name it.
const LAST_EVENT_ID: &str = "last-event-id";

/// Which events, from where.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only this entity type's events (every type's when omitted).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub entity_type: Option<String>,
    /// `oldest` replays every event kept (the last 10,000 of this term)
    /// first; `now` (the default) starts with the next. A `Last-Event-ID`
    /// header wins over it.
    pub from: Option<String>,
}

/// Parses a `Last-Event-ID` (`<term>-<seq>`).
fn resume_point(value: &str) -> Result<Start, ApiError> {
    let parsed = value.trim().split_once('-').and_then(|(term, seq)| Some((term.parse().ok()?, seq.parse().ok()?)));
    parsed.map(|(term, seq)| Start::After { term, seq }).ok_or_else(|| {
        ApiError::bad_request(
            ErrorCode::InvalidLastEventId,
            format!("Last-Event-ID must be <term>-<seq> as the stream's ids are, like 1-42; got {value:?}"),
        )
    })
}

fn start_of(headers: &HeaderMap, from: Option<&str>) -> Result<Start, ApiError> {
    if let Some(value) = headers.get(LAST_EVENT_ID) {
        let value = value.to_str().map_err(|_| {
            ApiError::bad_request(ErrorCode::InvalidLastEventId, "Last-Event-ID must be <term>-<seq> in ASCII")
        })?;
        return resume_point(value);
    }
    match from {
        None | Some("now") => Ok(Start::Now),
        Some("oldest") => Ok(Start::Oldest),
        Some(other) => Err(ApiError::bad_request(
            ErrorCode::InvalidQuery,
            format!("from must be `now` or `oldest`, not {other:?}"),
        )),
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> Self {
        ApiError::busy(refused.code(), refused.to_string())
    }
}

/// A stream being served.
struct Serving {
    subscription: Subscription,
    /// Only this type's events.
    only: Option<String>,
    /// Whether `: live` was sent.
    live: bool,
    /// When the next keep-alive comment is due if nothing else is sent.
    quiet_until: Instant,
    /// Until when a live stream that sent all there was waits.
    gather_until: Option<Instant>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Serving {
    /// The next chunk of the body; `None` ends it.
    async fn chunk(&mut self) -> Option<Bytes> {
        let chunk = self.next_chunk().await?;
        self.quiet_until = Instant::now() + KEEP_ALIVE;
        Some(chunk)
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if !self.live && self.subscription.caught_up() {
                self.live = true;
                return Some(frame::comment(LIVE));
            }
            if let Some(until) = self.gather_until.take() {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
            let frames = tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                _ = tokio::time::sleep_until(self.quiet_until) => return Some(frame::comment("keep-alive")),
                frames = self.subscription.next_frames(self.only.as_deref(), CHUNK) => frames?,
            };
            if !frames.is_empty() {
                // It took all there was: the next take waits (a replay, or
                // a stream behind, goes on at once).
                if self.live && !self.subscription.behind() {
                    self.gather_until = Some(Instant::now() + GATHER);
                }
                return Some(frames);
            }
        }
    }
}

/// Decision events
///
/// Server-Sent Events: every decision as it is made, once its turn is
/// persisted. The comment `: live` marks where the replay (`from=oldest`,
/// `Last-Event-ID`) ends and news begins. Each event has `id: <term>-<seq>` and a `data:` line with one
/// JSON object (`DecisionEvent`); a comment line comes every 15 s. Send
/// `Last-Event-ID` to resume after an event: from the next one while it is
/// still among the last 10,000 kept, else after a `missed` event telling
/// how many are lost (0: unknown, the leader changed). A client slower
/// than the stream is sent `missed` rather than slowing the node. On a
/// follower the leader's stream is passed through; the stream ends when
/// its node stops leading or shuts down: reconnect with `Last-Event-ID`.
/// A node serves a bounded number of streams at once (429 past it), and
/// drops a stream whose client reads nothing while 10,000 events pass.
/// A stream that starts more than 1,000 events behind the newest
/// (`from=oldest`, an old or another term's `Last-Event-ID`) replays; at
/// most 4 replay at once (429 `replays-busy` past it; a stream from now or
/// a resume a few events behind is never refused for it), and a replay
/// that has not sent the newest event 30 s after it started is ended.
#[utoipa::path(
    get, path = "/v1/events", operation_id = "events", tag = "events", params(EventsQuery),
    responses(
        (status = 200, description = "The stream (`text/event-stream`); each `data:` is a DecisionEvent.",
            content_type = "text/event-stream", body = DecisionEvent),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 429, response = TooManyStreams),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    closer: Option<Extension<Closer>>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) =
        query.map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
    let start = start_of(&headers, query.from.as_deref())?;
    if let Some(name) = &query.entity_type {
        let name = name.clone();
        state.driver.ask(|reply| AdminRequest::TypeLive { name, reply }).await??;
    }
    // Without a connection of `conn.rs` (in-process tests) a dropped
    // stream only ends.
    let close = closer.map(|Extension(closer)| closer.token()).unwrap_or_default();
    let subscription = state.events.subscribe(start, state.connections.max_event_streams, close)?;
    let serving = Serving {
        subscription,
        only: query.entity_type,
        live: false,
        quiet_until: Instant::now() + KEEP_ALIVE,
        gather_until: None,
        shutdown: state.shutdown.clone(),
    };
    let body = futures_util::stream::unfold(serving, |mut serving| async move {
        let chunk = serving.chunk().await?;
        Some((Ok::<_, Infallible>(chunk), serving))
    });
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    Ok((headers, Body::from_stream(body)).into_response())
}
