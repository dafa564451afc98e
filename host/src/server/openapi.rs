//! The OpenAPI document's frame: title, description, tags, security schemes
//! and the error responses the endpoints share. The paths and body schemas
//! come from the handlers' `#[utoipa::path]` annotations and the REST body
//! types as the router registers them (`router.rs`); nothing here lists an
//! endpoint, and no JSON is written by hand.

use shardalloc_proto::api::ErrorBody;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToResponse};

/// The document's frame. See the module documentation.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "shardalloc node API",
        description = "One port serves everything. Admin calls live under `/v1` and take and return JSON with camelCase field names (the snapshot keeps the snake_case strategy snapshot format). When the node has an admin token, every `/v1` call needs `Authorization: Bearer <admin token>` except the WebSocket at `/v1/regions/connect`, which takes the region token. `/healthz`, `/livez`, `/readyz` and `/metrics` need no token. Errors answer `{\"error\":{\"code\":…,\"message\":…}}` with the status that fits; the WebSocket's own upgrade failures have plain-text bodies. Every call may answer `503` (`unavailable`) when the node is shutting down or its input queue is full. With several nodes on etcd, a node that does not lead forwards every `/v1` call but `/v1/cluster/leader`, `/v1/openapi.json` and the region WebSocket to the leader and returns its answer, or answers `503` (`no-leader`) while none is known. An unknown path answers `404` `no-route`; a known path with another method answers `405`. JSON bodies are at most 4 MiB; component uploads at most 32 MiB. Shard ids are 1 to 256 bytes; in request bodies a JSON integer is accepted as its decimal string. Path segments are percent-decoded: encode `/` in a shard id as `%2F`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    servers((url = "http://127.0.0.1:7878", description = "The default listen address.")),
    tags(
        (name = "health", description = "Liveness, readiness, metrics. No token."),
        (name = "types", description = "Entity types, their state and signal, and where a shard is."),
        (name = "placements", description = "Operators' placements and manual rebalance (external allocation)."),
        (name = "strategies", description = "Upload, activate, dry-run, shadow and roll back strategies."),
        (name = "regions", description = "Regions, drain, and the region-session WebSocket."),
        (name = "events", description = "The decision event stream (Server-Sent Events)."),
        (name = "freeze", description = "Freezes: a type's, the cluster's and the maintenance mode's."),
        (name = "cluster", description = "Who leads, answered by every node itself."),
        (name = "meta", description = "This document."),
        (name = "dashboard", description = "The dashboard page and its files. No token: the page asks for it."),
    ),
    security(("bearerAuth" = [])),
    modifiers(&SecuritySchemes),
    components(responses(
        BadRequest, Unauthorized, UnknownType, NotFound, Conflict, TooLarge, Unprocessable, DryRunBusy, TooManyStreams, Unavailable,
        Internal
    )),
)]
pub struct ApiDoc;

/// Adds the bearer-token security schemes.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(description)).build(),
            )
        };
        components.add_security_scheme(
            "bearerAuth",
            bearer(
                "The admin token (`--admin-token`, `--admin-token-file`, `SHARDALLOC_ADMIN_TOKEN`). Enforced on every `/v1` call but the WebSocket when the node has one; compared in constant time.",
            ),
        );
        components.add_security_scheme(
            "regionToken",
            bearer(
                "The region token (`--region-token`, `--region-token-file`, `SHARDALLOC_REGION_TOKEN`). Enforced on `/v1/regions/connect` when the node has one, before the upgrade.",
            ),
        );
    }
}

/// The request is malformed: invalid JSON, a wrong field, an empty or
/// over-long shard id, too many items. The message names the field.
#[derive(ToResponse)]
pub struct BadRequest(pub ErrorBody);

/// The admin token is missing or wrong (`unauthorized`). Send
/// `Authorization: Bearer <admin token>`.
#[derive(ToResponse)]
pub struct Unauthorized(pub ErrorBody);

/// No entity type has this name (`unknown-type`).
#[derive(ToResponse)]
pub struct UnknownType(pub ErrorBody);

/// The named thing does not exist; `code` says which.
#[derive(ToResponse)]
pub struct NotFound(pub ErrorBody);

/// The request conflicts with the state; `code` says how.
#[derive(ToResponse)]
pub struct Conflict(pub ErrorBody);

/// The body is larger than the endpoint accepts (`body-too-large`): 4 MiB
/// for JSON bodies, 32 MiB for component uploads.
#[derive(ToResponse)]
pub struct TooLarge(pub ErrorBody);

/// Well-formed, but it cannot be applied: the component does not compile
/// (`invalid-component`), the strategy refuses its configuration
/// (`strategy-refused`), or it fails the dry run (`dry-run-failed`).
#[derive(ToResponse)]
pub struct Unprocessable(pub ErrorBody);

/// Too many dry runs under way (`dry-run-busy`): one per type and two in
/// all run at once; retry when one has finished.
#[derive(ToResponse)]
pub struct DryRunBusy(pub ErrorBody);

/// The node already serves as many event streams as it allows
/// (`too-many-streams`, `--max-event-streams`), or this stream would
/// replay (start more than 1,000 events behind the newest) while 4 replay
/// already (`replays-busy`); retry after `Retry-After`.
#[derive(ToResponse)]
pub struct TooManyStreams(pub ErrorBody);

/// The node is shutting down or overloaded (`unavailable`); retry.
#[derive(ToResponse)]
pub struct Unavailable(pub ErrorBody);

/// An unexpected failure (`internal`), or the store or the compiler process
/// failed (`store`, `compiler`); the node logs it.
#[derive(ToResponse)]
pub struct Internal(pub ErrorBody);
