//! The real node stopped and started again on the same data directory:
//! after SIGTERM and after SIGKILL its placements, homes and strategy are
//! there and regions reconnect; while it is down, regions fence themselves,
//! and shards are re-homed only after their region re-registers or is
//! removed, never running on two regions at once.

use crate::node;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use shardalloc_client::region::{InMemoryTransport, RegionHandle, Update};
use shardalloc_proto::api::{ActivateRequest, ShardState, StrategyState};

use node::{Entry, Journal, Msg, Net, Node, Proxy, fast_args, next_update, registered, wait_for};

/// The lease, unreachable and removal timings of [`node::FAST`].
const LEASE: Duration = Duration::from_millis(2000);
const REMOVAL: Duration = Duration::from_millis(1500 + 3000);

#[derive(Debug, Clone, Copy)]
enum Stop {
    Term,
    Kill,
}

async fn homes(node: &Node, shards: &[&str]) -> BTreeMap<String, ShardState> {
    let admin = node.admin();
    let mut homes = BTreeMap::new();
    for shard in shards {
        let mut state = admin.shard("cart", shard).await.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
        // The clock of a home is not what is compared.
        state.since_ms = None;
        homes.insert(shard.to_string(), state);
    }
    homes
}

fn names_and_causes(state: &StrategyState) -> Vec<(String, String)> {
    state.history.iter().map(|a| (a.name.clone(), a.cause.to_string())).collect()
}

