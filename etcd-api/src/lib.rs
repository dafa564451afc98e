//! # shardalloc-etcd: the part of etcd's v3 API the node uses
//!
//! The node keeps its state in etcd and elects its leader there. This crate
//! is the whole of what it needs from etcd: the KV service (range, txn,
//! delete, compact), leases (grant, revoke, keep-alive, time to live) and
//! user/password authentication, over gRPC with TLS.
//!
//! The protocol code is **generated once and kept in the repository**
//! (`src/generated/`, from etcd's own protocol files trimmed to those
//! services in `proto/`), so building this crate needs no `protoc`, no
//! protobuf include files and no build script. `cargo xtask etcd-api`
//! regenerates it with a protobuf compiler written in Rust (`generate/`).
//!
//! - [`Client`]: one connection pool over every endpoint given (a request
//!   goes to one that answers), each request bounded by a timeout;
//! - [`ops`]: comparisons, operations and transactions, built from the
//!   generated messages ([`pb`]);
//! - [`Error`]: what went wrong, naming etcd's own answer.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tonic::codegen::InterceptedService;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

pub mod ops;

#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod generated {
    pub mod mvccpb {
        include!("generated/mvccpb.rs");
    }
    pub mod etcdserverpb {
        include!("generated/etcdserverpb.rs");
    }
}

/// etcd's messages, as generated from its protocol files.
pub use generated::etcdserverpb as pb;
/// A key, its value and its revisions, as etcd stores them.
pub use generated::mvccpb::KeyValue;

use pb::auth_client::AuthClient;
use pb::kv_client::KvClient;
use pb::lease_client::LeaseClient;

/// How many endpoint changes the balanced channel buffers (only the
/// endpoints given at connect are ever sent).
const ENDPOINT_BUFFER: usize = 64;

/// A failure talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoint,
    /// An endpoint that is not a URL (or host:port).
    #[error("the etcd endpoint {endpoint:?} is not a valid URL: {source}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why not.
        source: tonic::transport::Error,
    },
    /// TLS settings that cannot be used.
    #[error("the etcd TLS settings for {endpoint:?} cannot be used: {source}")]
    Tls {
        /// The endpoint they were for.
        endpoint: String,
        /// Why not.
        source: tonic::transport::Error,
    },
    /// etcd (or the connection to it) answered a request with an error:
    /// its code and message, e.g. `mvcc: required revision has been compacted`.
    #[error("etcd answered {}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
    /// The user and password were refused.
    #[error("etcd refused the user {user:?}: {status}")]
    Authentication {
        /// The user.
        user: String,
        /// etcd's answer.
        status: Status,
    },
    /// TLS settings with an `http://` endpoint.
    #[error("the etcd endpoint {endpoint:?} is plain http:// but TLS settings were given; use https://")]
    PlainWithTls {
        /// The endpoint as given.
        endpoint: String,
    },
    /// The keep-alive stream's sending side closed (the stream ended).
    #[error("the etcd lease keep-alive stream is closed")]
    KeepAliveClosed,
}

/// TLS to etcd: the CA that signs its members' certificates, and this
/// client's own certificate and key (PEM), when etcd asks for one.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// The CA certificate(s), PEM; without, the system's roots are not used:
    /// etcd members normally have a private CA.
    pub ca_pem: Option<Vec<u8>>,
    /// This client's certificate and key, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// How to connect. See [`Client::connect`].
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Every request's bound (a keep-alive stream's opening included).
    pub timeout: Duration,
    /// A connection's bound.
    pub connect_timeout: Duration,
    /// HTTP/2 pings: their interval and how long an answer may take, so a
    /// dead member under an idle connection is noticed.
    pub keep_alive: Option<(Duration, Duration)>,
    /// A user and password, for an etcd with authentication on.
    pub user: Option<(String, String)>,
    /// TLS (then `http://` endpoints are refused, and endpoints without a
    /// scheme are taken as `https://`).
    pub tls: Option<TlsOptions>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            keep_alive: Some((Duration::from_secs(2), Duration::from_secs(5))),
            user: None,
            tls: None,
        }
    }
}

/// The authentication token every request carries, once authenticated.
#[derive(Clone, Default)]
struct Token(Arc<RwLock<Option<AsciiMetadataValue>>>);

impl Token {
    fn set(&self, token: Option<AsciiMetadataValue>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = token;
    }
}

