//! One WebSocket session with the node: connect, `Hello`/`Welcome`, then
//! frames both ways until either side hangs up. Runs as its own task and
//! reports to the region's driver through [`SessionEvent`]s; the driver
//! hangs up by dropping the outgoing sender it got in
//! [`SessionEvent::Connected`].

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{debug, warn};

use crate::protocol::{
    self, FRAMES_PER_FLUSH, FrameError, Hello, MAX_FRAME_BYTES, NodeMessage, PROTOCOL_VERSION, RegionMessage,
};

/// What a session task tells the driver. `generation` numbers the attempts
/// so the driver ignores a late word from an earlier session.
pub(crate) enum SessionEvent {
    /// The node welcomed the region; messages to it go through `outgoing`.
    Connected { generation: u64, outgoing: mpsc::UnboundedSender<RegionMessage> },
    /// A message from the node.
    Message { generation: u64, message: NodeMessage },
    /// The node refused the session (`Refused`); `Closed` follows.
    Refused { generation: u64, reason: String },
    /// The session is over (or never started).
    Closed { generation: u64, reason: String },
}

/// Where and how to connect.
pub(crate) struct SessionParams {
    /// `ws://host:port/v1/regions/connect` of every node; attempts go round
    /// them until one leads or redirects to the leader.
    pub(crate) urls: Vec<String>,
    /// The leader's connect URL, once a node redirected to it: tried first
    /// until a session with it fails.
    pub(crate) leader: std::sync::Mutex<Option<String>>,
    /// For a `wss://` URL.
    pub(crate) tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub(crate) token: Option<String>,
    pub(crate) entity_type: String,
    /// For the TCP and WebSocket handshakes and the `Welcome`.
    pub(crate) handshake_timeout: Duration,
    /// The application's attributes of a shard, sent with its home request
    /// to a node of protocol version 5 or later.
    pub(crate) shard_attributes: Option<super::ShardAttributesOf>,
    /// The capacity the region declares, sent with its registration to a
    /// node of protocol version 5 or later.
    pub(crate) capacity: crate::capacity::RegionCapacity,
}

