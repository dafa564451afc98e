//! [`PeerTransport`]: the built-in transport between regions, speaking the
//! inter-region wire ([`crate::peer`], `docs/protocol.md` section 20) over
//! WebSockets, so a service needs no forwarding of its own.
//!
//! ```text
//!  region a ──send──▶ PeerTransport(a) ══ ws://b/shardalloc/v1/peer ══▶ PeerTransport(b) ──▶ Inbox(b) ──▶ region b
//!            ◀─not_delivered (late)─┘            ◀── Ack / NotDelivered ──┘
//! ```
//!
//! It listens where the region is reachable (its registered address is
//! what other regions dial) and dials a peer the first time it carries a
//! message there: one connection per pair (a connection the peer opened
//! carries this region's messages back too). Messages are the
//! application's type in JSON (`serde_json`), so regions in other languages
//! read them. Each message stays with the transport until the peer
//! acknowledges it; a refusal, a failed connection or a peer that goes away
//! hands it back to the region ([`Inbox::not_delivered`]), which asks for
//! the shard's home again and resends it. At most
//! [`MAX_UNACKED_BYTES`] of one peer's messages wait unacknowledged: past
//! that, [`Transport::send`] refuses ([`TransportError::PeerBusy`]) and the
//! region keeps the message.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::{self, Message};
use tracing::{debug, warn};

use super::ask::{AskError, Parcel, Replier};
use super::transport::{Inbox, Transport, TransportError, Undelivered};
use crate::peer::{MAX_UNACKED_BYTES, PEER_PATH, PEER_PROTOCOL_VERSION, PeerHello, PeerMessage};
use crate::protocol::{MAX_FRAME_BYTES, decode, encode};

/// How long dialling a peer (TCP, the WebSocket upgrade, its `Welcome`)
/// may take before its messages are handed back.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Most queued frames written to a peer before one flush.
const WRITE_BATCH: usize = 256;

/// Who this region is on the inter-region wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The entity type; a peer serving another is refused.
    pub entity_type: String,
    /// The region's registered address: `host:port`, where peers dial it
    /// (empty: where [`PeerTransport::bind`] bound, e.g. `127.0.0.1:40123`).
    pub address: String,
    /// The region's incarnation.
    pub incarnation: u64,
    /// The region token: sent when dialling, required of whoever dials
    /// this region (`None`: none sent, none required).
    pub token: Option<String>,
}

/// The built-in transport between regions. See the module documentation.
pub struct PeerTransport<M, R = ()> {
    shared: Arc<Shared<M, R>>,
}

impl<M, R> Clone for PeerTransport<M, R> {
    fn clone(&self) -> Self {
        PeerTransport { shared: self.shared.clone() }
    }
}

struct Shared<M, R> {
    config: PeerConfig,
    local: std::net::SocketAddr,
    inbox: Mutex<Option<Inbox<M, R>>>,
    /// The connection carrying this region's messages to each peer.
    links: Mutex<HashMap<String, Link<M, R>>>,
    next_link: AtomicU64,
    /// Set when the region detaches: the accept loop and every connection end.
    stopping: watch::Sender<bool>,
}

/// A message waiting to go to a peer, or gone and not yet acknowledged.
struct Outgoing<M, R> {
    shard: String,
    parcel: Parcel<M, R>,
    payload: Vec<u8>,
}

impl<M, R> Outgoing<M, R> {
    /// Its frame, numbered `seq`.
    fn frame(&self, seq: u64) -> PeerMessage {
        let (shard, payload) = (self.shard.clone(), self.payload.clone());
        match &self.parcel {
            Parcel::Tell(_) => PeerMessage::Deliver { seq, shard, payload },
            Parcel::Ask(_, replier) => {
                let timeout_ms = replier.remaining().as_millis().min(u128::from(u64::MAX)) as u64;
                PeerMessage::Ask { seq, shard, payload, timeout_ms }
            }
        }
    }
}

struct Link<M, R> {
    id: u64,
    outgoing: mpsc::UnboundedSender<Outgoing<M, R>>,
    /// Payload bytes queued or unacknowledged on this link.
    pending: Arc<AtomicUsize>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<M: Serialize + DeserializeOwned + Send + 'static, R: Serialize + DeserializeOwned + Send + 'static>
    PeerTransport<M, R>
{
    /// Listens on `listen` (an address this region is reachable through,
    /// usually its registered address, or `0.0.0.0:PORT` behind it) and
    /// accepts peers until the region detaches. Call inside a Tokio runtime.
    pub async fn bind(mut config: PeerConfig, listen: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let local = listener.local_addr()?;
        if config.address.is_empty() {
            config.address = local.to_string();
        }
        let (stopping, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            local,
            inbox: Mutex::new(None),
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
            stopping,
        });
        tokio::spawn(accept_loop(listener, Arc::downgrade(&shared), stopped));
        Ok(PeerTransport { shared })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.shared.local
    }