impl Interceptor for Token {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = self.0.read().unwrap_or_else(PoisonError::into_inner).clone() {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

type Authorised = InterceptedService<Channel, Token>;

/// A client of one etcd cluster; cheap to clone (clones share the
/// connections and the token).
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    token: Token,
    user: Option<Arc<(String, String)>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("user", &self.user.as_ref().map(|u| u.0.clone())).finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the cluster at `endpoints` (URLs, or `host:port` taken as
    /// `http://`, or `https://` with TLS). Connections are made lazily and
    /// again after a failure; a request goes to an endpoint that answers.
    /// With a user, authenticates before returning.
    pub async fn connect(endpoints: &[String], options: ConnectOptions) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::NoEndpoint);
        }
        let built: Vec<Endpoint> = endpoints.iter().map(|e| endpoint(e, &options)).collect::<Result<_, _>>()?;
        let (channel, changes) = Channel::balance_channel(ENDPOINT_BUFFER);
        for endpoint in built {
            let uri = endpoint.uri().clone();
            changes
                .send(tonic::transport::channel::Change::Insert(uri, endpoint))
                .await
                .expect("the balanced channel takes its first endpoints");
        }
        let client = Client { channel, token: Token::default(), user: options.user.map(Arc::new) };
        if client.user.is_some() {
            client.authenticate().await?;
        }
        Ok(client)
    }

    fn kv(&self) -> KvClient<Authorised> {
        KvClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    fn lease(&self) -> LeaseClient<Authorised> {
        LeaseClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    /// Gets a token for the user and puts it on every later request.
    async fn authenticate(&self) -> Result<(), Error> {
        let Some(user) = &self.user else { return Ok(()) };
        let (name, password) = (user.0.clone(), user.1.clone());
        let request = pb::AuthenticateRequest { name: name.clone(), password };
        let answer = AuthClient::new(self.channel.clone())
            .authenticate(request)
            .await
            .map_err(|status| Error::Authentication { user: name.clone(), status })?;
        let token = answer
            .into_inner()
            .token
            .parse::<AsciiMetadataValue>()
            .map_err(|_| Error::Authentication { user: name, status: Status::internal("etcd's token is not ASCII") })?;
        self.token.set(Some(token));
        Ok(())
    }

    /// Runs one request; once again after authenticating anew when etcd
    /// says the token expired.
    async fn unary<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        match call(self.clone()).await {
            Err(status) if status.code() == Code::Unauthenticated && self.user.is_some() => {
                self.authenticate().await?;
                Ok(call(self.clone()).await?.into_inner())
            }
            answer => Ok(answer?.into_inner()),
        }
    }

    /// The keys of a range (see [`ops::range`]).
    pub async fn range(&self, request: pb::RangeRequest) -> Result<pb::RangeResponse, Error> {
        self.unary(|client| {
            let request = request.clone();
            async move { client.kv().range(request).await }
        })
        .await
    }

    /// A transaction (see [`ops::txn`]).
    pub async fn txn(&self, request: pb::TxnRequest) -> Result<pb::TxnResponse, Error> {
        self.unary(|client| {
            let request = request.clone();
            async move { client.kv().txn(request).await }
        })
        .await
    }

    /// Deletes a key or a range.
    pub async fn delete_range(&self, request: pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse, Error> {
        self.unary(|client| {
            let request = request.clone();
            async move { client.kv().delete_range(request).await }
        })
        .await
    }

    /// Compacts etcd's history up to `revision`.
    pub async fn compact(&self, revision: i64) -> Result<pb::CompactionResponse, Error> {
        self.unary(
            |client| async move { client.kv().compact(pb::CompactionRequest { revision, physical: false }).await },
        )
        .await
    }

    /// Grants a lease of `ttl` seconds (etcd may grant a longer one).
    pub async fn lease_grant(&self, ttl: i64) -> Result<pb::LeaseGrantResponse, Error> {
        self.unary(|client| async move { client.lease().lease_grant(pb::LeaseGrantRequest { ttl, id: 0 }).await }).await
    }

    /// Revokes a lease: the keys under it are deleted at once.
    pub async fn lease_revoke(&self, id: i64) -> Result<pb::LeaseRevokeResponse, Error> {
        self.unary(|client| async move { client.lease().lease_revoke(pb::LeaseRevokeRequest { id }).await }).await
    }

    /// A lease's remaining time to live (`ttl` -1: the lease is gone).
    pub async fn lease_time_to_live(&self, id: i64) -> Result<pb::LeaseTimeToLiveResponse, Error> {
        self.unary(|client| async move {
            client.lease().lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: false }).await
        })
        .await
    }

    /// Opens a keep-alive stream for lease `id`: renewals go out through
    /// the [`LeaseKeeper`], etcd's answers come back on the stream. The
    /// first renewal is sent to open the stream (etcd answers nothing
    /// before one); the keeper's first [`LeaseKeeper::keep_alive`] reports
    /// it instead of sending another.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
    ) -> Result<(LeaseKeeper, tonic::Streaming<pb::LeaseKeepAliveResponse>), Error> {
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let first = Instant::now();
        sender.send(pb::LeaseKeepAliveRequest { id }).await.map_err(|_| Error::KeepAliveClosed)?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let answers = self.lease().lease_keep_alive(stream).await?.into_inner();
        Ok((LeaseKeeper { id, sender, first: Some(first) }, answers))
    }
}

/// The sending side of a lease's keep-alive stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    id: i64,
    sender: tokio::sync::mpsc::Sender<pb::LeaseKeepAliveRequest>,
    first: Option<Instant>,
}

impl LeaseKeeper {
    /// Sends one renewal and returns when it was sent (never later than
    /// etcd received it: what a lease clock may count from). The first
    /// call returns the time of the renewal that opened the stream.
    pub async fn keep_alive(&mut self) -> Result<Instant, Error> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        let sent = Instant::now();
        self.sender.send(pb::LeaseKeepAliveRequest { id: self.id }).await.map_err(|_| Error::KeepAliveClosed)?;
        Ok(sent)
    }
}

/// One endpoint with `options`: scheme added when missing, TLS when asked.
fn endpoint(given: &str, options: &ConnectOptions) -> Result<Endpoint, Error> {
    let url = if given.contains("://") {
        given.to_owned()
    } else if options.tls.is_some() {
        format!("https://{given}")
    } else {
        format!("http://{given}")
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|source| Error::Endpoint { endpoint: given.to_owned(), source })?
        .timeout(options.timeout)
        .connect_timeout(options.connect_timeout);
    if let Some((interval, timeout)) = options.keep_alive {
        endpoint = endpoint.http2_keep_alive_interval(interval).keep_alive_timeout(timeout).keep_alive_while_idle(true);
    }
    if let Some(tls) = &options.tls {
        if url.starts_with("http://") {
            return Err(Error::PlainWithTls { endpoint: given.to_owned() });
        }
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &tls.ca_pem {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(config).map_err(|source| Error::Tls { endpoint: given.to_owned(), source })?;
    }
    Ok(endpoint)
}
