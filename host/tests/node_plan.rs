//! What-if plans against the real node: a drain, a removal and an added
//! region planned on the live view with the active strategy or a candidate,
//! nothing changed by any of them, `shardalloc plan` printing one, and bad
//! plans refused naming the problem (an unknown region, an empty cluster,
//! too many rounds, a configuration without its strategy).

use crate::node;

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use shardalloc_client::region::InMemoryTransport;
use shardalloc_proto::api::{PlanRegion, PlanRequest, PlanResponse};

use node::{Journal, Node, assert_error, fast_args, registered, wait_for};

/// Each region's shard count, as the node has it now.
async fn live_counts(node: &Node) -> BTreeMap<String, usize> {
    let regions = node.admin().regions().await.unwrap();
    regions.regions.iter().map(|r| (r.address.clone(), r.shards)).collect()
}

/// Each region's shards, from the type's snapshot.
async fn homes(node: &Node) -> BTreeMap<String, serde_json::Value> {
    let snapshot = node.admin().snapshot("cart").await.unwrap();
    let regions = snapshot["regions"].as_array().expect("a snapshot lists its regions");
    regions.iter().map(|r| (r["address"].as_str().unwrap().to_owned(), r["shards"].clone())).collect()
}

fn final_counts(plan: &PlanResponse) -> BTreeMap<String, usize> {
    plan.regions.iter().map(|r| (r.address.clone(), r.shards)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn plans_show_what_a_drain_a_removal_or_a_new_region_would_do_and_change_nothing() {
    let node = Node::start(&fast_args(&[])).await;
    let (journal, network) = (Journal::default(), InMemoryTransport::new());
    let mut regions = Vec::new();
    for address in ["a", "b", "c"] {
        let region = node.region("cart", address, &journal, &network, |_| {});
        registered(&region).await;
        regions.push(region);
    }
    for i in 0..12 {
        regions[0].home_of(&format!("s{i}")).await.unwrap();
    }
    let admin = node.admin();
    let before = wait_for("every region to hold four shards", Duration::from_secs(60), async || {
        let counts = live_counts(&node).await;
        counts.values().all(|n| *n == 4).then_some(counts)
    })
    .await;
    let homes_before = homes(&node).await;

    // Draining a: its four shards find homes in round 0, on b and c.
    let drain = PlanRequest { drain: vec!["a".into()], ..PlanRequest::default() };
    let plan = admin.plan("cart", &drain).await.unwrap();
    assert_eq!(plan.displaced.len(), 4, "{plan:?}");
    assert!(plan.displaced.iter().all(|m| m.from == "a" && matches!(m.to.as_deref(), Some("b" | "c"))), "{plan:?}");
    assert_eq!(plan.rounds.len(), 3, "the default is three rounds: {plan:?}");
    let counts = final_counts(&plan);
    assert_eq!((counts["a"], counts["b"] + counts["c"]), (0, 12), "{plan:?}");
    assert!(plan.strategy.contains('@'), "{}", plan.strategy);

    // Removing b and c: a gets every shard.
    let remove = PlanRequest { remove_regions: vec!["b".into(), "c".into()], rounds: 1, ..PlanRequest::default() };
    let plan = admin.plan("cart", &remove).await.unwrap();
    assert_eq!(plan.displaced.len(), 8, "{plan:?}");
    assert_eq!(final_counts(&plan), BTreeMap::from([("a".to_owned(), 12)]), "{plan:?}");

    // A new region d with the active strategy: the rebalance rounds move
    // shards to it, each shard once at most, and loads are summed per region.
    let add = PlanRequest {
        add_regions: vec![PlanRegion { address: "d".into(), labels: BTreeMap::new(), capacity: Some(100.0) }],
        loads: (0..12).map(|i| (format!("s{i}"), 2.0)).collect(),
        rounds: 5,
        ..PlanRequest::default()
    };
    let plan = admin.plan("cart", &add).await.unwrap();
    assert!(plan.displaced.is_empty(), "{plan:?}");
    let to_d: Vec<_> = plan.rounds.iter().flat_map(|r| &r.moves).filter(|m| m.to.as_deref() == Some("d")).collect();
    assert!(!to_d.is_empty(), "nothing moves to the new region: {plan:?}");
    let counts = final_counts(&plan);
    assert_eq!(counts.values().sum::<usize>(), 12, "{plan:?}");
    assert_eq!(counts["d"], to_d.len(), "{plan:?}");
    let d = plan.regions.iter().find(|r| r.address == "d").unwrap();
    assert_eq!(d.load, Some(2.0 * to_d.len() as f64), "{plan:?}");

    // A candidate: a built-in by name, with its configuration.
    let candidate = PlanRequest {
        drain: vec!["c".into()],
        strategy: Some("least-shard".into()),
        config: Some(json!({})),
        ..PlanRequest::default()
    };
    let plan = admin.plan("cart", &candidate).await.unwrap();
    assert!(plan.strategy.starts_with("least-shard@"), "{}", plan.strategy);
    assert_eq!(final_counts(&plan)["c"], 0, "{plan:?}");

    // Nothing changed: the same homes, counts, no drain.
    assert_eq!(live_counts(&node).await, before);
    assert_eq!(homes(&node).await, homes_before);
    let regions_now = admin.regions().await.unwrap();
    assert!(regions_now.regions.iter().all(|r| !r.draining), "{regions_now:?}");

    // Bad plans, each refused naming its problem.
    for (body, status, code, says) in [
        (json!({"drain": ["x"]}), StatusCode::BAD_REQUEST, "invalid-plan", "no region \"x\""),
        (json!({"removeRegions": ["nope"]}), StatusCode::BAD_REQUEST, "invalid-plan", "no region \"nope\""),
        (json!({"addRegions": [{"address": "a"}]}), StatusCode::BAD_REQUEST, "invalid-plan", "\"a\" is already"),
        (json!({"loads": {"s1": -1.0}}), StatusCode::BAD_REQUEST, "invalid-plan", "load of shard \"s1\""),
        (json!({"drain": ["a"], "rounds": 101}), StatusCode::BAD_REQUEST, "invalid-plan", "at most 100"),
        (json!({"config": {}}), StatusCode::BAD_REQUEST, "invalid-plan", "config without strategy"),
        (json!({"removeRegions": ["a", "b", "c"]}), StatusCode::CONFLICT, "empty-cluster", "no region"),
        (json!({"drain": ["a", "b", "c"]}), StatusCode::CONFLICT, "empty-cluster", "no region"),
        (json!({"strategy": "no-such-strategy"}), StatusCode::NOT_FOUND, "", "no-such-strategy"),
        (json!({"drian": ["a"]}), StatusCode::BAD_REQUEST, "", "drian"),
    ] {
        let answer = node.request(Method::POST, "/v1/cluster/shards/cart/plan", Some(&body.to_string())).await;
        let got = assert_error(&body.to_string(), &answer, status);
        if !code.is_empty() {
            assert_eq!(got, code, "{body}: {answer:?}");
        }
        let message = answer.1["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    let answer = node.request(Method::POST, "/v1/cluster/shards/nope/plan", Some("{}")).await;
    assert_eq!(assert_error("unknown type", &answer, StatusCode::NOT_FOUND), "unknown-type");
    assert_eq!(live_counts(&node).await, before, "a refused plan changed something");

    // The command prints the rounds and the regions at the end.
    let (ok, out, err) = plan_command(&node, &["cart", "--drain", "a", "--rounds", "1"]).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("plan of cart with "), "{out}");
    assert!(out.contains("round 0: 4 shard(s) displaced (a → "), "{out}");
    assert!(out.contains("round 1: "), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["a", "0", "-"]), "{out}");
    let (ok, out, _) = plan_command(&node, &["cart", "--add", "d,zone=z9,capacity=5", "--json"]).await;
    let plan: PlanResponse = serde_json::from_str(&out).unwrap();
    assert!(ok && plan.regions.iter().any(|r| r.address == "d"), "{out}");
    let (ok, _, err) = plan_command(&node, &["cart"]).await;
    assert!(!ok && err.contains("nothing to plan"), "{err}");
    let (ok, _, err) = plan_command(&node, &["cart", "--drain", "zz"]).await;
    assert!(!ok && err.contains("invalid-plan") && err.contains("no region \"zz\""), "{err}");
}

/// Runs `shardalloc plan` against `node` with `args` (on a blocking thread).
async fn plan_command(node: &Node, args: &[&str]) -> (bool, String, String) {
    let mut command = node::command();
    command.arg("plan").args(args).args(["--node", &node.url("")]);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run shardalloc plan")).await.unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status.success(), text(output.stdout), text(output.stderr))
}