    /// The region's registered address: the one to give [`RegionConfig`](super::RegionConfig).
    pub fn address(&self) -> &str {
        &self.shared.config.address
    }

    /// Queues a message or request for the link to `to` (dialling it first
    /// if there is none); what cannot be queued comes back.
    fn carry(&self, to: &str, shard: &str, parcel: Parcel<M, R>) -> Result<(), (TransportError, Parcel<M, R>)> {
        let unreachable = |reason: String| TransportError::Unreachable { address: to.to_owned(), reason };
        let payload = match serde_json::to_vec(parcel.message()) {
            Ok(payload) => payload,
            Err(error) => return Err((unreachable(format!("not JSON: {error}")), parcel)),
        };
        if payload.len() + shard.len() + 32 > MAX_FRAME_BYTES {
            let reason = format!("a message of {} bytes does not fit a 1 MiB frame", payload.len());
            return Err((unreachable(reason), parcel));
        }
        let mut links = lock(&self.shared.links);
        let link = links.entry(to.to_owned()).or_insert_with(|| {
            let (link, receiver) = new_link(&self.shared);
            tokio::spawn(dial(to.to_owned(), link.id, receiver, link.pending.clone(), self.shared.clone()));
            link
        });
        let waiting = link.pending.load(Ordering::Relaxed);
        if waiting + payload.len() > MAX_UNACKED_BYTES {
            return Err((TransportError::PeerBusy { address: to.to_owned(), bytes: waiting }, parcel));
        }
        link.pending.fetch_add(payload.len(), Ordering::Relaxed);
        let size = payload.len();
        if let Err(mpsc::error::SendError(back)) =
            link.outgoing.send(Outgoing { shard: shard.to_owned(), parcel, payload })
        {
            // The link ended between the look-up and now: the region retries.
            link.pending.fetch_sub(size, Ordering::Relaxed);
            links.remove(to);
            return Err((unreachable("the connection ended".to_owned()), back.parcel));
        }
        Ok(())
    }
}

async fn accept_loop<
    M: Serialize + DeserializeOwned + Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
