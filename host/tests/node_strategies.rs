//! Strategies on the real node: an uploaded component hot-swapped in and
//! rolled back while regions keep asking for homes. The strategy endpoints'
//! rules (an active upload cannot be deleted…) are tested in-process
//! (`host/src/server/tests/strategies.rs`).

use crate::node;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use shardalloc_client::region::{InMemoryTransport, RegionHandle};
use shardalloc_proto::api::{ActivateRequest, StrategyState};

use node::{Journal, Msg, Node, fast_args, registered, wait_for};

/// The built-in hash strategy's component, as an operator would upload it.
fn hash_bytes() -> Vec<u8> {
    shardalloc::strategy::builtin::component_bytes("hash").expect("hash is built in").to_vec()
}

fn names_and_causes(state: &StrategyState) -> Vec<(&str, &str)> {
    state.history.iter().map(|a| (a.name.as_str(), a.cause.as_str())).collect()
}

/// Regions `a` and `b` of type `cart` on `node`, registered.
async fn two_regions(node: &Node, journal: &Journal) -> Vec<RegionHandle<Msg, String>> {
    let network = InMemoryTransport::new();
    let regions =
        vec![node.region("cart", "a", journal, &network, |_| {}), node.region("cart", "b", journal, &network, |_| {})];
    for region in &regions {
        registered(region).await;
    }
    regions
}

struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

/// Every region asks for homes in a loop: a new shard each time (so the
/// strategy decides) and, in between, one of 64 shared shards.
fn load(regions: &[RegionHandle<Msg, String>]) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks = regions
        .iter()
        .cloned()
        .map(|region| {
            let stop = stop.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let mut failures = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let shard = if n.is_multiple_of(2) {
                        format!("{}-{n}", region.address())
                    } else {
                        format!("shared-{}", n % 64)
                    };
                    match tokio::time::timeout(Duration::from_secs(20), region.home_of(&shard)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => failures.push(format!("{} home_of({shard}): {error}", region.address())),
                        Err(_) => failures.push(format!("{} home_of({shard}): no answer in 20 s", region.address())),
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                failures
            })
        })
        .collect();
    Load { stop, done, tasks }
}

impl Load {
    /// Waits until `more` look-ups completed from now.
    async fn progress(&self, more: u64, what: &str) {
        let target = self.done.load(Ordering::Relaxed) + more;
        wait_for(&format!("{more} home look-ups {what}"), Duration::from_secs(60), async || {
            (self.done.load(Ordering::Relaxed) >= target).then_some(())
        })
        .await;
    }

    async fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        for task in self.tasks {
            failures.extend(task.await.expect("a load task panicked"));
        }
        (self.done.load(Ordering::Relaxed), failures)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_swap_and_rollback_under_load_fail_no_home_lookup() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let regions = two_regions(&node, &journal).await;
    let admin = node.admin();
    let load = load(&regions);
    load.progress(100, "before the upload").await;

    let stored = admin.upload_strategy(hash_bytes()).await.unwrap();
    assert!(stored.digest.starts_with("sha256:"), "{stored:?}");
    assert_eq!(stored.name, "hash");
    load.progress(50, "after the upload").await;

    let activated = admin
        .activate("cart", &ActivateRequest { strategy: stored.digest.clone(), config: None, force: false })
        .await
        .unwrap();
    assert_eq!(activated.active.name, "hash", "{activated:?}");
    let types = admin.types().await.unwrap();
    assert!(types.types[0].strategy.starts_with("hash@"), "{types:?}");
    load.progress(200, "under the uploaded strategy").await;

    let rolled_back = admin.rollback("cart").await.unwrap();
    assert_eq!(rolled_back.active.name, "least-shard", "{rolled_back:?}");
    load.progress(200, "after the rollback").await;
    let (lookups, failures) = load.finish().await;
    assert!(failures.is_empty(), "{} of {lookups} home look-ups failed:\n{}", failures.len(), failures.join("\n"));

    let state = admin.strategy("cart").await.unwrap();
    assert_eq!(state.active.name, "least-shard", "{state:?}");
    assert_eq!(
        names_and_causes(&state),
        [("least-shard", "initial"), ("hash", "operator"), ("least-shard", "rollback")],
        "{state:?}"
    );
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    eprintln!("{lookups} home look-ups, none failed");
    for region in regions {
        region.shutdown().await;
    }
}

