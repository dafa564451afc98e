//! What a request must look like before a handler sees it, so that a web
//! page cannot write to a node (a tokenless loopback node included, DNS
//! rebinding included):
//!
//! - on a node without an admin token, every request whose `Host` names
//!   anything but the node's own addresses ([`OwnOrigins::allows_host`])
//!   gets `421 unknown-host`: a page whose name was rebound to the node's
//!   address sends its own name, so it can read nothing (placements, the
//!   event stream). Requests without `Host` (HTTP/1.0) pass;
//! - a write (`POST`, `PUT`, `PATCH`, `DELETE`) or a WebSocket upgrade whose
//!   `Origin` header is present but is not one of the node's own origins
//!   ([`OwnOrigins`]; `null` never is) gets `403 cross-origin`; requests
//!   without `Origin` (curl, the CLI, region clients) pass;
//! - a request whose `Content-Length` is past its route's limit (an
//!   upload's, else a JSON body's, 4 MiB, on every route, those that read
//!   no body included) gets `413 body-too-large` before any handler runs;
//! - a request body must say what it is: `application/json`, or
//!   `application/wasm` for a strategy upload; else `415`. Body-less writes
//!   (drain, rollback, DELETEs) need no content type.
//!
//! No CORS header is ever sent, and every answer carries
//! `X-Content-Type-Options: nosniff` ([`no_sniff`]).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api_error::{ApiError, ErrorCode};
use super::state::AppState;

/// The origins (`scheme://host[:port]` as browsers send them) that are the
/// node's own: its listen address (and `localhost`, `127.0.0.1`, `[::1]`
/// with its port when it listens on loopback), its advertised URL, and the
/// host names allowed by `--allowed-host` (with any port).
#[derive(Clone, Debug, Default)]
pub struct OwnOrigins {
    /// `host:port` authorities, lower case.
    authorities: BTreeSet<String>,
    /// Host names allowed with any port, lower case.
    hosts: BTreeSet<String>,
}

impl OwnOrigins {
    /// The origins of a node listening on `listen`, reached at `advertise`
    /// (a URL), and also known by `allowed_hosts`.
    pub fn new(listen: SocketAddr, advertise: Option<&Uri>, allowed_hosts: &[String]) -> Self {
        let mut authorities = BTreeSet::new();
        let port = listen.port();
        authorities.insert(authority(&listen.ip().to_string(), port));
        if listen.ip().is_loopback() || listen.ip().is_unspecified() {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                authorities.insert(authority(host, port));
            }
        }
        if let Some(url) = advertise
            && let Some(host) = url.host()
        {
            authorities.insert(authority(host, url.port_u16().unwrap_or(default_port(url.scheme_str()))));
        }
        let hosts = allowed_hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        OwnOrigins { authorities, hosts }
    }

    /// True when `origin` (an `Origin` header's value) is one of the node's own.
    pub fn allows(&self, origin: &str) -> bool {
        let Ok(uri) = origin.parse::<Uri>() else { return false };
        let Some(host) = uri.host() else { return false };
        let host = host.to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(default_port(uri.scheme_str()));
        self.hosts.contains(host.trim_start_matches('[').trim_end_matches(']'))
            || self.hosts.contains(&host)
            || self.authorities.contains(&authority(&host, port))
    }

    /// True when `value` (a `Host` header's value, `host[:port]`) names the
    /// node: one of its own authorities (without a port: 80 or 443), or a
    /// host allowed with any port.
    pub fn allows_host(&self, value: &str) -> bool {
        if value.contains('@') {
            return false;
        }
        let Ok(given) = value.parse::<axum::http::uri::Authority>() else { return false };
        let host = given.host().to_ascii_lowercase();
        if self.hosts.contains(host.trim_start_matches('[').trim_end_matches(']')) {
            return true;
        }
        match given.port_u16() {
            Some(port) => self.authorities.contains(&authority(&host, port)),
            None => [80, 443].into_iter().any(|port| self.authorities.contains(&authority(&host, port))),
        }
    }

    /// False for [`OwnOrigins::default`], which knows no address of the node
    /// (library use and tests): `Host` is not checked then.
    pub fn knows_addresses(&self) -> bool {
        !self.authorities.is_empty()
    }
}

fn authority(host: &str, port: u16) -> String {
    let host = host.to_ascii_lowercase();
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

fn default_port(scheme: Option<&str>) -> u16 {
    match scheme {
        Some("https" | "wss") => 443,
        _ => 80,
    }
}

fn is_write(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The media type a write to `path` must carry.
fn expected_type(method: &Method, path: &str) -> &'static str {
    if *method == Method::POST && path == "/v1/strategies" { "application/wasm" } else { "application/json" }
}

/// The largest body a request to `path` may declare: an upload's, or a
/// JSON body's on every other route (including those that read none).
fn body_limit(method: &Method, path: &str) -> usize {
    if expected_type(method, path) == "application/wasm" {
        crate::engine::limits::MAX_COMPONENT_SIZE
    } else {
        super::body::MAX_JSON_BODY
    }
}

/// The 413 of a request whose `Content-Length` is past its route's limit:
/// answered before the handler, so a route that reads no body (a rollback,
/// a drain) answers it too instead of dropping the connection.
fn too_large(method: &Method, path: &str, headers: &HeaderMap) -> Option<ApiError> {
    let declared: u64 = headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()?;
    let limit = body_limit(method, path);
    (declared > limit as u64).then(|| {
        let message = format!("the request body is {declared} bytes; this endpoint accepts at most {limit}");
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::BodyTooLarge, message)
    })
}

