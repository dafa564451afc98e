//! The admin REST client: [`AdminClient`], typed over the bodies in
//! [`crate::api`].
//!
//! Every path is built from the base URL with percent-encoded segments, so
//! types, shard ids, addresses and digests may hold `/`, spaces or `%`.
//! Every non-2xx answer carries `{"error":{"code","message"}}` and becomes
//! [`AdminError::Api`]; transport failures become [`AdminError::Http`],
//! naming the URL.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shardalloc_client::admin::AdminError> {
//! use shardalloc_client::admin::AdminClient;
//!
//! let admin = AdminClient::new("http://127.0.0.1:7878", None)?;
//! admin.set_placement("cart", "42", "region-b").await?;
//! println!("{:?}", admin.shard("cart", "42").await?.home);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{
    ActivateRequest, AttributesRequest, AttributesWritten, DrainState, DryRunRequest, DryRunResponse, ErrorBody,
    ErrorCode, FreezeRequest, FreezeState, Placement, PlacementRequest, Placements, PlacementsWritten, PlanRequest,
    PlanResponse, RebalanceRequest, RebalanceResponse, Regions, ShardId, ShardState, Stoppable, StoredStrategy,
    Strategies, StrategyState, TypeState, Types,
};
use crate::attributes::ShardAttributes;

/// Why an admin request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// TLS could not be set up for an `https://` node.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The base URL cannot be used.
    #[error("invalid admin base URL {url:?}: {reason}")]
    BaseUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `https://` node presented a certificate this client does not trust.
    #[error(
        "the node at {url} presented a certificate this client does not trust ({detail}); \
         give the CA that signed it with --ca-cert FILE (SHARDALLOC_CA_CERT)"
    )]
    UntrustedCertificate {
        /// The request's URL.
        url: String,
        /// What the TLS library said.
        detail: String,
    },
    /// The request did not get an answer (connection refused, timeout…).
    #[error("request to {url} failed: {source}")]
    Http {
        /// The request's URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The node answered with an error.
    #[error("the node answered {status} {code}: {message}")]
    Api {
        /// The HTTP status.
        status: StatusCode,
        /// The stable error code, one of [`ErrorCode`]'s words, as the node
        /// sent it: a newer node may send one this client does not know
        /// ([`AdminError::code`] gives the known ones).
        code: String,
        /// The node's sentence naming the problem.
        message: String,
    },
    /// The node answered with an error status but no error body.
    #[error("the node answered {status} to {url} without an error body: {body}")]
    Status {
        /// The request's URL.
        url: String,
        /// The HTTP status.
        status: StatusCode,
        /// The start of the body.
        body: String,
    },
    /// A successful answer whose body is not what the API promises.
    #[error("cannot read the answer from {url}: {reason}")]
    Decode {
        /// The request's URL.
        url: String,
        /// Why.
        reason: String,
    },
}

impl AdminError {
    /// The code of an error the node answered, when this client knows it.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AdminError::Api { code, .. } => ErrorCode::from_word(code),
            _ => None,
        }
    }
}

/// A request body.
enum Body {
    None,
    Json(Vec<u8>),
    Wasm(Vec<u8>),
}

/// A client of one node's admin API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    pub(crate) http: reqwest::Client,
    base: Url,
    pub(crate) token: Option<String>,
}