>(
    listener: TcpListener,
    shared: Weak<Shared<M, R>>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => return,
        };
        match accepted {
            Ok((stream, from)) => {
                let Some(shared) = shared.upgrade() else { return };
                tokio::spawn(async move {
                    if let Err(reason) = serve(stream, shared).await {
                        debug!(%from, %reason, "an inter-region connection ended");
                    }
                });
            }
            Err(error) => {
                warn!(%error, "accepting an inter-region connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One peer that dialled this region: the upgrade (path, token), its
/// `PeerHello`, then the connection both ways.
async fn serve<M: Serialize + DeserializeOwned + Send + 'static, R: Serialize + DeserializeOwned + Send + 'static>(
    stream: TcpStream,
    shared: Arc<Shared<M, R>>,
) -> Result<(), String> {
    let token = shared.config.token.clone();
    #[allow(
        clippy::result_large_err,
        reason = "tungstenite's upgrade callback answers its own Result<Response, ErrorResponse>"
    )]
    let check = move |request: &Request, response: Response| match refusal(token.as_deref(), request) {
        None => Ok(response),
        Some((status, text)) => {
            let mut answer = ErrorResponse::new(Some(text.to_owned()));
            *answer.status_mut() = status;
            Err(answer)
        }
    };
    // Frames are small and answered at once: no Nagle delay (40 ms against
    // a delayed acknowledgement).
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut socket = tokio_tungstenite::accept_hdr_async(stream, check).await.map_err(|e| e.to_string())?;
    let first = tokio::time::timeout(CONNECT_TIMEOUT, socket.next()).await.map_err(|_| "no PeerHello".to_owned())?;
    let hello: PeerHello = match first {
        Some(Ok(Message::Binary(frame))) => decode(&frame).map_err(|e| e.to_string())?,
        other => return Err(format!("expected a PeerHello, got {other:?}")),
    };
    let refusal = if hello.protocol != PEER_PROTOCOL_VERSION {
        Some(format!(
            "inter-region wire version {} is not supported; this region speaks {PEER_PROTOCOL_VERSION}",
            hello.protocol
        ))
    } else if hello.entity_type != shared.config.entity_type {
        Some(format!("this region serves {}, not {}", shared.config.entity_type, hello.entity_type))
    } else {
        None
    };
    if let Some(reason) = refusal {
        let _ = send(&mut socket, &PeerMessage::Refused { reason: reason.clone() }).await;
        let _ = socket.close(None).await;
        return Err(reason);
    }
    let welcome = PeerMessage::Welcome {
        protocol: PEER_PROTOCOL_VERSION,
        address: shared.config.address.clone(),
        incarnation: shared.config.incarnation,
    };
    send(&mut socket, &welcome).await.map_err(|e| e.to_string())?;
    // This connection carries this region's messages to the dialler too,
    // unless another already does. Its sender lives here as long as the
    // connection, so it stays open either way.
    let (link, outgoing) = new_link(&shared);
    let (link_id, pending, _sender) = (link.id, link.pending.clone(), link.outgoing.clone());
    lock(&shared.links).entry(hello.from.clone()).or_insert(link);
    run(socket, hello.from, link_id, outgoing, pending, &shared).await
}

/// Why an upgrade request is refused: not the inter-region path, or not
/// the region token (when this region has one).
fn refusal(token: Option<&str>, request: &Request) -> Option<(StatusCode, &'static str)> {
    if request.uri().path() != PEER_PATH {
        return Some((StatusCode::NOT_FOUND, "not the inter-region path"));
    }
    let given = request.headers().get("authorization").and_then(|v| v.to_str().ok());
    match token {
        Some(token) if given != Some(format!("Bearer {token}").as_str()) => {
            Some((StatusCode::UNAUTHORIZED, "a missing or wrong region token"))
        }
        _ => None,
    }
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    message: &PeerMessage,
) -> Result<(), tungstenite::Error> {
    let frame = encode(message).map_err(|e| tungstenite::Error::Io(std::io::Error::other(e.to_string())))?;
    socket.send(Message::Binary(frame.into())).await
}

/// Writes `messages` and flushes once.
async fn send_all<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    messages: &[PeerMessage],
) -> Result<(), tungstenite::Error> {
    for message in messages {
        let frame = encode(message).map_err(|e| tungstenite::Error::Io(std::io::Error::other(e.to_string())))?;
        socket.feed(Message::Binary(frame.into())).await?;
    }
    socket.flush().await
}

fn new_link<M, R>(shared: &Shared<M, R>) -> (Link<M, R>, mpsc::UnboundedReceiver<Outgoing<M, R>>) {
    let (outgoing, receiver) = mpsc::unbounded_channel();
    let id = shared.next_link.fetch_add(1, Ordering::Relaxed);
    (Link { id, outgoing, pending: Arc::new(AtomicUsize::new(0)) }, receiver)
}

/// Dials `to` and runs the connection; what cannot be carried is handed back.
async fn dial<M: Serialize + DeserializeOwned + Send + 'static, R: Serialize + DeserializeOwned + Send + 'static>(
    to: String,
    link_id: u64,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing<M, R>>,
    pending: Arc<AtomicUsize>,
    shared: Arc<Shared<M, R>>,
) {
    let socket = match tokio::time::timeout(CONNECT_TIMEOUT, handshake(&to, &shared)).await {
        Ok(Ok(socket)) => socket,
        failed => {
            let reason = match failed {
                Ok(Err(reason)) => reason,
                _ => format!("no answer from {to} within {CONNECT_TIMEOUT:?}"),
            };
            forget_link(&shared, &to, link_id);
            let mut left = VecDeque::new();
            close_and_drain(&mut outgoing, &mut left);
            hand_back(&shared, &to, left, &reason, &pending);
            return;
        }
    };
    if let Err(reason) = run(socket, to.clone(), link_id, outgoing, pending, &shared).await {
        debug!(%to, %reason, "an inter-region connection ended");
    }
}