/// A built-in of contract 0.3 and its 0.1 build swap and shadow each other
/// in a node, agreeing on every home.
#[tokio::test(flavor = "multi_thread")]
async fn contracts_0_1_and_0_3_swap_and_shadow_each_other_in_a_node() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let regions = two_regions(&node, &journal).await;
    let admin = node.admin();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/strategy-0.1/least-shard.wasm");
    let old = admin.upload_strategy(std::fs::read(&path).unwrap()).await.unwrap();
    let home = |shard: String, n: usize| {
        let region = &regions[n % 2];
        async move {
            tokio::time::timeout(Duration::from_secs(20), region.home_of(&shard))
                .await
                .unwrap_or_else(|_| panic!("{shard}: no home in 20 s"))
                .unwrap_or_else(|e| panic!("{shard}: {e}"))
        }
    };
    // The 0.3 built-in active, its 0.1 build shadowing: they agree.
    let request = |strategy: &str| ActivateRequest { strategy: strategy.to_owned(), config: None, force: false };
    admin.set_shadow("cart", &request(&old.digest)).await.unwrap();
    for n in 0..10 {
        home(format!("a-{n}"), n).await;
    }
    let state = admin.strategy("cart").await.unwrap();
    assert_eq!(state.active.name, "least-shard");
    assert!(state.shadow_calls >= 10, "{state:?}");
    assert_eq!(state.shadow_disagreements, 0, "{state:?}");
    // Swapped: the 0.1 build active, the 0.3 built-in shadowing.
    admin.activate("cart", &request(&old.digest)).await.unwrap();
    admin.set_shadow("cart", &request("least-shard")).await.unwrap();
    for n in 0..10 {
        home(format!("b-{n}"), n).await;
    }
    let state = admin.strategy("cart").await.unwrap();
    assert_eq!(state.active.digest, old.digest, "{state:?}");
    assert!(state.shadow_calls >= 10, "{state:?}");
    assert_eq!(state.shadow_disagreements, 0, "{state:?}");
    let shard = admin.shard("cart", "b-3").await.unwrap();
    assert!(shard.detail.unwrap_or_default().starts_with("least-shard@"));
    for region in regions {
        region.shutdown().await;
    }
}

/// The built-ins as contracts 0.1 and 0.2 built them (`contracts/strategy-0.1/`
/// and `-0.2/`, guarded in the engine by `contract_strategy.rs`) run in a
/// node beside 0.3's: each is uploaded, activated and chooses the homes of
/// new shards, by its own name.
#[tokio::test(flavor = "multi_thread")]
async fn the_0_1_and_0_2_builtins_run_in_a_node() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let regions = two_regions(&node, &journal).await;
    let admin = node.admin();
    let old = ["least-shard", "hash", "capacity", "zone"].map(|name| ("0.1", name));
    let older = ["least-shard", "hash", "capacity", "zone", "load-balance"].map(|name| ("0.2", name));
    for (version, name) in old.into_iter().chain(older) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../contracts/strategy-{version}/{name}.wasm"));
        let stored = admin.upload_strategy(std::fs::read(&path).unwrap()).await.unwrap();
        assert_eq!(stored.name, name, "{stored:?}");
        let request = ActivateRequest { strategy: stored.digest.clone(), config: None, force: false };
        let activated = admin.activate("cart", &request).await.unwrap();
        assert_eq!(activated.active.name, name, "{activated:?}");
        for n in 0..10 {
            let shard = format!("{name}-{version}-{n}");
            let home = tokio::time::timeout(Duration::from_secs(20), regions[n % 2].home_of(&shard))
                .await
                .unwrap_or_else(|_| panic!("{shard}: no home in 20 s"))
                .unwrap_or_else(|e| panic!("{shard}: {e}"));
            let state = admin.shard("cart", &shard).await.unwrap();
            assert_eq!(state.home.as_deref(), Some(home.as_str()), "{state:?}");
            let detail = state.detail.clone().unwrap_or_default();
            assert!(detail.starts_with(&format!("{name}@")), "{shard} was placed by {detail}, not {name}: {state:?}");
        }
    }
    for region in regions {
        region.shutdown().await;
    }
}