impl SessionParams {
    /// `message` as sent to a node speaking `protocol`: a home request
    /// carries the shard's attributes when the application has some, and a
    /// registration the region's capacity when it declares one, if the node
    /// reads them (version 5).
    fn as_sent(&self, message: RegionMessage, protocol: u32) -> RegionMessage {
        match (message, &self.shard_attributes) {
            (RegionMessage::Register(register), _) if protocol >= 5 && !self.capacity.is_empty() => {
                RegionMessage::RegisterWithCapacity { register, capacity: self.capacity.clone() }
            }
            (RegionMessage::GetShardHome { shard }, Some(attributes_of)) if protocol >= 5 => {
                let attributes = attributes_of(&shard);
                if attributes.is_empty() {
                    RegionMessage::GetShardHome { shard }
                } else {
                    RegionMessage::GetShardHomeWithAttributes { shard, attributes }
                }
            }
            (message, _) => message,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot connect to {url}: {source}")]
    Connect { url: String, source: tungstenite::Error },
    #[error("no answer from {url} within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("the region token cannot be sent as a header: {0}")]
    Token(String),
    #[error("the WebSocket failed: {0}")]
    WebSocket(#[from] tungstenite::Error),
    #[error("bad frame from the node: {0}")]
    Frame(#[from] FrameError),
    #[error("the node answered the Hello with {0} instead of Welcome or Refused")]
    Unexpected(String),
    #[error("the node sent a text frame; the protocol uses binary frames")]
    Text,
    #[error("the node closed the connection during the handshake")]
    ClosedEarly,
    #[error("{url} redirected to the leader at {leader}, which redirected again")]
    RedirectLoop { url: String, leader: String },
    #[error("{url} redirected to {leader:?}, which is not a node URL: {reason}")]
    BadRedirect { url: String, leader: String, reason: String },
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Runs one session attempt to its end, then reports [`SessionEvent::Closed`].
pub(crate) async fn run(
    params: std::sync::Arc<SessionParams>,
    generation: u64,
    events: mpsc::UnboundedSender<SessionEvent>,
) {
    let reason = match session(&params, generation, &events).await {
        Ok(reason) => reason,
        Err(error) => error.to_string(),
    };
    debug!(generation, %reason, "region session ended");
    let _ = events.send(SessionEvent::Closed { generation, reason });
}

impl SessionParams {
    /// The URL attempt `generation` starts with: the leader's when known,
    /// else the nodes in turn.
    fn first_url(&self, generation: u64) -> String {
        let leader = self.leader.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        leader.unwrap_or_else(|| self.urls[(generation as usize) % self.urls.len()].clone())
    }

    fn set_leader(&self, url: Option<String>) {
        *self.leader.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = url;
    }
}

/// How the handshake with one node ended.
enum Handshake {
    /// Welcomed in the protocol version the node speaks: the session goes on.
    Welcome(Box<Socket>, u32),
    /// Sent to the leader's base URL.
    Redirect(String),
    /// Refused, with the reason reported.
    Refused(String),
}

async fn session(
    params: &SessionParams,
    generation: u64,
    events: &mpsc::UnboundedSender<SessionEvent>,
) -> Result<String, SessionError> {
    let first = params.first_url(generation);
    let (mut socket, node_protocol) = match handshake(params, &first, generation, events).await {
        Ok(Handshake::Welcome(socket, protocol)) => (*socket, protocol),
        Ok(Handshake::Refused(reason)) => return Ok(reason),
        Ok(Handshake::Redirect(leader)) => {
            let url = crate::region::connect_url_of(&leader).map_err(|e| SessionError::BadRedirect {
                url: first.clone(),
                leader: leader.clone(),
                reason: e.to_string(),
            })?;
            debug!(from = %first, to = %url, "redirected to the leader");
            params.set_leader(Some(url.clone()));
            match handshake(params, &url, generation, events).await {
                Ok(Handshake::Welcome(socket, protocol)) => (*socket, protocol),
                Ok(Handshake::Refused(reason)) => return Ok(reason),
                Ok(Handshake::Redirect(_)) => {
                    params.set_leader(None);
                    return Err(SessionError::RedirectLoop { url: first, leader: url });
                }
                Err(error) => {
                    params.set_leader(None);
                    return Err(error);
                }
            }
        }
        Err(error) => {
            params.set_leader(None);
            return Err(error);
        }
    };
    let (outgoing, mut to_node) = mpsc::unbounded_channel();
    if events.send(SessionEvent::Connected { generation, outgoing }).is_err() {
        close(&mut socket).await;
        return Ok("the region stopped".to_owned());
    }
    let ended = loop {
        tokio::select! {
            message = to_node.recv() => match message {
                Some(message) => {
                    // Everything already queued goes out before one flush.
                    let message = params.as_sent(message, node_protocol);
                    socket.feed(Message::Binary(protocol::encode(&message)?.into())).await?;
                    let mut batched = 1;
                    while batched < FRAMES_PER_FLUSH
                        && let Ok(more) = to_node.try_recv()
                    {
                        let more = params.as_sent(more, node_protocol);
                        socket.feed(Message::Binary(protocol::encode(&more)?.into())).await?;
                        batched += 1;
                    }
                    socket.flush().await?;
                }
                None => {
                    close(&mut socket).await;
                    return Ok("the region hung up".to_owned());
                }
            },
            message = next_message(&mut socket) => match message {
                Ok(Some(message)) => {
                    if events.send(SessionEvent::Message { generation, message }).is_err() {
                        close(&mut socket).await;
                        return Ok("the region stopped".to_owned());
                    }
                }
                Ok(None) => break Ok("the node closed the session".to_owned()),
                Err(error) => break Err(error),
            },
        }
    };
    // The node may have stopped leading: ask the nodes in turn again.
    params.set_leader(None);
    ended
}

/// Connects to `url`, says `Hello` and reads the answer.
async fn handshake(
    params: &SessionParams,
    url: &str,
    generation: u64,
    events: &mpsc::UnboundedSender<SessionEvent>,
) -> Result<Handshake, SessionError> {
    let timeout = params.handshake_timeout;
    let timed_out = || SessionError::Timeout { url: url.to_owned(), timeout };
    let mut request =
        url.into_client_request().map_err(|source| SessionError::Connect { url: url.to_owned(), source })?;
    if let Some(token) = &params.token {
        let value =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| SessionError::Token(e.to_string()))?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let config =
        WebSocketConfig::default().max_message_size(Some(MAX_FRAME_BYTES)).max_frame_size(Some(MAX_FRAME_BYTES));
    let connected =
        tokio::time::timeout(timeout, connect(request, config, params.tls.clone())).await.map_err(|_| timed_out())?;
    let (mut socket, _) = match connected {
        Ok(connected) => connected,
        // The node refuses a missing or wrong region token before the upgrade.
        Err(tokio_tungstenite::tungstenite::Error::Http(response))
            if matches!(response.status().as_u16(), 401 | 403) =>
        {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let reason = format!("the node refused the region token ({}): {body}", response.status());
            let _ = events.send(SessionEvent::Refused { generation, reason: reason.clone() });
            return Ok(Handshake::Refused(reason));
        }
        Err(source) => return Err(SessionError::Connect { url: url.to_owned(), source }),
    };
    let hello = Hello { protocol: PROTOCOL_VERSION, entity_type: params.entity_type.clone() };
    socket.send(Message::Binary(protocol::encode(&hello)?.into())).await?;
    let first = tokio::time::timeout(timeout, next_message(&mut socket)).await.map_err(|_| timed_out())??;
    match first {
        Some(NodeMessage::Welcome { protocol }) => {
            if protocol != PROTOCOL_VERSION {
                warn!(node = protocol, region = PROTOCOL_VERSION, "the node speaks another protocol version");
            }
            Ok(Handshake::Welcome(Box::new(socket), protocol))
        }
        Some(NodeMessage::Redirect { leader }) => {
            close(&mut socket).await;
            Ok(Handshake::Redirect(leader))
        }
        Some(NodeMessage::Refused { reason }) => {
            let _ = events.send(SessionEvent::Refused { generation, reason: reason.clone() });
            close(&mut socket).await;
            Ok(Handshake::Refused(format!("the node refused the session: {reason}")))
        }
        Some(other) => Err(SessionError::Unexpected(format!("{other:?}"))),
        None => Err(SessionError::ClosedEarly),
    }
}

/// The next protocol message; `None` when the node closed the session.
/// Opens the WebSocket, over TLS with `tls` for a `wss://` URL.
async fn connect(
    request: tungstenite::handshake::client::Request,
    config: WebSocketConfig,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Result<(Socket, tungstenite::handshake::client::Response), tungstenite::Error> {
    let connector = tls.map(tokio_tungstenite::Connector::Rustls);
    tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, connector).await
}

async fn next_message(socket: &mut Socket) -> Result<Option<NodeMessage>, SessionError> {
    loop {
        match socket.next().await {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Err(error)) => return Err(error.into()),
            Some(Ok(Message::Binary(bytes))) => return Ok(Some(protocol::decode(&bytes)?)),
            Some(Ok(Message::Text(_))) => return Err(SessionError::Text),
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
        }
    }
}

/// Sends a close frame and waits (briefly) for the node's.
async fn close(socket: &mut Socket) {
    if socket.close(None).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(1), async { while let Some(Ok(_)) = socket.next().await {} })
            .await;
    }
}