async fn state_survives(stop: Stop) {
    let mut node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let region = node.region("cart", "r1", &journal, &network, |_| {});
    registered(&region).await;
    let admin = node.admin();
    let shards = ["s0", "s1", "s2", "s3", "s4", "placed"];
    admin.set_placement("cart", "placed", "r1").await.unwrap();
    admin.set_placement("cart", "elsewhere", "r9").await.unwrap();
    for shard in shards {
        let home = tokio::time::timeout(Duration::from_secs(30), region.home_of(shard)).await.unwrap().unwrap();
        assert_eq!(home, "r1");
    }
    let activated =
        admin.activate("cart", &ActivateRequest { strategy: "hash".into(), config: None, force: false }).await.unwrap();
    assert_eq!(activated.active.name, "hash");
    let hashed = tokio::time::timeout(Duration::from_secs(30), region.home_of("hashed")).await.unwrap().unwrap();
    assert_eq!(hashed, "r1");
    let mut shards = shards.to_vec();
    shards.push("hashed");

    let placements = admin.placements("cart").await.unwrap();
    let before_homes = homes(&node, &shards).await;
    assert_eq!(before_homes["placed"].reason.map(|r| r.as_str()), Some("placement"), "{:?}", before_homes["placed"]);
    assert!(before_homes["hashed"].detail.as_deref().is_some_and(|d| d.starts_with("hash@")), "{before_homes:?}");
    let strategy = admin.strategy("cart").await.unwrap();
    let type_state = admin.type_state("cart").await.unwrap();

    let mut updates = region.updates();
    match stop {
        Stop::Term => {
            let exit = node.terminate().await;
            assert!(exit.success(), "the node exited with {exit} after SIGTERM");
            assert!(node.log_tail().contains("shardalloc stopped"), "no clean stop:\n{}", node.log_tail());
        }
        Stop::Kill => node.kill(),
    }
    next_update(&mut updates, "the region to see the node go", Duration::from_secs(30), |u| {
        matches!(u, Update::Disconnected { .. }).then_some(())
    })
    .await;
    node.restart().await;
    next_update(&mut updates, "the region to register again", Duration::from_secs(30), |u| {
        matches!(u, Update::Registered { .. }).then_some(())
    })
    .await;
    assert!(region.is_registered());

    let admin = node.admin();
    assert_eq!(admin.placements("cart").await.unwrap(), placements, "placements after the restart");
    assert_eq!(homes(&node, &shards).await, before_homes, "homes after the restart");
    let after = admin.strategy("cart").await.unwrap();
    assert_eq!(after.active.name, "hash", "{after:?}");
    assert_eq!(after.active.digest, strategy.active.digest, "{after:?}");
    assert_eq!(after.history, strategy.history, "the activation history after the restart");
    assert_eq!(
        names_and_causes(&after),
        [("least-shard".to_owned(), "initial".to_owned()), ("hash".to_owned(), "operator".to_owned())]
    );
    let after_state = admin.type_state("cart").await.unwrap();
    let regions = |s: &shardalloc_proto::api::TypeState| {
        s.regions
            .iter()
            .map(|r| (r.address.clone(), r.incarnation, r.shard_count, r.registered_at_ms))
            .collect::<Vec<_>>()
    };
    assert!(type_state.regions.iter().all(|r| r.registered_at_ms.is_some()), "{:?}", type_state.regions);
    assert_eq!(
        regions(&after_state),
        regions(&type_state),
        "regions, their shard counts and registration times after the restart"
    );
    assert_eq!(after_state.shards, type_state.shards, "the shards, their homes and why, after the restart");
    wait_for("the region to be up again", Duration::from_secs(30), async || {
        let state = admin.type_state("cart").await.ok()?;
        state.regions.iter().any(|r| r.address == "r1" && r.status == "up").then_some(())
    })
    .await;
    // The restarted node serves: a new shard is allocated by the hash strategy.
    let home = tokio::time::timeout(Duration::from_secs(30), region.home_of("new")).await.unwrap().unwrap();
    assert_eq!(home, "r1");
    let state = admin.shard("cart", "new").await.unwrap();
    assert!(state.detail.as_deref().is_some_and(|d| d.starts_with("hash@")), "{state:?}");
    // Rollback reaches back into the persisted history, past the restart.
    let rolled = admin.rollback("cart").await.unwrap();
    assert_eq!(rolled.active.name, "least-shard", "{rolled:?}");
    assert_eq!(names_and_causes(&rolled).last().unwrap(), &("least-shard".to_owned(), "rollback".to_owned()));
    region.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn placements_homes_and_strategy_survive_sigterm() {
    state_survives(Stop::Term).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn placements_homes_and_strategy_survive_sigkill() {
    state_survives(Stop::Kill).await;
}

/// Sends a numbered message to every shard every 100 ms until `stop`.
fn pump(region: RegionHandle<Msg, String>, shards: Vec<String>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let from = region.address().to_owned();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            for shard in &shards {
                if let Err(error) = region.send(shard, Msg::new(&from, n)) {
                    panic!("{from} could not send to {shard}: {error}");
                }
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn regions_fence_while_the_node_is_down_and_shards_never_run_twice() {
    // B reaches the node through a proxy: its Host names the proxy's port.
    let mut node = Node::start(&fast_args(&["--allowed-host", "127.0.0.1"])).await;
    let journal = Journal::default();
    let network = Net::default();
    // B reaches the node through a proxy the test can cut.
    let proxy = Proxy::start(node.addr).await;
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |c| c.node = proxy.base());
    registered(&a).await;
    registered(&b).await;
    let shards: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    for shard in &shards {
        for region in [&a, &b] {
            tokio::time::timeout(Duration::from_secs(30), region.home_of(shard)).await.unwrap().unwrap();
        }
    }
    wait_for("every shard to run on its home", Duration::from_secs(30), async || {
        shards.iter().all(|s| journal.running(s).len() == 1).then_some(())
    })
    .await;
    let on_a = journal.running_on("a");
    let on_b = journal.running_on("b");
    assert!(!on_a.is_empty() && !on_b.is_empty(), "least-shard left a region empty: a {on_a:?}, b {on_b:?}");

    // The node dies: both regions fence within their lease and stop every shard.
    let killed = Instant::now();
    node.kill();
    for region in [&a, &b] {
        // Ten leases: how soon after its lease is this machine's business;
        // that it fences, and never runs a shard twice, is the test's.
        wait_for(&format!("{} to fence", region.address()), LEASE * 10, async || region.is_fenced().then_some(()))
            .await;
    }
    let fenced_after = killed.elapsed();
    let fenced = Instant::now();
    wait_for("the fenced regions' shards to stop", LEASE * 10, async || {
        (journal.running_on("a").is_empty() && journal.running_on("b").is_empty()).then_some(())
    })
    .await;
    for (region, shards) in [("a", &on_a), ("b", &on_b)] {
        for shard in shards.iter() {
            let stopped = Entry::Stopped { region: region.into(), shard: shard.clone() };
            assert!(journal.saw(&stopped), "{region}'s application never saw stop_shard({shard})");
        }
    }

    // B is cut off from the node and from A; the node comes back.
    proxy.cut();
    network.block("b");
    let mut a_updates = a.updates();
    let stop = Arc::new(AtomicBool::new(false));
    let pumping = pump(a.clone(), shards.clone(), stop.clone());
    let restarted = Instant::now();
    node.restart().await;
    next_update(&mut a_updates, "A to register again", Duration::from_secs(30), |u| {
        matches!(u, Update::Registered { .. }).then_some(())
    })
    .await;
    let a_registered = Instant::now();
    // Before B's removal, B's shards are still homed on B.
    let admin = node.admin();
    for shard in &on_b {
        let home = admin.shard("cart", shard).await.unwrap().home;
        let answered = restarted.elapsed();
        if answered < REMOVAL {
            assert_eq!(home.as_deref(), Some("b"), "{shard} was re-homed {answered:?} after the restart");
        }
    }
    wait_for("A's lease to be renewed", Duration::from_secs(30), async || (!a.is_fenced()).then_some(())).await;

    // A's shards come back on A; B's stay homed on B until B is removed,
    // then move to A.
    wait_for("A's shards to run on A again", Duration::from_secs(30), async || {
        on_a.iter().all(|s| journal.running(s) == ["a"]).then_some(())
    })
    .await;
    wait_for("B's shards to be re-homed on A and run there", Duration::from_secs(60), async || {
        let mut all_on_a = true;
        for shard in &on_b {
            let home = admin.shard("cart", shard).await.ok()?.home;
            all_on_a &= home.as_deref() == Some("a") && journal.running(shard) == ["a"];
        }
        all_on_a.then_some(())
    })
    .await;
    let rehomed_after = restarted.elapsed();

    // When things started, cluster-wide.
    for (at, entry) in journal.timed_entries() {
        let Entry::Started { region, shard } = entry else { continue };
        if at < fenced {
            continue;
        }
        assert!(at >= restarted, "{shard} started on fenced {region} while the node was down");
        if region == "a" && on_a.contains(&shard) {
            // `a_registered` is when this test saw the update, which a busy
            // machine may delay: 2 s of slack, still after the restart.
            assert!(at >= a_registered - Duration::from_secs(2), "{shard} restarted on A before A re-registered");
        }
        if on_b.contains(&shard) {
            assert_eq!(region, "a", "{shard} started on {region}, which is cut off");
            let since = at - restarted;
            assert!(since >= REMOVAL, "{shard} (B's) started on A {since:?} after the restart, before B's removal");
        }
    }

    // B comes back: it registers again, and shards it gets run nowhere else.
    let mut b_updates = b.updates();
    network.unblock("b");
    proxy.heal();
    next_update(&mut b_updates, "B to register again", Duration::from_secs(30), |u| {
        matches!(u, Update::Registered { .. }).then_some(())
    })
    .await;
    wait_for("B's lease to be renewed", Duration::from_secs(30), async || (!b.is_fenced()).then_some(())).await;
    wait_for("a rebalance to give B a shard", Duration::from_secs(60), async || {
        (!journal.running_on("b").is_empty()).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    pumping.await.expect("the pump panicked");
    assert!(journal.overlaps().is_empty(), "shards ran on two regions at once: {:?}", journal.overlaps());
    let (status, _) = node.request(reqwest::Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK);
    eprintln!("fenced {fenced_after:?} after the kill; B's shards re-homed {rehomed_after:?} after the restart");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_node_on_the_same_data_directory_refuses_to_start() {
    let node = Node::start(&["--type", "cart"]).await;
    node.admin().set_placement("cart", "1", "b").await.unwrap();
    let data = node.data().to_str().unwrap().to_owned();
    let (code, stdout, stderr) = node::run_binary(
        &["serve", "--listen", "127.0.0.1:0", "--data", &data, "--type", "cart"],
        Duration::from_secs(60),
    )
    .await;
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}; stdout {stdout}; stderr {stderr}");
    assert!(stderr.contains("in use"), "the refusal does not say why: {stderr}");
    // The first node is unharmed.
    let placements = node.admin().placements("cart").await.unwrap();
    assert_eq!(placements.placements.len(), 1, "{placements:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_store_is_refused_in_one_line_and_left_as_it_was() {
    let mut node = Node::start(&["--type", "cart"]).await;
    node.admin().set_placement("cart", "1", "b").await.unwrap();
    node.terminate().await;
    let data = node.data().to_str().unwrap().to_owned();
    let (code, stdout, stderr) = node::run_binary(&["store", "check", "--data", &data], Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "stdout {stdout}; stderr {stderr}");
    assert!(stdout.starts_with("sound:") && stdout.contains("1 placements"), "{stdout}");

    let file = node.data().join("shardalloc.redb");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let (code, stdout, stderr) = node::run_binary(
        &["serve", "--listen", "127.0.0.1:0", "--data", &data, "--type", "cart"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, Some(1), "stdout {stdout}; stderr {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("damaged") && lines[0].contains("truncated") && lines[0].contains("backup"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), &bytes[..bytes.len() / 2], "the damaged file was written to");

    let (code, stdout, stderr) = node::run_binary(&["store", "check", "--data", &data], Duration::from_secs(60)).await;
    assert_eq!(code, Some(1), "stdout {stdout}; stderr {stderr}");
    assert!(stderr.starts_with("error: damaged:") && stderr.contains("truncated"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_declared_type_is_declared_again_empty_at_the_next_start() {
    let mut node = Node::start(&["--type", "cart", "--type", "tenant"]).await;
    let admin = node.admin();
    admin.set_placement("cart", "1", "b").await.unwrap();
    admin.delete_type("cart", false).await.unwrap();
    let names = |types: shardalloc_proto::api::Types| types.types.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(names(admin.types().await.unwrap()), ["tenant"]);
    node.terminate().await;
    node.restart().await;
    let admin = node.admin();
    assert_eq!(names(admin.types().await.unwrap()), ["cart", "tenant"]);
    assert!(admin.placements("cart").await.unwrap().placements.is_empty(), "the deleted type's state came back");
}