async fn handshake<M, R>(
    to: &str,
    shared: &Shared<M, R>,
) -> Result<WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>, String> {
    let mut request =
        format!("ws://{to}{PEER_PATH}").into_client_request().map_err(|e| format!("cannot dial {to}: {e}"))?;
    if let Some(token) = &shared.config.token {
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
        request.headers_mut().insert("authorization", value);
    }
    let (mut socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
        .await
        .map_err(|e| format!("cannot connect to {to}: {e}"))?;
    let hello = PeerHello {
        protocol: PEER_PROTOCOL_VERSION,
        entity_type: shared.config.entity_type.clone(),
        from: shared.config.address.clone(),
        incarnation: shared.config.incarnation,
    };
    let frame = encode(&hello).map_err(|e| e.to_string())?;
    socket.send(Message::Binary(frame.into())).await.map_err(|e| format!("{to}: {e}"))?;
    match socket.next().await {
        Some(Ok(Message::Binary(frame))) => match decode::<PeerMessage>(&frame) {
            Ok(PeerMessage::Welcome { .. }) => Ok(socket),
            Ok(PeerMessage::Refused { reason }) => Err(format!("{to} refused the connection: {reason}")),
            other => Err(format!("{to} answered the PeerHello with {other:?}")),
        },
        other => Err(format!("{to} answered the PeerHello with {other:?}")),
    }
}

/// Closes a link's queue and moves what still waits in it behind `left`
/// (numbered 0: never sent), so it is handed back with the rest.
fn close_and_drain<M, R>(
    outgoing: &mut mpsc::UnboundedReceiver<Outgoing<M, R>>,
    left: &mut VecDeque<(u64, Outgoing<M, R>)>,
) {
    outgoing.close();
    while let Ok(waiting) = outgoing.try_recv() {
        left.push_back((0, waiting));
    }
}

/// Drops the link to `to` if it is still `link_id` (a newer one stays).
fn forget_link<M, R>(shared: &Shared<M, R>, to: &str, link_id: u64) {
    let mut links = lock(&shared.links);
    if links.get(to).is_some_and(|link| link.id == link_id) {
        links.remove(to);
    }
}

/// Hands messages and requests back to the region, each shard's in the order sent.
fn hand_back<M, R>(
    shared: &Shared<M, R>,
    to: &str,
    messages: VecDeque<(u64, Outgoing<M, R>)>,
    reason: &str,
    pending: &AtomicUsize,
) {
    if messages.is_empty() {
        return;
    }
    let Some(inbox) = lock(&shared.inbox).clone() else { return };
    let error = TransportError::Unreachable { address: to.to_owned(), reason: reason.to_owned() };
    let mut by_shard: Vec<(String, Vec<Parcel<M, R>>)> = Vec::new();
    for (_, outgoing) in messages {
        pending.fetch_sub(outgoing.payload.len(), Ordering::Relaxed);
        match by_shard.iter_mut().find(|(shard, _)| *shard == outgoing.shard) {
            Some((_, list)) => list.push(outgoing.parcel),
            None => by_shard.push((outgoing.shard, vec![outgoing.parcel])),
        }
    }
    for (shard, list) in by_shard {
        inbox.parcels_not_delivered(to, &shard, list, &error);
    }
}

/// One connection's state after its handshake.
struct Connection<'a, M, R> {
    peer: String,
    shared: &'a Arc<Shared<M, R>>,
    pending: Arc<AtomicUsize>,
    next_seq: u64,
    /// This region's messages and requests sent and not yet acknowledged.
    unacked: VecDeque<(u64, Outgoing<M, R>)>,
    /// This region's requests the peer took and has not answered yet.
    awaiting: HashMap<u64, Replier<R>>,
    /// Answers to the peer's requests, from wherever they were answered.
    answers: mpsc::UnboundedSender<PeerMessage>,
}

