//! Pages of every list the API returns: `?limit=` (default
//! [`DEFAULT_LIMIT`], clamped to [`MAX_LIMIT`]) and `?after=` (the opaque
//! cursor a previous page answered as `next`). A cursor is the last item's
//! key, hex-encoded ([`Page::cursor`]); clients never build one.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::Deserialize;

use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::driver::request::Page;

/// Items per page when `?limit=` is not given.
pub const DEFAULT_LIMIT: usize = 1_000;
/// The most items a page holds; a larger `?limit=` is clamped to it.
pub const MAX_LIMIT: usize = 10_000;

/// The query of a list request.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Items per page: default 1,000, at most 10,000 (larger values are clamped).
    pub limit: Option<usize>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

/// A parsed page request; its failures are [`ApiError`]s naming the parameter.
pub struct Paging(pub Page);

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(query) = Query::<PageQuery>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
        let limit = match query.limit {
            Some(0) => return Err(ApiError::bad_request(ErrorCode::InvalidQuery, "limit must be at least 1")),
            Some(limit) => limit.min(MAX_LIMIT),
            None => DEFAULT_LIMIT,
        };
        let after = match query.after {
            None => None,
            Some(text) => Some(Page::key(&text).ok_or_else(|| {
                ApiError::bad_request(ErrorCode::InvalidCursor, "after must be the next cursor of a previous page")
            })?),
        };
        Ok(Paging(Page { limit, after }))
    }
}

/// A page and its `next` cursor, from up to `limit + 1` items (the sources
/// fetch one more than the page, so a full last page has no `next`).
pub fn split<T>(mut items: Vec<T>, limit: usize, key_of: impl Fn(&T) -> &str) -> (Vec<T>, Option<String>) {
    if items.len() <= limit {
        return (items, None);
    }
    items.truncate(limit);
    let next = items.last().map(|item| Page::cursor(key_of(item)));
    (items, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_has_a_next_only_when_more_follow() {
        fn key<'a>(s: &'a &str) -> &'a str {
            s
        }
        assert_eq!(split(vec!["a", "b"], 2, key), (vec!["a", "b"], None));
        assert_eq!(split(vec!["a", "b", "c"], 2, key), (vec!["a", "b"], Some(Page::cursor("b"))));
        assert_eq!(split(Vec::<&str>::new(), 2, key), (vec![], None));
    }

    #[test]
    fn cursors_round_trip_any_key() {
        for text in ["a", "shard/42", "zone a:1", "ümlaut", "%2F"] {
            assert_eq!(Page::key(&Page::cursor(text)).as_deref(), Some(text));
        }
        for bad in ["", "a", "zz", "abc", "ff"] {
            assert_eq!(Page::key(bad), None, "{bad}");
        }
    }
}
