//! Request extractors whose every failure is an [`ApiError`] naming the
//! problem: [`JsonBody`] (too large, not JSON, wrong shape; at most
//! [`MAX_JSON_BODY`]; parsed at low priority past [`LOW_PRIORITY_BODY`]), [`RawBody`] (at most the router's body limit, the
//! largest upload) and [`Params`] (path segments that do not decode).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::api_error::{ApiError, ErrorCode};

/// The largest JSON body accepted, in bytes.
pub const MAX_JSON_BODY: usize = 4 << 20;

/// A parsed JSON body.
pub struct JsonBody<T>(pub T);

/// True when `error` (or what it wraps) is the request-body timeout.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(current) = source {
        if current.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = current.source();
    }
    false
}

/// 408 for a body that did not arrive in time.
fn body_timeout() -> ApiError {
    ApiError::new(StatusCode::REQUEST_TIMEOUT, ErrorCode::BodyTimeout, "the request body did not arrive in time")
}

/// Reads the raw body, turning axum's rejections into [`ApiError`]s.
pub async fn raw_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, ErrorCode::BodyTooLarge, "the request body is larger than this endpoint accepts")
        } else if timed_out(&rejection) {
            body_timeout()
        } else {
            ApiError::new(status, ErrorCode::UnreadableBody, rejection.body_text())
        }
    })
}

/// Parses JSON, naming where and why it failed. An object with the same key
/// twice is refused (JSON parsers disagree on which one wins).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::bad_request(ErrorCode::InvalidBody, "the request body is empty; JSON was expected"));
    }
    let invalid =
        |e: serde_json::Error| ApiError::bad_request(ErrorCode::InvalidBody, format!("invalid JSON body: {e}"));
    serde_json::from_slice::<NoDuplicateKeys>(bytes).map_err(invalid)?;
    serde_json::from_slice(bytes).map_err(invalid)
}

/// Any JSON value in which no object has a key twice.
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("the key {key:?} appears twice in one object")));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(self)
    }
}

/// Reads a JSON request's body, at most [`MAX_JSON_BODY`] bytes.
pub async fn json_bytes(request: Request) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(request.into_body(), MAX_JSON_BODY).await.map_err(|error| {
        let too_large =
            std::error::Error::source(&error).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::BodyTooLarge,
                format!("the request body is larger than {MAX_JSON_BODY} bytes"),
            )
        } else if timed_out(&error) {
            body_timeout()
        } else {
            ApiError::bad_request(ErrorCode::UnreadableBody, format!("the request body cannot be read: {error}"))
        }
    })
}

/// Bodies larger than this are parsed at low priority
/// ([`super::low_priority`]): sixteen POSTs of 10,000 placements, parsed at
/// once on the worker that serves the region sessions, held a one-core
/// node's home answers up by 280 ms.
pub const LOW_PRIORITY_BODY: usize = 64 << 10;

/// Parses `bytes` as JSON and makes what the handler needs of it with
/// `then`, both at low priority when the body is larger than
/// [`LOW_PRIORITY_BODY`].
pub async fn parse_then<T, U>(
    bytes: Bytes,
    then: impl FnOnce(T) -> Result<U, ApiError> + Send + 'static,
) -> Result<U, ApiError>
where
    T: DeserializeOwned,
    U: Send + 'static,
{
    if bytes.len() <= LOW_PRIORITY_BODY {
        return parse(&bytes).and_then(then);
    }
    super::low_priority::run(move || parse(&bytes).and_then(then)).await?
}

impl<S: Send + Sync, T: DeserializeOwned + Send + 'static> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        parse_then(json_bytes(request).await?, Ok).await.map(JsonBody)
    }
}

/// A raw body whose failures (too large, unreadable) are [`ApiError`]s.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        raw_body(request, state).await.map(RawBody)
    }
}

/// Middleware (a route layer, so the path is matched): refuses a path whose
/// `{type}` or `{address}` breaks the naming rules, naming the rule.
pub async fn check_path_names(
    params: Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Ok(params) = params {
        for (name, value) in &params {
            let checked = match name {
                "type" => shardalloc_proto::protocol::check_type_name(value),
                "address" => shardalloc_proto::protocol::check_address(value),
                _ => Ok(()),
            };
            if let Err(rule) = checked {
                return ApiError::bad_request(ErrorCode::InvalidName, format!("{{{name}}}: {rule}")).into_response();
            }
        }
    }
    next.run(request).await
}

/// Path parameters (percent-decoded) whose failures are [`ApiError`]s.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Params(value))
            .map_err(|rejection| ApiError::new(rejection.status(), ErrorCode::InvalidPath, rejection.body_text()))
    }
}