/// A connection after its handshake, both ways: this region's messages and
/// requests out (numbered, kept until acknowledged, requests until
/// answered), the peer's in (to the inbox, acknowledged, requests answered
/// on this connection). When it ends, what was not acknowledged goes back
/// to the region; requests taken and unanswered fail by name.
async fn run<M, R, S>(
    mut socket: WebSocketStream<S>,
    peer: String,
    link_id: u64,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing<M, R>>,
    pending: Arc<AtomicUsize>,
    shared: &Arc<Shared<M, R>>,
) -> Result<(), String>
where
    M: Serialize + DeserializeOwned + Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (answers, mut answered) = mpsc::unbounded_channel();
    let mut connection = Connection {
        peer: peer.clone(),
        shared,
        pending,
        next_seq: 1,
        unacked: VecDeque::new(),
        awaiting: HashMap::new(),
        answers,
    };
    let mut stopping = shared.stopping.subscribe();
    let outcome = loop {
        if *stopping.borrow() {
            break Ok(());
        }
        tokio::select! {
            _ = stopping.changed() => break Ok(()),
            next = outgoing.recv() => {
                let Some(message) = next else { break Ok(()) };
                // What else waits goes in the same write (one flush for up
                // to WRITE_BATCH frames).
                let mut batch = vec![message];
                while batch.len() < WRITE_BATCH {
                    match outgoing.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                let mut frames = Vec::with_capacity(batch.len());
                for message in batch {
                    let seq = connection.next_seq;
                    connection.next_seq += 1;
                    frames.push(message.frame(seq));
                    connection.unacked.push_back((seq, message));
                }
                if let Err(error) = send_all(&mut socket, &frames).await {
                    break Err(format!("sending to {peer} failed: {error}"));
                }
            }
            Some(answer) = answered.recv() => {
                if let Err(error) = send(&mut socket, &answer).await {
                    break Err(format!("answering {peer} failed: {error}"));
                }
            }
            next = socket.next() => {
                let frame = match next {
                    Some(Ok(Message::Binary(frame))) => frame,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | None => break Err(format!("{peer} closed the connection")),
                    Some(Ok(other)) => break Err(format!("{peer} sent a frame that is not binary: {other:?}")),
                    Some(Err(error)) => break Err(format!("the connection to {peer} failed: {error}")),
                };
                let message: PeerMessage = match decode(&frame) {
                    Ok(message) => message,
                    Err(error) => break Err(format!("{peer} sent a malformed frame: {error}")),
                };
                match connection.on_frame(message) {
                    Ok(Some(answer)) => {
                        if let Err(error) = send(&mut socket, &answer).await {
                            break Err(format!("answering {peer} failed: {error}"));
                        }
                    }
                    Ok(None) => {}
                    Err(error) => break Err(error),
                }
            }
        }
    };
    forget_link(shared, &peer, link_id);
    close_and_drain(&mut outgoing, &mut connection.unacked);
    let reason = match &outcome {
        Ok(()) => "the region stopped".to_owned(),
        Err(reason) => reason.clone(),
    };
    for (_, replier) in connection.awaiting.drain() {
        let shard = replier.shard().to_owned();
        let reason = format!("the connection to its home {peer} ended before the answer: {reason}");
        replier.fail(AskError::Failed { shard, reason });
    }
    hand_back(shared, &peer, std::mem::take(&mut connection.unacked), &reason, &connection.pending);
    let _ = socket.close(None).await;
    outcome
}

impl<M, R> Connection<'_, M, R>
where
    M: Serialize + DeserializeOwned + Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
{
    /// Handles one frame from the peer; returns the frame to answer with, if any.
    fn on_frame(&mut self, message: PeerMessage) -> Result<Option<PeerMessage>, String> {
        let inbox = lock(&self.shared.inbox).clone();
        let answer = match message {
            PeerMessage::Deliver { seq, shard, payload } => match (serde_json::from_slice::<M>(&payload), inbox) {
                (Ok(message), Some(inbox)) => match inbox.deliver(&shard, message) {
                    Ok(()) => PeerMessage::Ack { through: seq },
                    Err(undelivered) => PeerMessage::NotDelivered { seq, reason: undelivered.error.to_string() },
                },
                (Err(error), _) => PeerMessage::NotDelivered { seq, reason: format!("not a message: {error}") },
                (_, None) => PeerMessage::NotDelivered { seq, reason: "the region has stopped".to_owned() },
            },
            PeerMessage::Ask { seq, shard, payload, timeout_ms } => {
                match (serde_json::from_slice::<M>(&payload), inbox) {
                    (Ok(request), Some(inbox)) => {
                        let answers = self.answers.clone();
                        let replier = Replier::new(&shard, Duration::from_millis(timeout_ms), move |outcome| {
                            let _ = answers.send(answer_frame(seq, outcome));
                        });
                        match inbox.ask(&shard, request, replier) {
                            Ok(()) => PeerMessage::Ack { through: seq },
                            Err(undelivered) => {
                                undelivered.message.1.disarm();
                                PeerMessage::NotDelivered { seq, reason: undelivered.error.to_string() }
                            }
                        }
                    }
                    (Err(error), _) => PeerMessage::AskFailed { seq, reason: format!("not a request: {error}") },
                    (_, None) => PeerMessage::NotDelivered { seq, reason: "the region has stopped".to_owned() },
                }
            }
            PeerMessage::Ack { through } => {
                while self.unacked.front().is_some_and(|(seq, _)| *seq <= through) {
                    if let Some((seq, done)) = self.unacked.pop_front() {
                        self.pending.fetch_sub(done.payload.len(), Ordering::Relaxed);
                        if let Parcel::Ask(_, replier) = done.parcel {
                            self.awaiting.insert(seq, replier);
                        }
                    }
                }
                return Ok(None);
            }
            PeerMessage::NotDelivered { seq, reason } => {
                if let Some(refused) = self.take_unacked(seq) {
                    hand_back(self.shared, &self.peer, VecDeque::from([refused]), &reason, &self.pending);
                }
                return Ok(None);
            }
            PeerMessage::Reply { seq, payload } => {
                if let Some(replier) = self.take_request(seq) {
                    match serde_json::from_slice::<R>(&payload) {
                        Ok(reply) => replier.reply(reply),
                        Err(error) => {
                            let shard = replier.shard().to_owned();
                            replier
                                .fail(AskError::Failed { shard, reason: format!("the answer is not a reply: {error}") })
                        }
                    }
                }
                return Ok(None);
            }
            PeerMessage::AskFailed { seq, reason } => {
                if let Some(replier) = self.take_request(seq) {
                    let shard = replier.shard().to_owned();
                    replier.fail(AskError::Failed { shard, reason });
                }
                return Ok(None);
            }
            PeerMessage::Welcome { .. } | PeerMessage::Refused { .. } => {
                return Err(format!("{} sent a handshake frame after the handshake", self.peer));
            }
        };
        Ok(Some(answer))
    }

    /// Takes the unacknowledged message or request numbered `seq`.
    fn take_unacked(&mut self, seq: u64) -> Option<(u64, Outgoing<M, R>)> {
        let at = self.unacked.iter().position(|(s, _)| *s == seq)?;
        self.unacked.remove(at)
    }

    /// Takes the request numbered `seq`, acknowledged or not.
    fn take_request(&mut self, seq: u64) -> Option<Replier<R>> {
        if let Some(replier) = self.awaiting.remove(&seq) {
            return Some(replier);
        }
        let (_, outgoing) = self.take_unacked(seq)?;
        self.pending.fetch_sub(outgoing.payload.len(), Ordering::Relaxed);
        match outgoing.parcel {
            Parcel::Ask(_, replier) => Some(replier),
            Parcel::Tell(_) => None,
        }
    }
}