/// The longest request target (path and query), in bytes.
pub const MAX_URI_BYTES: usize = 8 << 10;
/// The most bytes of request headers.
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// Middleware, outermost: a request target over [`MAX_URI_BYTES`] gets 414
/// and headers over [`MAX_HEADER_BYTES`] get 431, with the JSON error body
/// (hyper's own answers to such requests have none; its buffer is set
/// larger, `conn.rs`, so these come first).
pub async fn check_head(request: Request, next: Next) -> Response {
    let target = request.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        let message = format!("the request target is {target} bytes; at most {MAX_URI_BYTES}");
        return ApiError::new(StatusCode::URI_TOO_LONG, ErrorCode::UriTooLong, message).into_response();
    }
    let headers: usize = request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    if headers > MAX_HEADER_BYTES {
        let message = format!("the request headers are {headers} bytes; at most {MAX_HEADER_BYTES}");
        return ApiError::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, ErrorCode::HeadersTooLarge, message)
            .into_response();
    }
    next.run(request).await
}

/// Middleware, outermost: `X-Content-Type-Options: nosniff` on every
/// answer, so a browser never reads one as another type than it says.
pub async fn no_sniff(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    response
}

/// The refusal of a request whose `Host` is not the node's, on a node
/// without an admin token; `None` when it may go on.
fn foreign_host(state: &AppState, request: &Request) -> Option<ApiError> {
    let origins = &state.security.origins;
    if state.security.admin_token.is_some() || !origins.knows_addresses() {
        return None;
    }
    let host = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().unwrap_or("(not text)"),
        None => request.uri().authority()?.as_str(),
    };
    if origins.allows_host(host) {
        return None;
    }
    let message = format!(
        "the Host {host:?} is not this node's (its address, localhost, --advertise, --allowed-host): a node \
         without an admin token answers only requests addressed to it, so a web page cannot reach it by a \
         rebound name"
    );
    Some(ApiError::new(StatusCode::MISDIRECTED_REQUEST, ErrorCode::UnknownHost, message))
}

/// Middleware: the rules in the module documentation.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(refused) = foreign_host(&state, &request) {
        return refused.into_response();
    }
    let (method, headers) = (request.method(), request.headers());
    if is_write(method) || is_upgrade(headers) {
        for origin in headers.get_all(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("(not text)");
            if !state.security.origins.allows(origin) {
                let message = format!(
                    "a request from the web origin {origin:?} is refused: it is not this node's own \
                     (its address, --advertise, --allowed-host)"
                );
                return ApiError::new(StatusCode::FORBIDDEN, ErrorCode::CrossOrigin, message).into_response();
            }
        }
    }
    if let Some(refused) = too_large(method, request.uri().path(), headers) {
        return refused.into_response();
    }
    let has_body = !axum::body::HttpBody::is_end_stream(request.body());
    if matches!(*method, Method::POST | Method::PUT | Method::PATCH) && has_body {
        let expected = expected_type(method, request.uri().path());
        let given = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let media = given.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case(expected) {
            let shown = if given.is_empty() { "none".to_owned() } else { format!("{given:?}") };
            let message = format!("this request's body must be sent as Content-Type: {expected} (it was {shown})");
            return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, ErrorCode::UnsupportedMediaType, message)
                .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_origins_are_the_listen_address_the_advertised_url_and_allowed_hosts() {
        let advertise: Uri = "https://shardalloc.example.com".parse().unwrap();
        let own = OwnOrigins::new("127.0.0.1:7878".parse().unwrap(), Some(&advertise), &["Ops.Example".into()]);
        for allowed in [
            "http://127.0.0.1:7878",
            "http://localhost:7878",
            "http://[::1]:7878",
            "https://shardalloc.example.com",
            "https://shardalloc.example.com:443",
            "http://ops.example:9000",
        ] {
            assert!(own.allows(allowed), "{allowed}");
        }
        for refused in [
            "null",
            "http://evil.example",
            "http://127.0.0.1:7879",
            "http://localhost",
            "http://shardalloc.example.com",
            "",
            "file://",
        ] {
            assert!(!own.allows(refused), "{refused}");
        }
        let wide = OwnOrigins::new("10.0.0.5:7878".parse().unwrap(), None, &[]);
        assert!(wide.allows("http://10.0.0.5:7878") && !wide.allows("http://localhost:7878"));
    }

    #[test]
    fn own_hosts_are_the_listen_address_loopback_names_the_advertised_one_and_allowed_hosts() {
        let advertise: Uri = "https://shardalloc.example.com".parse().unwrap();
        let own = OwnOrigins::new("127.0.0.1:7878".parse().unwrap(), Some(&advertise), &["Ops.Example".into()]);
        for allowed in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST:7878",
            "[::1]:7878",
            "shardalloc.example.com",
            "shardalloc.example.com:443",
            "ops.example:9000",
            "ops.example",
        ] {
            assert!(own.allows_host(allowed), "{allowed}");
        }
        for refused in [
            "evil.example:7878",
            "evil.example",
            "localhost",
            "127.0.0.1:7879",
            "localhost.evil.example:7878",
            "user@localhost:7878",
            "",
            "shardalloc.example.com:7878",
        ] {
            assert!(!own.allows_host(refused), "{refused}");
        }
        assert!(!OwnOrigins::default().knows_addresses() && own.knows_addresses());
    }
}
