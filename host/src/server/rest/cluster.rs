//! `GET /v1/cluster/leader`: answered by every node itself, never forwarded.

use axum::Json;
use axum::extract::State;
use shardalloc_proto::api::{ClusterLeader, ClusterNode};

use crate::server::leadership::NodeIdentity;
use crate::server::state::AppState;

fn node(identity: &NodeIdentity) -> ClusterNode {
    ClusterNode { name: identity.name.clone(), url: identity.url.clone() }
}

/// Who leads
///
/// Answered by the node called, from what it knows now: the leader (`null`
/// while an election is under way), itself, and the term, which grows with
/// every new leadership. A node without etcd names itself, in term 1.
/// Never forwarded.
#[utoipa::path(
    get, path = "/v1/cluster/leader", operation_id = "clusterLeader", tag = "cluster",
    responses(
        (status = 200, description = "The leader as this node knows it.", body = ClusterLeader),
        (status = 401, response = crate::server::openapi::Unauthorized),
    ),
)]
pub async fn leader(State(state): State<AppState>) -> Json<ClusterLeader> {
    let role = state.leadership.role();
    Json(ClusterLeader { leader: role.leader.as_ref().map(node), self_: node(state.leadership.me()), term: role.term })
}