/// The frame answering the peer's request numbered `seq`.
fn answer_frame<R: Serialize>(seq: u64, outcome: Result<R, AskError>) -> PeerMessage {
    match outcome.map(|reply| serde_json::to_vec(&reply)) {
        Ok(Ok(payload)) if payload.len() + 32 <= MAX_FRAME_BYTES => PeerMessage::Reply { seq, payload },
        Ok(Ok(payload)) => PeerMessage::AskFailed {
            seq,
            reason: format!("an answer of {} bytes does not fit a 1 MiB frame", payload.len()),
        },
        Ok(Err(error)) => PeerMessage::AskFailed { seq, reason: format!("the answer is not JSON: {error}") },
        Err(AskError::Failed { reason, .. }) => PeerMessage::AskFailed { seq, reason },
        Err(error) => PeerMessage::AskFailed { seq, reason: error.to_string() },
    }
}

impl<M: Serialize + DeserializeOwned + Send + 'static, R: Serialize + DeserializeOwned + Send + 'static> Transport<M, R>
    for PeerTransport<M, R>
{
    fn send(&self, to: &str, shard: &str, message: M) -> Result<(), Undelivered<M>> {
        self.carry(to, shard, Parcel::Tell(message)).map_err(|(error, parcel)| match parcel {
            Parcel::Tell(message) | Parcel::Ask(message, _) => Undelivered::new(error, message),
        })
    }

    fn ask(&self, to: &str, shard: &str, message: M, reply: Replier<R>) -> Result<(), Undelivered<(M, Replier<R>)>> {
        self.carry(to, shard, Parcel::Ask(message, reply)).map_err(|(error, parcel)| match parcel {
            Parcel::Ask(message, reply) => Undelivered::new(error, (message, reply)),
            Parcel::Tell(_) => unreachable!("a request comes back as a request"),
        })
    }

    fn attach(&self, inbox: Inbox<M, R>) {
        *lock(&self.shared.inbox) = Some(inbox);
    }

    fn detach(&self, inbox: &Inbox<M, R>) {
        let mut attached = lock(&self.shared.inbox);
        if attached.as_ref().is_some_and(|a| a.same_inbox(inbox)) {
            *attached = None;
            self.shared.stopping.send_replace(true);
            lock(&self.shared.links).clear();
        }
    }
}
