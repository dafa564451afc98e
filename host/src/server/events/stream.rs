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
//! `too-many-streams` with `Retry-After` past it), and a stream whose
//! client reads nothing is dropped with its connection (`hub.rs`).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use shardalloc_client::api::{DecisionEvent, EventKind};

use super::hub::{Delivery, Start};
use crate::server::AppState;
use crate::server::api_error::ApiError;
use crate::server::conn::Closer;
use crate::server::driver::request::AdminRequest;
use crate::server::openapi::{BadRequest, TooManyStreams, Unauthorized, Unavailable, UnknownType};

/// How often a comment line is sent on a quiet stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

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
            "invalid-last-event-id",
            format!("Last-Event-ID must be <term>-<seq> as the stream's ids are, like 1-42; got {value:?}"),
        )
    })
}

fn start_of(headers: &HeaderMap, from: Option<&str>) -> Result<Start, ApiError> {
    if let Some(value) = headers.get(LAST_EVENT_ID) {
        let value = value.to_str().map_err(|_| {
            ApiError::bad_request("invalid-last-event-id", "Last-Event-ID must be <term>-<seq> in ASCII")
        })?;
        return resume_point(value);
    }
    match from {
        None | Some("now") => Ok(Start::Now),
        Some("oldest") => Ok(Start::Oldest),
        Some(other) => {
            Err(ApiError::bad_request("invalid-query", format!("from must be `now` or `oldest`, not {other:?}")))
        }
    }
}

/// One SSE event of a delivery.
fn frame(term: u64, delivery: Delivery) -> Event {
    match delivery {
        Delivery::Event(event) => {
            let data = serde_json::to_string(&*event).expect("an event serializes");
            Event::default().id(format!("{term}-{}", event.seq)).data(data)
        }
        Delivery::Missed(missed) => {
            let event = DecisionEvent { missed: Some(missed), ..DecisionEvent::new(EventKind::Missed, "", 0) };
            Event::default().data(serde_json::to_string(&event).expect("an event serializes"))
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
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(query) = query.map_err(|rejection| ApiError::bad_request("invalid-query", rejection.body_text()))?;
    let start = start_of(&headers, query.from.as_deref())?;
    if let Some(name) = &query.entity_type {
        let name = name.clone();
        state.driver.ask(|reply| AdminRequest::TypeLive { name, reply }).await??;
    }
    // Without a connection of `conn.rs` (in-process tests) a dropped
    // stream only ends.
    let close = closer.map(|Extension(closer)| closer.token()).unwrap_or_default();
    let subscription =
        state.events.subscribe(start, state.connections.max_event_streams, close).map_err(|refused| {
            ApiError::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "too-many-streams", refused.to_string())
        })?;
    let shutdown = state.shutdown.clone();
    let only = query.entity_type;
    let stream = futures_util::stream::unfold((subscription, false), move |(mut subscription, live)| {
        let (shutdown, only) = (shutdown.clone(), only.clone());
        async move {
            loop {
                if !live && subscription.caught_up() {
                    return Some((Ok(Event::default().comment(LIVE)), (subscription, true)));
                }
                let delivery = tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    delivery = subscription.next() => delivery?,
                };
                if let (Delivery::Event(event), Some(only)) = (&delivery, &only)
                    && &event.entity_type != only
                {
                    continue;
                }
                let term = subscription.term();
                return Some((Ok(frame(term, delivery)), (subscription, live)));
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")))
}