impl AdminClient {
    /// A client of the node at `base_url` (e.g. `http://127.0.0.1:7878`),
    /// sending `Authorization: Bearer <token>` when a token is given. An
    /// `https://` node must present a certificate the system trusts.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, AdminError> {
        Self::with_ca_cert(base_url, token, None)
    }

    /// As [`AdminClient::new`]; an `https://` node's certificate may also be
    /// signed by a certificate in `ca_cert` (a PEM file, added to the
    /// system's roots).
    pub fn with_ca_cert(base_url: &str, token: Option<String>, ca_cert: Option<&Path>) -> Result<Self, AdminError> {
        let invalid = |reason: String| AdminError::BaseUrl { url: base_url.to_owned(), reason };
        let base = Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid(format!("scheme {:?} is not http or https", base.scheme())));
        }
        if base.cannot_be_a_base() || base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("it must be a plain http(s)://host[:port][/path] URL".to_owned()));
        }
        let http = if base.scheme() == "https" {
            let tls = crate::tls::client_config(ca_cert)?;
            reqwest::Client::builder()
                .use_preconfigured_tls((*tls).clone())
                .build()
                .map_err(|e| invalid(format!("cannot build its HTTPS client: {e}")))?
        } else {
            reqwest::Client::new()
        };
        Ok(AdminClient { http, base, token })
    }

    /// The URL of `segments` under the base URL, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("checked in new: the base URL can be a base").pop_if_empty().extend(segments);
        url
    }

    async fn call(&self, method: Method, segments: &[&str], body: Body) -> Result<(StatusCode, Vec<u8>), AdminError> {
        self.call_url(method, self.url(segments), body).await
    }

    async fn call_url(&self, method: Method, url: Url, body: Body) -> Result<(StatusCode, Vec<u8>), AdminError> {
        let mut request = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        request = match body {
            Body::None => request,
            Body::Json(bytes) => request.header(CONTENT_TYPE, "application/json").body(bytes),
            Body::Wasm(bytes) => request.header(CONTENT_TYPE, "application/wasm").body(bytes),
        };
        let http_error = |source: reqwest::Error| match certificate_problem(&source) {
            Some(detail) => AdminError::UntrustedCertificate { url: url.to_string(), detail },
            None => AdminError::Http { url: url.to_string(), source },
        };
        let response = request.send().await.map_err(http_error)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(http_error)?;
        if status.is_success() { Ok((status, bytes.to_vec())) } else { Err(error_from(&url, status, &bytes)) }
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, AdminError> {
        self.json(Method::GET, segments, Body::None).await
    }

    async fn json<T: DeserializeOwned>(&self, method: Method, segments: &[&str], body: Body) -> Result<T, AdminError> {
        let (_, bytes) = self.call(method, segments, body).await?;
        decode(&self.url(segments), &bytes)
    }

    /// A call whose answer has no body worth reading (204, or any 2xx).
    async fn unit(&self, method: Method, segments: &[&str], body: Body) -> Result<(), AdminError> {
        self.call(method, segments, body).await.map(|_| ())
    }

    /// One page of a list endpoint: the first `limit` (the node's default
    /// when `None`) after the cursor `after`.
    pub async fn page<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<T, AdminError> {
        let mut url = self.url(segments);
        {
            let mut query = url.query_pairs_mut();
            if let Some(after) = after {
                query.append_pair("after", after);
            }
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let (_, bytes) = self.call_url(Method::GET, url.clone(), Body::None).await?;
        decode(&url, &bytes)
    }

    /// Every page of a list endpoint, following `next` to the last.
    async fn all_pages<T: DeserializeOwned + Paged>(&self, segments: &[&str]) -> Result<T, AdminError> {
        let mut all: T = self.page(segments, None, None).await?;
        while let Some(after) = all.take_next() {
            let page: T = self.page(segments, Some(&after), None).await?;
            all.append(page);
        }
        Ok(all)
    }

    /// `GET /v1/cluster/shards`: every entity type in brief (every page).
    pub async fn types(&self) -> Result<Types, AdminError> {
        self.all_pages(&["v1", "cluster", "shards"]).await
    }

    /// `DELETE /v1/cluster/shards/{type}`: deletes a type and its state.
    /// Refused (409 `type-has-regions`) while it has regions, unless
    /// `force`, which lets them leave first.
    pub async fn delete_type(&self, entity_type: &str, force: bool) -> Result<(), AdminError> {
        let mut url = self.url(&["v1", "cluster", "shards", entity_type]);
        if force {
            url.set_query(Some("force=true"));
        }
        self.call_url(Method::DELETE, url, Body::None).await.map(|_| ())
    }

    /// `GET /v1/cluster/shards/{type}`, every page: a type's regions (with
    /// their shard counts), hand-offs in flight and strategy as the first
    /// page answered them, and every shard with a home, by shard id, from
    /// all the pages (`next` is `None`). Pages are read one after another:
    /// each shard is where it was when its page was read, and a shard homed
    /// meanwhile behind the cursor is missing. [`AdminClient::type_state_page`]
    /// reads one page.
    pub async fn type_state(&self, entity_type: &str) -> Result<TypeState, AdminError> {
        self.all_pages(&["v1", "cluster", "shards", entity_type]).await
    }

    /// `GET /v1/cluster/shards/{type}?limit=&after=`: one page of the type's
    /// shards with a home (the first `limit` after the cursor `after`; the
    /// node's default page size when `limit` is `None`), with its regions,
    /// hand-offs in flight and strategy. Pass its `next` as `after` for the
    /// page that follows.
    pub async fn type_state_page(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<TypeState, AdminError> {
        self.page(&["v1", "cluster", "shards", entity_type], after, limit).await
    }

    /// `GET /v1/cluster/shards/{type}/snapshot`: the type's full state as JSON.
    pub async fn snapshot(&self, entity_type: &str) -> Result<serde_json::Value, AdminError> {
        self.get(&["v1", "cluster", "shards", entity_type, "snapshot"]).await
    }

    /// `POST …/placements` with one placement; answers what was written and
    /// the type's count.
    pub async fn set_placement(
        &self,
        entity_type: &str,
        shard: &str,
        target: &str,
    ) -> Result<PlacementsWritten, AdminError> {
        let request = PlacementRequest::One(Placement { shard_id: ShardId::from(shard), target: target.to_owned() });
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "placements"], json_body(&request)).await
    }

    /// `POST …/placements` with many placements, applied all or nothing;
    /// answers what was written and the type's count.
    pub async fn set_placements(
        &self,
        entity_type: &str,
        placements: &[Placement],
    ) -> Result<PlacementsWritten, AdminError> {
        let request = PlacementRequest::Many { placements: placements.to_vec() };
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "placements"], json_body(&request)).await
    }

    /// `GET …/placements`: every live placement (every page).
    pub async fn placements(&self, entity_type: &str) -> Result<Placements, AdminError> {
        self.all_pages(&["v1", "cluster", "shards", entity_type, "placements"]).await
    }

    /// `DELETE …/placements/{shardId}`: true when a placement was removed,
    /// false when the shard had none (404 with any code but `unknown-type`).
    pub async fn remove_placement(&self, entity_type: &str, shard: &str) -> Result<bool, AdminError> {
        match self
            .unit(Method::DELETE, &["v1", "cluster", "shards", entity_type, "placements", shard], Body::None)
            .await
        {
            Ok(()) => Ok(true),
            Err(error @ AdminError::Api { status: StatusCode::NOT_FOUND, .. })
                if error.code() != Some(ErrorCode::UnknownType) =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// `POST …/rebalance`: moves the shards at the next rebalance tick, or
    /// at once when `immediate`.
    pub async fn rebalance(
        &self,
        entity_type: &str,
        shards: &[&str],
        immediate: bool,
    ) -> Result<RebalanceResponse, AdminError> {
        let request = RebalanceRequest { shard_ids: shards.iter().map(|s| ShardId::from(*s)).collect(), immediate };
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "rebalance"], json_body(&request)).await
    }

    /// `POST /v1/strategies`: uploads a strategy component.
    pub async fn upload_strategy(&self, component: Vec<u8>) -> Result<StoredStrategy, AdminError> {
        self.json(Method::POST, &["v1", "strategies"], Body::Wasm(component)).await
    }

    /// `GET /v1/strategies`: built-ins, then uploads.
    pub async fn strategies(&self) -> Result<Strategies, AdminError> {
        self.all_pages(&["v1", "strategies"]).await
    }

    /// `DELETE /v1/strategies/{digest}`.
    pub async fn delete_strategy(&self, digest: &str) -> Result<(), AdminError> {
        self.unit(Method::DELETE, &["v1", "strategies", digest], Body::None).await
    }

    /// `PUT …/strategy`: activates a strategy for the type.
    pub async fn activate(&self, entity_type: &str, request: &ActivateRequest) -> Result<StrategyState, AdminError> {
        self.json(Method::PUT, &["v1", "cluster", "shards", entity_type, "strategy"], json_body(request)).await
    }

    /// `GET …/strategy`: the active strategy, its history and the shadow.
    pub async fn strategy(&self, entity_type: &str) -> Result<StrategyState, AdminError> {
        self.all_pages(&["v1", "cluster", "shards", entity_type, "strategy"]).await
    }

    /// `POST …/strategy/dry-run`: what a candidate would do on the type's state.
    pub async fn dry_run(&self, entity_type: &str, request: &DryRunRequest) -> Result<DryRunResponse, AdminError> {
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "strategy", "dry-run"], json_body(request))
            .await
    }

    /// `PUT …/strategy/shadow`: runs a candidate beside the active strategy.
    pub async fn set_shadow(&self, entity_type: &str, request: &ActivateRequest) -> Result<(), AdminError> {
        self.unit(Method::PUT, &["v1", "cluster", "shards", entity_type, "strategy", "shadow"], json_body(request))
            .await
    }

    /// `DELETE …/strategy/shadow`.
    pub async fn clear_shadow(&self, entity_type: &str) -> Result<(), AdminError> {
        self.unit(Method::DELETE, &["v1", "cluster", "shards", entity_type, "strategy", "shadow"], Body::None).await
    }

    /// `POST …/strategy/rollback`: back to the previous activation.
    pub async fn rollback(&self, entity_type: &str) -> Result<StrategyState, AdminError> {
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "strategy", "rollback"], Body::None).await
    }

    /// `PUT …/signal`: the type's JSON signal, handed to the strategy.
    pub async fn set_signal(&self, entity_type: &str, signal: &serde_json::Value) -> Result<(), AdminError> {
        self.unit(Method::PUT, &["v1", "cluster", "shards", entity_type, "signal"], json_body(signal)).await
    }

    /// `GET /v1/cluster/regions`: every region across types.
    pub async fn regions(&self) -> Result<Regions, AdminError> {
        self.all_pages(&["v1", "cluster", "regions"]).await
    }

    /// `POST /v1/cluster/regions/{address}/drain`: moves every shard off the region.
    pub async fn drain(&self, address: &str) -> Result<(), AdminError> {
        self.unit(Method::POST, &["v1", "cluster", "regions", address, "drain"], Body::None).await
    }

    /// `DELETE /v1/cluster/regions/{address}/drain`: lets the region get shards again.
    pub async fn undrain(&self, address: &str) -> Result<(), AdminError> {
        self.unit(Method::DELETE, &["v1", "cluster", "regions", address, "drain"], Body::None).await
    }

    /// `POST /v1/cluster/shards/{type}/plan`: what a strategy would do on
    /// the type's live view changed as asked. Nothing changes.
    pub async fn plan(&self, entity_type: &str, request: &PlanRequest) -> Result<PlanResponse, AdminError> {
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "plan"], json_body(request)).await
    }

    /// `GET /v1/cluster/regions/{address}/drain`: a drain's progress.
    pub async fn drain_state(&self, address: &str) -> Result<DrainState, AdminError> {
        self.get(&["v1", "cluster", "regions", address, "drain"]).await
    }

    /// `GET /v1/cluster/regions/stoppable?addresses=…`: which of these
    /// regions may stop now, together, and why the others may not.
    pub async fn stoppable(&self, addresses: &[&str]) -> Result<Stoppable, AdminError> {
        let mut url = self.url(&["v1", "cluster", "regions", "stoppable"]);
        url.query_pairs_mut().append_pair("addresses", &addresses.join(","));
        let (_, bytes) = self.call_url(Method::GET, url.clone(), Body::None).await?;
        decode(&url, &bytes)
    }

    /// `GET /v1/cluster/shards/{type}/freeze` (`Some(type)`) or
    /// `GET /v1/cluster/freeze` (`None`): the freezes in force and their history.
    pub async fn freezes(&self, entity_type: Option<&str>) -> Result<FreezeState, AdminError> {
        self.get(&freeze_path(entity_type)).await
    }

    /// `PUT …/freeze`: freezes a type (`Some`) or every type (`None`).
    pub async fn freeze(&self, entity_type: Option<&str>, request: &FreezeRequest) -> Result<FreezeState, AdminError> {
        self.json(Method::PUT, &freeze_path(entity_type), json_body(request)).await
    }

    /// `DELETE …/freeze?reason=`: lifts a type's own and maintenance
    /// freezes (`Some`), or the cluster-wide freeze (`None`).
    pub async fn lift_freeze(&self, entity_type: Option<&str>, reason: &str) -> Result<FreezeState, AdminError> {
        let mut url = self.url(&freeze_path(entity_type));
        url.query_pairs_mut().append_pair("reason", reason);
        let (_, bytes) = self.call_url(Method::DELETE, url.clone(), Body::None).await?;
        decode(&url, &bytes)
    }

    /// `GET /v1/cluster/shards/{type}/shards/{shardId}`: where a shard is and why.
    pub async fn shard(&self, entity_type: &str, shard: &str) -> Result<ShardState, AdminError> {
        self.get(&["v1", "cluster", "shards", entity_type, "shards", shard]).await
    }

    /// `POST …/attributes`: many shards' attributes at once, all or nothing
    /// (each shard's whole map; an empty one clears it; at most 10,000).
    pub async fn write_attributes(
        &self,
        entity_type: &str,
        shards: BTreeMap<String, ShardAttributes>,
    ) -> Result<AttributesWritten, AdminError> {
        let request = AttributesRequest { shards };
        self.json(Method::POST, &["v1", "cluster", "shards", entity_type, "attributes"], json_body(&request)).await
    }

    /// `PUT …/shards/{id}/attributes`: one shard's attributes (empty: cleared).
    pub async fn set_shard_attributes(
        &self,
        entity_type: &str,
        shard: &str,
        attributes: &ShardAttributes,
    ) -> Result<AttributesWritten, AdminError> {
        let path = ["v1", "cluster", "shards", entity_type, "shards", shard, "attributes"];
        self.json(Method::PUT, &path, json_body(attributes)).await
    }
}

