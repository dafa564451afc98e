//! `/livez`: live while the driver thread stamps its heartbeat, 503 once it
//! stalls past the bound or stops; on a node that does not lead, live while
//! the election runs.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::watch;

use super::{PATIENCE, TestNode, assert_error, settings_with};
use crate::server::api_error::ErrorCode;
use crate::server::driver::progress::STALL_BOUND;
use crate::server::driver::{DriverHandle, Input};
use crate::server::leadership::{Leadership, NodeIdentity, Role};
use crate::server::rest::health::liveness;
use crate::server::state::Security;

#[tokio::test]
async fn livez_is_live_without_a_token_while_the_driver_turns() {
    let security = Security { admin_token: Some("secret".into()), ..Security::default() };
    let node = TestNode::with(settings_with(&["cart"]), security);
    let answer = node.request(Method::GET, "/livez", None).await;
    assert_eq!(answer, (StatusCode::OK, Value::String("live\n".into())));

    // The idle driver wakes up at every tick (100 ms) and stamps its
    // heartbeat: after 5 s with nothing to do, the last stamp is recent.
    let progress = node.node().state.driver.progress().expect("a node alone has a driver thread");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let silent = progress.silent_at(Instant::now());
    assert!(silent < Duration::from_secs(2), "the idle driver last stamped its heartbeat {silent:?} ago");
}

#[tokio::test]
async fn livez_fails_once_the_driver_stalls_past_the_bound() {
    let node = TestNode::start();
    let state = &node.node().state;
    let now = Instant::now();
    assert_eq!(liveness(&state.driver, &state.leadership, now, STALL_BOUND), Ok(()));
    // The same heartbeat seen from a time past the bound: the driver has
    // not turned since (a stuck thread looks exactly like this).
    let later = now + STALL_BOUND + Duration::from_secs(1);
    let error = liveness(&state.driver, &state.leadership, later, STALL_BOUND).unwrap_err();
    assert_eq!((error.status, error.code), (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Stalled), "{error:?}");
    assert!(error.message.contains("no progress"), "{}", error.message);
}

#[tokio::test]
async fn livez_fails_once_the_driver_of_a_node_alone_stopped() {
    let node = TestNode::start();
    let driver = node.node().state.driver.clone();
    driver.send(Input::Shutdown).await.expect("the driver takes the shutdown");
    tokio::time::timeout(PATIENCE, driver.stopped()).await.expect("the driver stops");
    let answer = node.request(Method::GET, "/livez", None).await;
    let code = assert_error("/livez after the driver stopped", &answer, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "driver-stopped");
}

#[test]
fn a_node_without_a_driver_is_live_while_its_election_runs() {
    let me = NodeIdentity { name: "n2".into(), url: "http://127.0.0.1:2".into() };
    let leader = NodeIdentity { name: "n1".into(), url: "http://127.0.0.1:1".into() };
    let (election, role) = watch::channel(Role { term: 3, leader: Some(leader), leading: false, trouble: None });
    let follower = Leadership::elected(me, role);
    let detached = DriverHandle::detached();
    let far = Instant::now() + Duration::from_secs(3_600);
    assert_eq!(liveness(&detached, &follower, far, STALL_BOUND), Ok(()), "a follower has no driver to check");
    drop(election);
    let error = liveness(&detached, &follower, Instant::now(), STALL_BOUND).unwrap_err();
    assert_eq!((error.status, error.code), (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ElectionStopped), "{error:?}");
}
