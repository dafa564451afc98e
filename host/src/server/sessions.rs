//! Region sessions: one WebSocket per region and entity type at
//! `/v1/regions/connect`, binary postcard frames (see
//! `shardalloc_client::protocol` and `docs/protocol.md`).
//!
//! The reader decodes frames and queues them for the driver; the writer
//! drains the session's outbox. Home lookups, which one region may send by
//! the thousand, are read only while the session has fewer than
//! `REQUESTS_IN_FLIGHT` queued for the driver and its outbox has room for
//! their answers: a region that sends faster than it reads is slowed down
//! (TCP back-pressure), never dropped, and delays no other region. When the
//! driver closes a session its WebSocket is closed too, so the region
//! reconnects and registers again. A peer that sends garbage, a text frame, an
//! oversized frame, or a message before its handshake or registration is
//! disconnected with a logged reason; nothing it sends can panic the node.
//! Load reports are paced ([`super::load_pacing`]): those sent sooner than
//! a quarter second after the last are folded into one, never queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use shardalloc_proto::protocol::{
    FRAMES_PER_FLUSH, Hello, MAX_FRAME_BYTES, NodeMessage, RegionMessage, decode, encode,
};
use tokio::sync::{Semaphore, mpsc};

use super::api_error::ApiError;
use super::driver::{Input, REQUESTS_IN_FLIGHT, SESSION_OUTBOX};
use super::load_pacing::LoadPacer;
use super::state::AppState;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// Why a session a region closed cleanly (a close frame) ended; logged at
/// debug, every other end at info.
const PEER_CLOSED: &str = "the peer closed";

/// Region session (WebSocket upgrade)
///
/// The region-session WebSocket; not a REST call. A region sends a `GET`
/// with a WebSocket upgrade (`Connection: Upgrade`, `Upgrade: websocket`,
/// `Sec-WebSocket-Version: 13`, `Sec-WebSocket-Key`) and, when the node has a
/// region token, `Authorization: Bearer <region token>`. The admin token is
/// not used here. After the upgrade every message is one binary frame (at
/// most 1 MiB) encoded with postcard: the region sends
/// `Hello{protocol, entity_type}` within 10 s, the node answers
/// `Welcome{protocol}` or `Refused{reason}` and closes; then the region sends
/// `Register` and the session proceeds with heartbeats, home lookups and
/// hand-offs. docs/protocol.md lists every message, field by field, with
/// byte examples.
#[utoipa::path(
    get, path = "/v1/regions/connect", operation_id = "regionSession", tag = "regions",
    security(("regionToken" = [])),
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open. From here on the session speaks the binary region-session protocol."),
        (status = 400, description = "Not a valid WebSocket upgrade request (plain-text body).", body = String, content_type = "text/plain"),
        (status = 401, description = "The region token is missing or wrong (`unauthorized`). Only when the node has a region token.", body = shardalloc_client::api::ErrorBody),
        (status = 426, description = "The connection cannot be upgraded (plain-text body).", body = String, content_type = "text/plain"),
    ),
)]
pub async fn connect(State(state): State<AppState>, request: Request) -> Response {
    if let Some(token) = &state.security.region_token
        && !super::auth::bearer_matches(request.headers(), token)
    {
        return ApiError::unauthorized("a region token is required: Authorization: Bearer <region token>")
            .into_response();
    }
    super::auth::trust(&request);
    let (mut parts, _) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    upgrade
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| session(state, socket))
}

async fn close(socket: &mut WebSocket, reason: &str) {
    let mut text = reason.to_owned();
    // A close frame's reason is at most 123 bytes.
    while text.len() > 120 {
        text.pop();
    }
    let frame = CloseFrame { code: axum::extract::ws::close_code::POLICY, reason: text.into() };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

async fn refuse(socket: &mut WebSocket, reason: String) {
    tracing::warn!(%reason, "region session refused");
    if let Ok(frame) = encode(&NodeMessage::Refused { reason: reason.clone() }) {
        let _ = socket.send(Message::Binary(frame.into())).await;
    }
    close(socket, &reason).await;
}

/// How long a node that does not lead holds a region's `Hello` while an
/// election is under way, so the region is redirected the moment a leader
/// is known instead of retrying with backoff (under the region client's
/// 2 s connect timeout).
pub const REDIRECT_WAIT: Duration = Duration::from_millis(1_500);

/// A node that does not lead sends the region to the leader, or closes
/// the session while no leader is known (the region tries again). Returns
/// false when this node became the leader meanwhile: the session goes on.
async fn redirected(state: &AppState, socket: &mut WebSocket) -> bool {
    let role = state.leadership.settled(REDIRECT_WAIT).await;
    if role.leading {
        return false;
    }
    let me = state.leadership.me();
    match role.leader_other_than(&me.name).cloned() {
        Some(leader) => {
            tracing::debug!(leader = %leader.url, "region session redirected to the leader");
            if let Ok(frame) = encode(&NodeMessage::Redirect { leader: leader.url }) {
                let _ = socket.send(Message::Binary(frame.into())).await;
            }
            let frame = CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: "not the leader".into() };
            let _ = socket.send(Message::Close(Some(frame))).await;
        }
        // Not a refusal (the region would report it): a close it retries.
        None => {
            tracing::debug!("region session closed: no leader is known yet");
            close(socket, "no leader is known right now; retry").await;
        }
    }
    true
}

