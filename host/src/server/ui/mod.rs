//! The dashboard: a page at `/ui/` on the node's own port, plain HTML, CSS
//! and ES modules embedded in the binary (`assets/`, no build step, no
//! third-party script). The assets need no token; everything the page shows
//! comes through the authenticated `/v1` API and the event stream, which it
//! reads with `fetch` so every call bears the token the operator typed
//! (kept in the tab's `sessionStorage`).
//!
//! Every asset is served with [`CONTENT_SECURITY_POLICY`]: scripts, styles
//! and connections from the node's own origin only, and no framing.
//!
//! | asset | what it does |
//! | --- | --- |
//! | `index.html` | the layout: types, login, regions overview, map, shard story, hottest shards, actions, charts, the confirmation dialog |
//! | `style.css` | the colours of reasons, loads, bands and states |
//! | `app.js` | start-up: login, the type chosen by `?type=`, REST first view (every page of the type's shards and placements), then the stream |
//! | `api.js` | calls with the token, lists read page by page; errors as the node words them |
//! | `stream.js` | the event stream over `fetch`, resumed with `Last-Event-ID` |
//! | `model.js` | a type's state, kept from REST and events; where a region stands against the band around the mean |
//! | `overview.js` | every region as one cell against the band: sorted, filtered by zone, status and address; a click opens the region |
//! | `map.js` | the shard map (per shard, or aggregated per region when too many), shards coloured by reason or load |
//! | `loads.js` | shard loads from the hottest-first list; the hottest shards' list |
//! | `story.js` | a shard's story and its actions |
//! | `actions.js` | every action behind a confirmation: pin, remove a placement, rebalance, drain, undrain |
//! | `strategy.js` | the strategy panel: upload, dry run (its moves drawn), activate, shadow, roll back |
//! | `charts.js` | the live charts (SVG) |

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::api_error::{ApiError, ErrorCode};
use super::body::Params;

/// The page's Content-Security-Policy: its own scripts, styles and
/// connections only; never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Every asset: its file name, content type and text.
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("assets/index.html")),
    ("style.css", "text/css; charset=utf-8", include_str!("assets/style.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("assets/api.js")),
    ("stream.js", "text/javascript; charset=utf-8", include_str!("assets/stream.js")),
    ("model.js", "text/javascript; charset=utf-8", include_str!("assets/model.js")),
    ("map.js", "text/javascript; charset=utf-8", include_str!("assets/map.js")),
    ("overview.js", "text/javascript; charset=utf-8", include_str!("assets/overview.js")),
    ("loads.js", "text/javascript; charset=utf-8", include_str!("assets/loads.js")),
    ("story.js", "text/javascript; charset=utf-8", include_str!("assets/story.js")),
    ("actions.js", "text/javascript; charset=utf-8", include_str!("assets/actions.js")),
    ("strategy.js", "text/javascript; charset=utf-8", include_str!("assets/strategy.js")),
    ("charts.js", "text/javascript; charset=utf-8", include_str!("assets/charts.js")),
    ("freeze.js", "text/javascript; charset=utf-8", include_str!("assets/freeze.js")),
    ("plan.js", "text/javascript; charset=utf-8", include_str!("assets/plan.js")),
];

/// The names of the assets.
pub fn asset_names() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|(name, _, _)| *name)
}

fn serve(name: &str) -> Response {
    let Some((_, content_type, text)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::not_found(ErrorCode::NoAsset, format!("the dashboard has no file {name:?}")).into_response();
    };
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (HeaderName::from_static("cross-origin-opener-policy"), HeaderValue::from_static("same-origin")),
    ];
    (StatusCode::OK, headers, *text).into_response()
}

/// The dashboard
///
/// The page (HTML). `?type=NAME` shows that entity type; without it, the
/// first. Needs no token: the page asks for the admin token when the node
/// has one and sends it with every call it makes.
#[utoipa::path(
    get, path = "/ui/", operation_id = "dashboard", tag = "dashboard", security(()),
    responses((status = 200, description = "The dashboard page.", content_type = "text/html", body = String)),
)]
pub async fn page() -> Response {
    serve("index.html")
}

/// The dashboard without its slash
///
/// Redirects to `/ui/` (a relative `Location`, so it works behind a path prefix).
#[utoipa::path(
    get, path = "/ui", operation_id = "dashboardRedirect", tag = "dashboard", security(()),
    responses((status = 308, description = "To `ui/`.")),
)]
pub async fn redirect() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, "ui/")]).into_response()
}

/// A file of the dashboard
///
/// Its scripts and style sheet. No token.
#[utoipa::path(
    get, path = "/ui/{asset}", operation_id = "dashboardAsset", tag = "dashboard", security(()),
    params(("asset" = String, Path, description = "The file: `app.js`, `style.css`…")),
    responses(
        (status = 200, description = "The file.", body = String),
        (status = 404, response = crate::server::openapi::NotFound),
    ),
)]
pub async fn asset(Params(name): Params<String>) -> Response {
    serve(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_served() {
        let names: Vec<&str> = asset_names().collect();
        for (name, _, text) in ASSETS {
            for line in text.lines() {
                let Some(from) = line.split(" from './").nth(1).or_else(|| line.split("src=\"").nth(1)) else {
                    continue;
                };
                let imported = from.split(['\'', '"']).next().unwrap().trim_start_matches("./");
                assert!(names.contains(&imported), "{name} imports {imported}, which is not served");
            }
        }
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for (name, _, text) in ASSETS {
            let forbidden_all = [
                "src=\"http",
                "href=\"http",
                "from 'http",
                "fetch('http",
                "<script>",
                "style=\"",
                "eval(",
                "innerHTML",
            ];
            for forbidden in forbidden_all {
                assert!(!text.contains(forbidden), "{name} contains {forbidden:?}");
            }
        }
    }
}
