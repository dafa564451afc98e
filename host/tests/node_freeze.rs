//! Freezes against the real node: a frozen type's strategy moves nothing
//! while new shards still get a home and operators' placements still move
//! shards; a strict freeze holds `rebalance-now`; a freeze ends by itself at
//! its time limit; the cluster-wide freeze reaches every type, including
//! one created while it is in force; every freeze, lift and expiry is in
//! the history and the event stream; bad requests are refused naming the
//! problem. (Across a leader failover on etcd: `node_ha.rs`.)

use crate::node;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shardalloc_client::region::InMemoryTransport;
use shardalloc_proto::api::{ChangedBy, EventKind, FreezeAction, FreezeRequest, FreezeScope};

use node::{Journal, Node, assert_error, fast_args, registered, wait_for};

fn order(reason: &str, for_seconds: u64, strict: bool) -> FreezeRequest {
    FreezeRequest { for_seconds: Some(for_seconds), until: None, reason: reason.to_owned(), strict }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_type_keeps_its_shards_where_they_are_until_the_freeze_ends() {
    let node = Node::start(&fast_args(&["--auto-create-types"])).await;
    let admin = node.admin();
    let mut events = admin.events(Some("cart"), None).await.unwrap();
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let r1 = node.region("cart", "r1", &journal, &network, |_| {});
    registered(&r1).await;
    for i in 0..8 {
        r1.home_of(&format!("s{i}")).await.unwrap();
    }

    let state = admin.freeze(Some("cart"), &order("deploy 42", 600, false)).await.unwrap();
    assert!(state.frozen && !state.strict, "{state:?}");
    assert_eq!(state.freezes.len(), 1);
    let freeze = &state.freezes[0];
    assert_eq!((freeze.scope, freeze.reason.as_str()), (FreezeScope::Type, "deploy 42"));
    assert_eq!(freeze.until_ms.unwrap() - freeze.since_ms, 600_000);
    let event = wait_for("the frozen event", Duration::from_secs(30), async || {
        let event = tokio::time::timeout(Duration::from_secs(1), events.next()).await.ok()?.ok()??.event;
        (event.kind == EventKind::Frozen).then_some(event)
    })
    .await;
    assert_eq!(event.cause.as_deref(), Some("type"));
    assert_eq!(event.by, Some(ChangedBy::Operator));
    assert_eq!(event.detail.as_deref(), Some("deploy 42"));
    assert_eq!(event.until_ms, freeze.until_ms);

    // A second region joins: the strategy would move half the shards to it.
    let r2 = node.region("cart", "r2", &journal, &network, |_| {});
    registered(&r2).await;
    // A new shard still gets a home: the emptier region.
    assert_eq!(r1.home_of("new").await.unwrap(), "r2");
    // Many rebalance rounds (500 ms) pass and nothing else moves.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let state = admin.type_state("cart").await.unwrap();
    let on_r2: Vec<&str> = state.shards.iter().filter(|s| s.region == "r2").map(|s| s.shard_id.as_str()).collect();
    assert_eq!(on_r2, ["new"], "the strategy moved shards while frozen");
    // An operator's placement still moves its shard.
    admin.set_placement("cart", "s3", "r2").await.unwrap();
    wait_for("s3 to move to r2", Duration::from_secs(30), async || {
        (admin.shard("cart", "s3").await.ok()?.home.as_deref() == Some("r2")).then_some(())
    })
    .await;

    // Strict: rebalance-now is refused shard by shard.
    let strict = admin.freeze(Some("cart"), &order("incident 7", 600, true)).await.unwrap();
    assert!(strict.strict);
    let answer = admin.rebalance("cart", &["s4"], true).await.unwrap();
    assert!(answer.accepted.is_empty(), "{answer:?}");
    assert_eq!(answer.rejected[0].reason.as_str(), "frozen");

    // Lifted: the strategy evens the two regions out.
    let lifted = admin.lift_freeze(Some("cart"), "incident over").await.unwrap();
    assert!(!lifted.frozen);
    let actions: Vec<FreezeAction> = lifted.history.iter().map(|e| e.action).collect();
    assert_eq!(actions, [FreezeAction::Frozen, FreezeAction::Frozen, FreezeAction::Lifted]);
    assert_eq!(lifted.history[2].reason, "incident over");
    wait_for("the strategy to even the regions out", Duration::from_secs(60), async || {
        let state = admin.type_state("cart").await.ok()?;
        let on_r2 = state.shards.iter().filter(|s| s.region == "r2").count();
        (on_r2 >= 4).then_some(())
    })
    .await;

    // A freeze ends by itself at its time limit.
    admin.freeze(Some("cart"), &order("a short one", 1, false)).await.unwrap();
    let expired = wait_for("the freeze to expire", Duration::from_secs(30), async || {
        let state = admin.freezes(Some("cart")).await.ok()?;
        (!state.frozen).then_some(state)
    })
    .await;
    let last = expired.history.last().unwrap();
    assert_eq!((last.action, last.by), (FreezeAction::Expired, ChangedBy::Automatic));
    wait_for("the freeze-expired event", Duration::from_secs(30), async || {
        let event = tokio::time::timeout(Duration::from_secs(1), events.next()).await.ok()?.ok()??.event;
        (event.kind == EventKind::FreezeExpired).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_wide_freeze_reaches_every_type_and_bad_requests_are_refused() {
    let node = Node::start(&fast_args(&["--auto-create-types"])).await;
    let admin = node.admin();
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    registered(&node.region("cart", "r1", &journal, &network, |_| {})).await;

    let state = admin.freeze(None, &order("region-wide maintenance", 600, false)).await.unwrap();
    assert!(state.frozen);
    assert_eq!(state.freezes[0].scope, FreezeScope::Cluster);
    // A type created while it is in force is frozen too.
    registered(&node.region("orders", "r9", &journal, &network, |_| {})).await;
    for entity_type in ["cart", "orders"] {
        let state = admin.freezes(Some(entity_type)).await.unwrap();
        assert_eq!(state.freezes.len(), 1, "{entity_type}: {state:?}");
        assert_eq!(state.freezes[0].scope, FreezeScope::Cluster);
        assert_eq!(state.freezes[0].reason, "region-wide maintenance");
    }
    // A type's own lift leaves the cluster's freeze.
    let state = admin.lift_freeze(Some("cart"), "not mine to lift").await.unwrap();
    assert!(state.frozen, "{state:?}");
    let state = admin.lift_freeze(None, "done").await.unwrap();
    assert!(!state.frozen);
    assert_eq!(
        state.history.iter().map(|e| e.action).collect::<Vec<_>>(),
        [FreezeAction::Frozen, FreezeAction::Lifted]
    );
    for entity_type in ["cart", "orders"] {
        assert!(!admin.freezes(Some(entity_type)).await.unwrap().frozen, "{entity_type} still frozen");
    }

    // Bad requests name the problem.
    let path = "/v1/cluster/shards/cart/freeze";
    let cases: [(Value, &str); 6] = [
        (json!({"reason": "x"}), "a freeze needs an end"),
        (json!({"reason": "x", "forSeconds": 10, "until": 4_000_000_000_000u64}), "not both"),
        (json!({"reason": " ", "forSeconds": 10}), "a freeze needs a reason"),
        (json!({"reason": "x", "until": 1_000}), "in the past"),
        (json!({"reason": "x", "forSeconds": 3_000_000}), "at most 2592000 s"),
        (json!({"reason": "x", "forSeconds": 10, "color": "blue"}), "unknown field"),
    ];
    for (body, says) in cases {
        let answer = node.request(Method::PUT, path, Some(&body.to_string())).await;
        let code = assert_error(&body.to_string(), &answer, StatusCode::BAD_REQUEST);
        let message = answer.1["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message:?} ({code}) does not say {says:?}");
    }
    let answer = node.request(Method::GET, "/v1/cluster/shards/nope/freeze", None).await;
    assert_error("unknown type", &answer, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_wide_freeze_without_types_is_refused() {
    let node = Node::start(&node::FAST.iter().copied().chain(["--auto-create-types"]).collect::<Vec<_>>()).await;
    let body = json!({"reason": "x", "forSeconds": 10}).to_string();
    let answer = node.request(Method::PUT, "/v1/cluster/freeze", Some(&body)).await;
    assert_eq!(assert_error("no types", &answer, StatusCode::CONFLICT), "no-types");
    let message = answer.1["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no entity type"), "{message}");
}

/// Runs `shardalloc freeze` against `node` with `args` (on a blocking thread).
async fn freeze_command(node: &Node, args: &[&str]) -> (bool, String, String) {
    let mut command = node::command();
    command.arg("freeze").args(args).args(["--node", &node.url("")]);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run shardalloc freeze")).await.unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status.success(), text(output.stdout), text(output.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_freeze_command_freezes_shows_and_lifts() {
    let node = Node::start(&fast_args(&[])).await;
    let (ok, out, err) =
        freeze_command(&node, &["set", "cart", "--for", "10m", "--reason", "deploy 42", "--strict"]).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("cart is frozen (type freeze, strict) for 9m 5") || out.contains("for 10m 0s"), "{out}");
    assert!(out.trim_end().ends_with(": deploy 42"), "{out}");
    let (ok, out, _) = freeze_command(&node, &["show", "cart"]).await;
    assert!(ok && out.contains("ago: type frozen by operator: deploy 42"), "{out}");
    let (ok, out, _) = freeze_command(&node, &["lift", "cart", "--reason", "deployed"]).await;
    assert!(ok && out == "cart is not frozen\n", "{out}");
    let (ok, out, _) = freeze_command(&node, &["show", "cart", "--json"]).await;
    let state: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(ok && state["history"][1]["reason"] == "deployed", "{out}");
    // Refused before anything is sent, and by the node, naming the problem.
    let (ok, _, err) = freeze_command(&node, &["set", "cart", "--for", "0", "--reason", "x"]).await;
    assert!(!ok && err.contains("at least a second"), "{err}");
    let (ok, _, err) = freeze_command(&node, &["set", "nope", "--for", "1m", "--reason", "x"]).await;
    assert!(!ok && err.contains("unknown-type"), "{err}");
}