fn freeze_path(entity_type: Option<&str>) -> Vec<&str> {
    match entity_type {
        Some(entity_type) => vec!["v1", "cluster", "shards", entity_type, "freeze"],
        None => vec!["v1", "cluster", "freeze"],
    }
}

fn json_body<T: Serialize + ?Sized>(body: &T) -> Body {
    // The API's bodies have string keys only: they always serialize.
    Body::Json(serde_json::to_vec(body).expect("API bodies serialize to JSON"))
}

fn decode<T: DeserializeOwned>(url: &Url, bytes: &[u8]) -> Result<T, AdminError> {
    serde_json::from_slice(bytes).map_err(|e| AdminError::Decode { url: url.to_string(), reason: e.to_string() })
}

/// The error a non-2xx answer stands for.
/// A list answer that comes in pages: its `next` cursor, and how pages join.
trait Paged {
    fn take_next(&mut self) -> Option<String>;
    fn append(&mut self, page: Self);
}

macro_rules! paged {
    ($($body:ty => $field:ident),+ $(,)?) => {
        $(impl Paged for $body {
            fn take_next(&mut self) -> Option<String> {
                self.next.take()
            }

            fn append(&mut self, page: Self) {
                self.$field.extend(page.$field);
                self.next = page.next;
            }
        })+
    };
}