/// The peer's [`Hello`], within `deadline` (a session that does not send
/// one, and then its first `Register`, in time is closed).
async fn handshake(socket: &mut WebSocket, deadline: Duration) -> Result<Hello, String> {
    let first =
        tokio::time::timeout(deadline, socket.recv()).await.map_err(|_| format!("no Hello within {deadline:?}"))?;
    let frame = match first {
        Some(Ok(Message::Binary(frame))) => frame,
        Some(Ok(other)) => return Err(format!("the first frame must be a binary Hello, not {}", frame_kind(&other))),
        Some(Err(error)) => return Err(format!("the connection failed: {error}")),
        None => return Err("the peer closed before its Hello".into()),
    };
    let hello: Hello = decode(&frame).map_err(|e| format!("the first frame is not a Hello: {e}"))?;
    hello.check_protocol()?;
    shardalloc_client::protocol::check_type_name(&hello.entity_type)?;
    Ok(hello)
}

fn frame_kind(message: &Message) -> &'static str {
    match message {
        Message::Text(_) => "a text frame",
        Message::Binary(_) => "a binary frame",
        Message::Ping(_) | Message::Pong(_) => "a ping",
        Message::Close(_) => "a close frame",
    }
}

async fn session(state: AppState, mut socket: WebSocket) {
    let deadline = state.connections.session_handshake_timeout;
    let hello = match handshake(&mut socket, deadline).await {
        Ok(hello) => hello,
        Err(reason) => return refuse(&mut socket, reason).await,
    };
    if !state.leadership.leading() && redirected(&state, &mut socket).await {
        return;
    }
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    // The region's own version: a version-1 region is served as it was.
    let welcome = encode(&NodeMessage::Welcome { protocol: hello.protocol }).expect("small");
    if socket.send(Message::Binary(welcome.into())).await.is_err() {
        return;
    }
    let (outbox, inbox) = mpsc::channel(SESSION_OUTBOX);
    // Weak: when the driver drops its sender (it closed the session), the
    // channel closes, the writer ends and the WebSocket is closed.
    let refusals = outbox.downgrade();
    let requests = Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT));
    // The session belongs to the driver it opens with: when that one ends
    // (a leader stepping down), the session ends with it.
    let driver = state.driver.pinned();
    let opened = Input::SessionOpened { session: id, entity_type: hello.entity_type.clone(), outbox };
    if driver.send(opened).await.is_err() {
        return refuse(&mut socket, "the node is shutting down".into()).await;
    }
    tracing::debug!(session = id, r#type = %hello.entity_type, "region session opened");
    let (sink, mut stream) = socket.split();
    let protocol = hello.protocol;
    let mut writer = tokio::spawn(write(sink, inbox, protocol));
    // A peer breaking the protocol is told why (a Refused frame), then cut off.
    let violation = |reason: String| {
        tracing::warn!(session = id, %reason, "region session closed: protocol violation");
        if let Some(outbox) = refusals.upgrade() {
            let _ = outbox.try_send(NodeMessage::Refused { reason: reason.clone() });
        }
        reason
    };
    let register_by = tokio::time::Instant::now() + deadline;
    let mut registered = false;
    let mut writer_ended = false;
    let mut loads = LoadPacer::default();
    let reason = loop {
        let report_due = loads.due();
        let next = tokio::select! {
            next = stream.next() => next,
            _ = tokio::time::sleep_until(report_due.unwrap_or(register_by)), if report_due.is_some() => {
                let Some(report) = loads.take_due(tokio::time::Instant::now()) else { continue };
                let input = Input::Region { session: id, message: RegionMessage::Load(report) };
                if driver.send(input).await.is_err() {
                    break "the node is shutting down".to_owned();
                }
                continue;
            }
            _ = state.shutdown.cancelled() => break "the node is shutting down".to_owned(),
            _ = driver.stopped() => break "the node stopped leading".to_owned(),
            _ = &mut writer => {
                writer_ended = true;
                break "the node closed the session".to_owned();
            }
            _ = tokio::time::sleep_until(register_by), if !registered => {
                break violation(format!("no Register within {deadline:?} of the Welcome"));
            }
        };
        let message = match read(next, protocol) {
            Read::Message(message) => message,
            Read::Nothing => continue,
            Read::Ended(reason) => break reason,
            Read::Violation(reason) => break violation(reason),
        };
        registered |= matches!(message, RegionMessage::Register(_) | RegionMessage::RegisterWithCapacity { .. });
        let message = match message {
            RegionMessage::Load(report) => match loads.offer(tokio::time::Instant::now(), report) {
                (Some(report), _) => RegionMessage::Load(report),
                (None, folded) => {
                    if folded {
                        state.metrics.load_reports_coalesced.inc();
                    }
                    continue;
                }
            },
            message => message,
        };
        let lookup =
            matches!(message, RegionMessage::GetShardHome { .. } | RegionMessage::GetShardHomeWithAttributes { .. });
        let input = if lookup {
            let permit = tokio::select! {
                permit = room_for_a_request(&requests, &refusals) => permit,
                _ = state.shutdown.cancelled() => break "the node is shutting down".to_owned(),
                _ = driver.stopped() => break "the node stopped leading".to_owned(),
            };
            let Some(permit) = permit else { break "the node closed the session".to_owned() };
            Input::Request { session: id, message, permit }
        } else {
            Input::Region { session: id, message }
        };
        if driver.send(input).await.is_err() {
            break "the node is shutting down".to_owned();
        }
    };
    if reason == PEER_CLOSED {
        tracing::debug!(session = id, r#type = %hello.entity_type, %reason, "region session ended");
    } else {
        tracing::info!(session = id, r#type = %hello.entity_type, %reason, "region session ended");
    }
    if let Some(report) = loads.take() {
        let _ = driver.send(Input::Region { session: id, message: RegionMessage::Load(report) }).await;
    }
    let _ = driver.send(Input::SessionClosed { session: id }).await;
    // The writer ends when the driver drops the outbox; do not wait forever.
    if !writer_ended {
        let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    }
}

/// The session's writer: what the driver sends the region, encoded for the
/// version it speaks, until the driver drops the outbox (or refuses the
/// region); then a close frame.
async fn write(
    mut sink: futures_util::stream::SplitSink<WebSocket, Message>,
    mut inbox: mpsc::Receiver<NodeMessage>,
    protocol: u32,
) {
    // Every message already waiting is written before one flush: a
    // pipelining region gets its answers in a few system calls, not one
    // per answer.
    'session: while let Some(first) = inbox.recv().await {
        let mut next = Some(first);
        let mut batched = 0;
        while let Some(message) = next.take() {
            batched += 1;
            let last = matches!(message, NodeMessage::Refused { .. } | NodeMessage::ShuttingDown);
            // A region speaking an older version reads its own messages
            // (and is not sent those it does not know).
            if let Some(message) = message.for_protocol(protocol)
                && let Ok(frame) = encode(&message)
                && sink.feed(Message::Binary(frame.into())).await.is_err()
            {
                return;
            }
            if last {
                let _ = sink.flush().await;
                break 'session;
            }
            if batched < FRAMES_PER_FLUSH
                && let Ok(more) = inbox.try_recv()
            {
                next = Some(more);
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
    // The driver dropped the outbox (closed the session) or refused it.
    let frame = CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: "session closed".into() };
    let _ = sink.send(Message::Close(Some(frame))).await;
}

/// Back-pressure on a session's home lookups: a permit (at most
/// [`REQUESTS_IN_FLIGHT`] of this session queued for the driver), and room
/// in the outbox for the answers to as many, before the next request is
/// read. `None` when the driver closed the session meanwhile.
async fn room_for_a_request(
    requests: &Arc<Semaphore>,
    outbox: &mpsc::WeakSender<NodeMessage>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let permit = requests.clone().acquire_owned().await.ok()?;
    let outbox = outbox.upgrade()?;
    // Waits only when the room is short: reserving on every lookup would
    // cost the hot path for nothing.
    if outbox.capacity() < REQUESTS_IN_FLIGHT {
        drop(outbox.reserve_many(REQUESTS_IN_FLIGHT).await.ok()?);
    }
    Some(permit)
}

/// What one frame from the region amounts to.
enum Read {
    /// A message of the region's version.
    Message(RegionMessage),
    /// A ping or a pong: nothing to do.
    Nothing,
    /// The session ended (why): the peer closed or the connection was lost.
    Ended(String),
    /// The peer broke the protocol (how): it is told, then cut off.
    Violation(String),
}

/// Reads one frame (`None`: the stream ended) of a region speaking
/// `protocol`.
fn read(next: Option<Result<Message, axum::Error>>, protocol: u32) -> Read {
    let frame = match next {
        None => return Read::Ended(PEER_CLOSED.to_owned()),
        // A peer gone without a close frame (a process that exited) is no
        // protocol violation: nothing is told, the session ends.
        Some(Err(error)) => return Read::Ended(format!("the connection was lost: {error}")),
        Some(Ok(Message::Binary(frame))) => frame,
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Read::Nothing,
        Some(Ok(Message::Close(_))) => return Read::Ended(PEER_CLOSED.to_owned()),
        Some(Ok(Message::Text(_))) => return Read::Violation("a text frame; the protocol is binary".to_owned()),
    };
    let message: RegionMessage = match decode(&frame) {
        Ok(message) => message,
        Err(error) => return Read::Violation(format!("a malformed frame: {error}")),
    };
    match message.check_protocol(protocol) {
        Ok(()) => Read::Message(message),
        Err(rule) => Read::Violation(rule),
    }
}
