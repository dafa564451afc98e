//! Stopping regions against the real node: which regions may stop now,
//! together (a zone left empty, shards with no other home, an unknown
//! region, a strict freeze), and bad questions refused naming the problem.
//! (A drain's progress: `cli_drain.rs`; across a failover: `node_ha.rs`.)

use crate::node;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use shardalloc_client::region::InMemoryTransport;
use shardalloc_proto::api::{FreezeRequest, StopReason, Stoppable};

use node::{Journal, Node, assert_error, fast_args, registered, wait_for};

fn reasons(answer: &Stoppable, address: &str) -> Vec<(Option<String>, StopReason)> {
    let blocked = answer.not_stoppable.iter().find(|n| n.address == address);
    blocked.map(|n| n.reasons.iter().map(|r| (r.entity_type.clone(), r.reason)).collect()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn regions_may_stop_together_unless_a_zone_or_their_shards_would_be_stranded() {
    let node = Node::start(&fast_args(&[])).await;
    let (journal, network) = (Journal::default(), InMemoryTransport::new());
    let mut regions = Vec::new();
    for (address, zone) in [("a", "z1"), ("b", "z1"), ("c", "z2")] {
        let region = node.region("cart", address, &journal, &network, |config| {
            config.labels.insert("zone".into(), zone.into());
        });
        registered(&region).await;
        regions.push(region);
    }
    for i in 0..9 {
        regions[0].home_of(&format!("s{i}")).await.unwrap();
    }
    let admin = node.admin();
    wait_for("every region to hold shards", Duration::from_secs(60), async || {
        let regions = admin.regions().await.ok()?;
        regions.regions.iter().all(|r| r.shards > 0).then_some(())
    })
    .await;

    let answer = admin.stoppable(&["a", "b", "c", "x"]).await.unwrap();
    assert_eq!(answer.stoppable, ["a"], "{answer:?}");
    let cart = Some("cart".to_owned());
    assert_eq!(reasons(&answer, "b"), [(cart.clone(), StopReason::ZoneLeftEmpty)], "{answer:?}");
    assert_eq!(reasons(&answer, "c"), [(cart.clone(), StopReason::ZoneLeftEmpty)], "{answer:?}");
    assert_eq!(reasons(&answer, "x"), [(None, StopReason::UnknownRegion)], "{answer:?}");
    let detail = &answer.not_stoppable[0].reasons[0].detail;
    assert_eq!(detail, "zone z1 would have no region left to take shards");
    // Alone, b may stop; asked in another order, b is the one that may.
    assert_eq!(admin.stoppable(&["b"]).await.unwrap().stoppable, ["b"]);
    assert_eq!(admin.stoppable(&["b", "a"]).await.unwrap().stoppable, ["b"]);

    // A strict freeze holds every drain: none that holds shards may stop.
    let strict = FreezeRequest { for_seconds: Some(600), until: None, reason: "incident".into(), strict: true };
    admin.freeze(Some("cart"), &strict).await.unwrap();
    let answer = admin.stoppable(&["a"]).await.unwrap();
    assert_eq!(reasons(&answer, "a"), [(cart, StopReason::FrozenStrictly)], "{answer:?}");

    for (path, says) in [
        ("/v1/cluster/regions/stoppable?addresses=", "names no region"),
        ("/v1/cluster/regions/stoppable", "addresses"),
    ] {
        let answer = node.request(Method::GET, path, None).await;
        assert_error(path, &answer, StatusCode::BAD_REQUEST);
        let message = answer.1["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path}: {message}");
    }
    let many = vec!["r"; 1001].join(",");
    let answer = node.request(Method::GET, &format!("/v1/cluster/regions/stoppable?addresses={many}"), None).await;
    assert_eq!(assert_error("too many", &answer, StatusCode::BAD_REQUEST), "too-many");
}