paged!(
    Types => types,
    Regions => regions,
    Placements => placements,
    Strategies => strategies,
    StrategyState => history,
    TypeState => shards,
);

/// What to do when a server shows a CA certificate as its own.
const CA_AS_SERVER: &str = ": the server's certificate is a CA certificate (basicConstraints CA:TRUE, as \
     `openssl req -x509` makes by default), which TLS clients refuse as a server's own; give the node a leaf \
     certificate signed by a CA and the client that CA (--ca-cert): docs/operations.md gives a recipe (TLS)";

/// The TLS library's words when `error` is a refused server certificate,
/// with what to do when the certificate is a CA's.
pub(crate) fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(tls @ rustls::Error::InvalidCertificate(refused)) = error.downcast_ref::<rustls::Error>() {
        let mut words = tls.to_string();
        if let rustls::CertificateError::Other(other) = refused
            && other.0.to_string().contains("CaUsedAsEndEntity")
        {
            words.push_str(CA_AS_SERVER);
        }
        return Some(words);
    }
    // An I/O error hides the error it wraps from `source()`.
    if let Some(inner) = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
        return certificate_problem(inner);
    }
    error.source().and_then(certificate_problem)
}

pub(crate) fn error_from(url: &Url, status: StatusCode, body: &[u8]) -> AdminError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error }) => AdminError::Api { status, code: error.code, message: error.message },
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let mut body: String = text.chars().take(200).collect();
            if text.chars().count() > 200 {
                body.push('…');
            }
            AdminError::Status { url: url.to_string(), status, body }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn path_segments_are_percent_encoded_under_the_base_path() {
        let admin = AdminClient::new("http://node:7878/admin/", None).unwrap();
        assert_eq!(
            admin.url(&["v1", "cluster", "shards", "my type", "shards", "a/b?c#d%"]).as_str(),
            "http://node:7878/admin/v1/cluster/shards/my%20type/shards/a%2Fb%3Fc%23d%25"
        );
        let admin = AdminClient::new("http://node:7878", None).unwrap();
        assert_eq!(admin.url(&["v1", "strategies", "sha256:ab"]).as_str(), "http://node:7878/v1/strategies/sha256:ab");
    }

    #[test]
    fn bad_base_urls_are_refused_by_name() {
        for (url, fragment) in [
            ("ws://node:1", "scheme \"ws\""),
            ("node:7878", "scheme \"node\""),
            ("not a url", "relative URL"),
            ("http://node/?q=1", "plain http(s)"),
        ] {
            let error = AdminClient::new(url, None).unwrap_err().to_string();
            assert!(error.starts_with(&format!("invalid admin base URL {url:?}")), "{error}");
            assert!(error.contains(fragment), "{error}");
        }
    }

    #[test]
    fn error_bodies_become_api_errors_naming_status_code_and_message() {
        let url = Url::parse("http://node/v1/cluster/shards/x").unwrap();
        let error = error_from(
            &url,
            StatusCode::NOT_FOUND,
            br#"{"error":{"code":"unknown-type","message":"no entity type named x"}}"#,
        );
        assert!(
            matches!(&error, AdminError::Api { status: StatusCode::NOT_FOUND, code, .. } if code == "unknown-type")
        );
        assert_eq!(error.to_string(), "the node answered 404 Not Found unknown-type: no entity type named x");
        assert_eq!(error.code(), Some(ErrorCode::UnknownType));
        let error = error_from(&url, StatusCode::BAD_GATEWAY, &[b'x'; 300]);
        let text = error.to_string();
        assert!(
            text.starts_with(
                "the node answered 502 Bad Gateway to http://node/v1/cluster/shards/x without an error body: xxx"
            ),
            "{text}"
        );
        assert!(text.ends_with("x…") && text.len() < 320, "{text}");
    }

    /// A newer node may answer a code this client does not know: it is
    /// still an API error with the node's code and message, not a status
    /// without a body.
    #[test]
    fn error_bodies_with_codes_this_client_does_not_know_are_api_errors() {
        let url = Url::parse("http://node/v1/cluster/shards/x").unwrap();
        let body = br#"{"error":{"code":"a-code-from-a-newer-node","message":"something new"}}"#;
        let error = error_from(&url, StatusCode::CONFLICT, body);
        assert!(
            matches!(&error, AdminError::Api { status: StatusCode::CONFLICT, code, message }
                if code == "a-code-from-a-newer-node" && message == "something new"),
            "{error:?}"
        );
        assert_eq!(error.code(), None);
        assert_eq!(error.to_string(), "the node answered 409 Conflict a-code-from-a-newer-node: something new");
    }

    /// One recorded request: method and path, headers (lower-cased names), body.
    #[derive(Debug, Clone)]
    struct Seen {
        line: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
        }
    }

    /// An HTTP/1.1 server answering each request with the next canned
    /// (status line, body) and recording what it was asked.
    async fn fake_node(answers: Vec<(&'static str, &'static str)>) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            let mut answers = answers.into_iter();
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = Vec::new();
                loop {
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut chunk = [0; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_string();
                    let mut lines = head.split("\r\n");
                    let line = lines.next().unwrap_or_default().to_owned();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    let length: usize =
                        headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
                    while buffer.len() < end + 4 + length {
                        let mut chunk = [0; 4096];
                        let n = stream.read(&mut chunk).await.unwrap();
                        assert!(n > 0, "the client closed mid-body");
                        buffer.extend_from_slice(&chunk[..n]);
                    }
                    let body = buffer[end + 4..end + 4 + length].to_vec();
                    buffer.drain(..end + 4 + length);
                    record.lock().unwrap().push(Seen { line, headers, body });
                    let (status, body) = answers.next().expect("more requests than canned answers");
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    stream.write_all(response.as_bytes()).await.unwrap();
                }
            }
        });
        (format!("http://{address}"), seen)
    }

    #[tokio::test]
    async fn requests_carry_the_token_encoded_paths_and_bodies() {
        let (base, seen) = fake_node(vec![
            ("200 OK", r#"{"written":[{"shardId":"4 2","target":"B"}],"total":1}"#),
            ("204 No Content", ""),
            ("404 Not Found", r#"{"error":{"code":"no-placement","message":"shard 7 has no placement"}}"#),
            ("404 Not Found", r#"{"error":{"code":"unknown-type","message":"no entity type named c/x"}}"#),
            ("201 Created", r#"{"digest":"sha256:00","name":"least-shard","version":"1.0.0","size":3,"activeIn":[]}"#),
            ("202 Accepted", r#"{"accepted":["1"],"rejected":[{"shardId":"2","reason":"unknown"}]}"#),
            ("204 No Content", ""),
        ])
        .await;
        let admin = AdminClient::new(&base, Some("s3cret".into())).unwrap();
        let written = admin.set_placement("c/x", "4 2", "B").await.unwrap();
        assert_eq!(written.written, [Placement { shard_id: "4 2".into(), target: "B".into() }]);
        assert_eq!(written.total, 1);
        assert!(admin.remove_placement("c/x", "4 2").await.unwrap());
        assert!(!admin.remove_placement("c/x", "7").await.unwrap());
        let error = admin.remove_placement("c/x", "7").await.unwrap_err();
        assert_eq!(error.to_string(), "the node answered 404 Not Found unknown-type: no entity type named c/x");
        let stored = admin.upload_strategy(vec![0, 97, 115]).await.unwrap();
        assert_eq!((stored.name.as_str(), stored.size), ("least-shard", 3));
        let rebalance = admin.rebalance("c/x", &["1", "2"], true).await.unwrap();
        assert_eq!(rebalance.accepted, ["1"]);
        assert_eq!(rebalance.rejected[0].reason, "unknown");
        admin.drain("zone a/1").await.unwrap();

        let seen = seen.lock().unwrap().clone();
        let lines: Vec<&str> = seen.iter().map(|s| s.line.as_str()).collect();
        assert_eq!(
            lines,
            [
                "POST /v1/cluster/shards/c%2Fx/placements HTTP/1.1",
                "DELETE /v1/cluster/shards/c%2Fx/placements/4%202 HTTP/1.1",
                "DELETE /v1/cluster/shards/c%2Fx/placements/7 HTTP/1.1",
                "DELETE /v1/cluster/shards/c%2Fx/placements/7 HTTP/1.1",
                "POST /v1/strategies HTTP/1.1",
                "POST /v1/cluster/shards/c%2Fx/rebalance HTTP/1.1",
                "POST /v1/cluster/regions/zone%20a%2F1/drain HTTP/1.1",
            ]
        );
        assert!(seen.iter().all(|s| s.header("authorization") == Some("Bearer s3cret")));
        assert_eq!(seen[0].header("content-type"), Some("application/json"));
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&seen[0].body).unwrap(),
            serde_json::json!({"shardId": "4 2", "target": "B"})
        );
        assert_eq!(seen[4].header("content-type"), Some("application/wasm"));
        assert_eq!(seen[4].body, [0, 97, 115]);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&seen[5].body).unwrap(),
            serde_json::json!({"shardIds": ["1", "2"], "immediate": true})
        );
    }

    #[tokio::test]
    async fn transport_failures_and_bad_answers_name_the_url() {
        // A port nothing listens on: bind, note it, close it.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let admin = AdminClient::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
        let error = admin.regions().await.unwrap_err();
        assert!(matches!(error, AdminError::Http { .. }), "{error:?}");
        assert!(
            error.to_string().starts_with(&format!("request to http://127.0.0.1:{port}/v1/cluster/regions failed"))
        );

        let (base, seen) = fake_node(vec![("200 OK", r#"{"regions":"not a list"}"#)]).await;
        let admin = AdminClient::new(&base, None).unwrap();
        let error = admin.regions().await.unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("cannot read the answer from {base}/v1/cluster/regions: invalid type")),
            "{error}"
        );
        assert_eq!(seen.lock().unwrap()[0].header("authorization"), None);
    }
}
