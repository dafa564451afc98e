//! The type limit on the real node (issue 23): a node serves 1,024 entity
//! types, each with its strategy, and refuses one more, declared or
//! created by a region's registration, with an error naming the limit.
//! Before, the engine's instance pool held 170 types of a built-in: a node
//! with 171 declared types did not start.

use crate::node;

use std::process::Stdio;
use std::time::Duration;

use shardalloc::server::driver::catalog::MAX_TYPES;
use shardalloc::strategy::builtin;
use shardalloc_client::region::{InMemoryTransport, RegionError};
use shardalloc_proto::api::HomeReason;

use node::{Journal, Node, registered};

/// The built-in of the `i`th declared type: the four in turn.
fn strategy_of(i: usize) -> &'static str {
    let names: Vec<&'static str> = builtin::names().collect();
    names[i % names.len()]
}

/// `--type type-I=STRATEGY` for the first `count` types.
fn declarations(count: usize) -> Vec<String> {
    (0..count).flat_map(|i| ["--type".to_owned(), format!("type-{i}={}", strategy_of(i))]).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_serves_1024_types_each_with_its_strategy_and_creates_no_more() {
    let mut args = declarations(MAX_TYPES);
    args.push("--auto-create-types".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = Node::start(&args).await;

    let types = node.admin().types().await.unwrap().types;
    assert_eq!(types.len(), MAX_TYPES);
    for summary in &types {
        let i: usize = summary.name.strip_prefix("type-").and_then(|i| i.parse().ok()).expect("a declared type");
        assert!(summary.strategy.starts_with(&format!("{}@", strategy_of(i))), "{summary:?}");
    }

    // The last types declared (far past the 170 the pool held before)
    // answer through their own strategies.
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    for i in MAX_TYPES - 4..MAX_TYPES {
        let name = format!("type-{i}");
        let region = node.region(&name, &format!("region-{i}"), &journal, &network, |_| {});
        registered(&region).await;
        let home = tokio::time::timeout(Duration::from_secs(30), region.home_of("7")).await.unwrap().unwrap();
        assert_eq!(home, format!("region-{i}"));
        // Chosen by the type's strategy, not by the fallback.
        let shard = node.admin().shard(&name, "7").await.unwrap();
        assert_eq!(shard.reason, Some(HomeReason::Strategy), "{shard:?}");
        let detail = shard.detail.unwrap_or_default();
        assert!(detail.starts_with(&format!("{}@", strategy_of(i))), "{name}: {detail}");
        region.shutdown().await;
    }

    // One more type, created by a region's registration, is refused.
    let extra = node.region("one-too-many", "region-x", &journal, &network, |_| {});
    match tokio::time::timeout(Duration::from_secs(30), extra.wait_registered()).await {
        Ok(Err(RegionError::Refused { reason })) => {
            assert!(reason.contains(&format!("{MAX_TYPES} entity types")), "{reason}")
        }
        other => panic!("a 1,025th type was not refused: {other:?}"),
    }
    extra.shutdown().await;
    assert_eq!(node.admin().types().await.unwrap().types.len(), MAX_TYPES);
}

#[test]
fn a_node_declaring_more_than_1024_types_does_not_start_and_says_why() {
    let data = tempfile::tempdir().unwrap();
    let output = node::command()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .args(declarations(MAX_TYPES + 1))
        .stdin(Stdio::null())
        .output()
        .expect("run shardalloc serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{} entity types are declared", MAX_TYPES + 1)), "{stderr}");
    assert!(stderr.contains(&format!("at most {MAX_TYPES}")), "{stderr}");
}