/// Runs the CLI against `node`; its standard output, after it exited 0.
async fn cli(node: &Node, args: &[&str]) -> String {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--node", node.base.as_str()]);
    let (code, out, err) = node::run_binary(&all, Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "shardalloc {all:?}: {err}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_dry_runs_and_shadows_a_candidate_on_the_node() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    for i in 0..6 {
        a.home_of(&format!("s{i}")).await.unwrap();
    }
    let out = cli(&node, &["strategy", "dry-run", "cart", "hash", "--shard", "new-1", "--rounds", "2"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("hash@") && lines[0].ends_with(" on cart (nothing applied)"), "{out}");
    assert!(lines[1] == "allocate new-1 -> a" || lines[1] == "allocate new-1 -> b", "{out}");
    assert!(lines[2].starts_with("rebalance: "), "{out}");
    assert!(lines[3].starts_with("round 1: ") && lines[4].starts_with("round 2: "), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&cli(&node, &["strategy", "dry-run", "cart", "hash", "--json"]).await).unwrap();
    assert_eq!(json["rounds"].as_array().map(Vec::len), Some(3), "{json}");

    let set = cli(&node, &["strategy", "shadow", "set", "cart", "hash"]).await;
    assert!(set.contains("cart: active least-shard@") && set.contains("\nshadow hash@"), "{set}");
    a.home_of("s-new").await.unwrap();
    let shown = cli(&node, &["strategy", "shadow", "show", "cart", "--json"]).await;
    let state: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert!(state["shadowCalls"].as_u64().unwrap() >= 1, "the shadow was asked: {state}");
    let cleared = cli(&node, &["strategy", "shadow", "clear", "cart"]).await;
    assert!(cleared.contains("\nno shadow\npast shadow hash@"), "{cleared}");
    // A bad configuration is named, and the command fails.
    let (code, _, err) = node::run_binary(
        &["strategy", "dry-run", "cart", "hash", "--config", "{not json", "--node", node.base.as_str()],
        Duration::from_secs(60),
    )
    .await;
    assert_ne!(code, Some(0));
    assert!(err.contains("--config is not JSON"), "{err}");
    a.shutdown().await;
    b.shutdown().await;
}

/// Issue 40: a strategy that reads every shard id swaps into a type of
/// 100,000 shards on a running node (a debug build): the activation's dry
/// run loads the whole view with every id, in bulk, within the view-load
/// budget (one host call per id inside the 50 ms call deadline was refused
/// at 10,000 shards), and the strategy then decides the type's homes. Then
/// every shard gets attributes and one reading them all swaps in the same
/// way.
#[tokio::test(flavor = "multi_thread")]
async fn a_strategy_reading_every_id_swaps_into_a_type_of_100_000_shards() {
    // No rebalance round of its own: the swap's dry run is what is measured.
    let node = Node::start(&["--type", "cart", "--rebalance-interval-ms", "600000"]).await;
    let journal = Journal::default();
    let regions = two_regions(&node, &journal).await;
    const SHARDS: usize = 100_000;
    let started = std::time::Instant::now();
    for chunk in (0..SHARDS).collect::<Vec<_>>().chunks(2_000) {
        let asks = chunk.iter().map(|&n| {
            let region = &regions[n % 2];
            async move {
                tokio::time::timeout(Duration::from_secs(120), region.home_of(&format!("tenant-{n}")))
                    .await
                    .unwrap_or_else(|_| panic!("tenant-{n}: no home in 120 s"))
                    .unwrap_or_else(|e| panic!("tenant-{n}: {e}"))
            }
        });
        futures_util::future::join_all(asks).await;
    }
    eprintln!("{SHARDS} shards homed in {:?}", started.elapsed());
    let admin = node.admin();
    let uploaded = admin.upload_strategy(crate::common::misbehaving_bytes().to_vec()).await.unwrap();
    let config = serde_json::json!({"rebalance": "read-ids", "needs_ids": true});
    let request = ActivateRequest { strategy: uploaded.digest.clone(), config: Some(config), force: false };
    let started = std::time::Instant::now();
    admin.activate("cart", &request).await.unwrap_or_else(|e| panic!("activating at {SHARDS} shards: {e}"));
    eprintln!("activated (its dry run over every id among it) in {:?}", started.elapsed());
    let state = admin.strategy("cart").await.unwrap();
    assert_eq!(state.active.digest, uploaded.digest, "{state:?}");
    // It decides: a new shard gets its home from it.
    let home = tokio::time::timeout(Duration::from_secs(60), regions[0].home_of("tenant-new")).await.unwrap().unwrap();
    assert!(["a", "b"].contains(&home.as_str()), "{home}");
    let shard = admin.shard("cart", "tenant-new").await.unwrap();
    let detail = shard.detail.clone().unwrap_or_default();
    assert!(detail.starts_with(&format!("{}@", state.active.name)), "{shard:?}");
    // Every shard gets two attributes (an operator's writes, 10,000 a
    // request), then the same fixture reading every shard's attributes in
    // bulk swaps in: its dry run loads the view with all of them.
    let started = std::time::Instant::now();
    for chunk in (0..SHARDS).collect::<Vec<_>>().chunks(shardalloc::coordinator::MAX_ATTRIBUTE_WRITES) {
        let writes = chunk
            .iter()
            .map(|n| {
                let pairs = [("tenant", format!("t{}", n % 1_000)), ("tier", "gold".to_owned())];
                (format!("tenant-{n}"), shardalloc_proto::attributes::ShardAttributes::new(pairs).unwrap())
            })
            .collect();
        admin.write_attributes("cart", writes).await.unwrap();
    }
    eprintln!("{SHARDS} shards' attributes written in {:?}", started.elapsed());
    let config = serde_json::json!({"rebalance": "read-attributes", "needs_attributes": true});
    let request = ActivateRequest { strategy: uploaded.digest.clone(), config: Some(config), force: false };
    let started = std::time::Instant::now();
    admin.activate("cart", &request).await.unwrap_or_else(|e| panic!("activating at {SHARDS} attributed shards: {e}"));
    eprintln!("activated (its dry run reading every shard's attributes) in {:?}", started.elapsed());
    let state = admin.strategy("cart").await.unwrap();
    let active = state.active.config.clone().unwrap_or_default();
    assert_eq!(active["rebalance"], "read-attributes", "{state:?}");
    for region in regions {
        region.shutdown().await;
    }
}

/// The built-in zone strategy as a component, set to read a shard
/// attribute: an operator's attribute, or the one a region's application
/// gives with its first request, decides where a shard is homed and where
/// a rebalance takes it (the attribute crossing into the component for
/// `allocate` on request, and with the view for `rebalance`).
#[tokio::test(flavor = "multi_thread")]
async fn a_shard_attribute_steers_the_zone_strategy_on_the_node() {
    let node = Node::start(&fast_args(&[])).await;
    let admin = node.admin();
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let zoned = |zone: &'static str| {
        move |config: &mut shardalloc_client::region::RegionConfig| {
            config.labels.insert("zone".into(), zone.into());
        }
    };
    let eu = node.region("cart", "eu-1", &journal, &network, zoned("eu"));
    // The us region's application gives every shard region=eu: kept only
    // for shards that have no attributes yet.
    let us = node.region("cart", "us-1", &journal, &network, |config| {
        zoned("us")(config);
        config.shard_attributes = Some(Arc::new(|_shard: &str| {
            shardalloc_proto::attributes::ShardAttributes::new([("region", "eu")]).unwrap()
        }));
    });
    registered(&eu).await;
    registered(&us).await;
    let config = Some(serde_json::json!({"attribute": "region"}));
    let activated = admin
        .activate("cart", &ActivateRequest { strategy: "zone".into(), config, force: false })
        .await
        .expect("activate zone reading the region attribute");
    assert_eq!(activated.active.name, "zone");
    let us_shards: std::collections::BTreeMap<String, _> = (0..20)
        .map(|i| (format!("acct-{i}"), shardalloc_proto::attributes::ShardAttributes::new([("region", "us")]).unwrap()))
        .collect();
    admin.write_attributes("cart", us_shards).await.unwrap();
    for i in 0..20 {
        let shard = format!("acct-{i}");
        // Asked by the eu region, homed where the attribute says.
        assert_eq!(eu.home_of(&shard).await.unwrap(), "us-1", "{shard}");
    }
    // The attribute changes: the next rebalances bring the shard over.
    let eu_now = shardalloc_proto::attributes::ShardAttributes::new([("region", "eu")]).unwrap();
    admin.set_shard_attributes("cart", "acct-3", &eu_now).await.unwrap();
    wait_for("acct-3 to move to eu-1", Duration::from_secs(60), async || {
        admin.shard("cart", "acct-3").await.ok().and_then(|s| s.home).filter(|home| home == "eu-1")
    })
    .await;
    let others = admin.shard("cart", "acct-4").await.unwrap();
    assert_eq!(others.home.as_deref(), Some("us-1"), "{others:?}");
    // A region's first request brings the application's attributes
    // (protocol version 5): a new shard asked for by the us region is
    // homed in eu, as its attribute says; a shard an operator gave
    // attributes keeps them.
    assert_eq!(us.home_of("new-1").await.unwrap(), "eu-1");
    let new = admin.shard("cart", "new-1").await.unwrap();
    assert_eq!(new.attributes.get("region"), Some("eu"), "{new:?}");
    us.home_of("acct-5").await.unwrap();
    let kept = admin.shard("cart", "acct-5").await.unwrap();
    assert_eq!(kept.attributes.get("region"), Some("us"), "the operator's attributes stay: {kept:?}");
    for region in [eu, us] {
        region.shutdown().await;
    }
}
