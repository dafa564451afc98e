//! Regions against the real node: an operator's placement reaches every
//! region and moves a running shard through a full hand-off, while messages
//! from both regions keep flowing, each sender's in order; a drain; a
//! region's own `drain_and_leave` (its shards handed off while traffic
//! flows, and its bound); a region that falls silent is removed and the
//! others hear of it (`RegionRemoved`) and find its shards' new homes; the
//! region simulator's stop on SIGTERM; an unhonoured placement logged once;
//! forwards a transport reports lost later, retried and then given up to
//! the application by name; asks over the built-in transport, answered
//! once by the home or failed by name; a region's declared capacity, kept
//! and shown to strategies.

use crate::node;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardalloc_client::region::{
    AskError, InMemoryTransport, Inbox, PeerConfig, PeerTransport, RegionError, RegionHandle, Replier, Transport,
    TransportError, Undelivered, Update,
};

use node::{Entry, Journal, Msg, Node, REFUSED_ASKER, fast_args, next_update, registered, wait_for};

/// Sends numbered messages to `shard` every few milliseconds until `stop`;
/// answers how many it sent.
fn pump(region: RegionHandle<Msg, String>, shard: &'static str, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let from = region.address().to_owned();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Err(error) = region.send(shard, Msg::new(&from, n)) {
                panic!("{from} could not send message {n} to {shard}: {error}");
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(4)).await;
        }
        n
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_moves_a_running_shard_by_hand_off_keeping_each_senders_order() {
    let node = Node::start(&fast_args(&[])).await;
    let rebalance_interval = Duration::from_millis(500);
    let journal = Journal::default();
    // A slow stop keeps the hand-off open while both regions send.
    let stop_delay = Duration::from_millis(300);
    journal.set_stop_delay(stop_delay);
    let network = InMemoryTransport::new();
    let r1 = node.region("cart", "r1", &journal, &network, |_| {});
    let r2 = node.region("cart", "r2", &journal, &network, |_| {});
    registered(&r1).await;
    registered(&r2).await;

    // Home the shard wherever the strategy likes: that region is A.
    let home = tokio::time::timeout(Duration::from_secs(30), r1.home_of("s")).await.unwrap().unwrap();
    let (a, b) = if home == "r1" { (r1, r2) } else { (r2, r1) };
    assert_eq!(a.address(), home);
    let (a_name, b_name) = (a.address().to_owned(), b.address().to_owned());
    tokio::time::timeout(Duration::from_secs(30), a.home_of("s")).await.unwrap().unwrap();
    wait_for("the shard to run on A", Duration::from_secs(30), async || {
        (journal.running("s") == [a_name.clone()]).then_some(())
    })
    .await;

    let mut a_updates = a.updates();
    let mut b_updates = b.updates();
    let stop = Arc::new(AtomicBool::new(false));
    let pumps = [pump(a.clone(), "s", stop.clone()), pump(b.clone(), "s", stop.clone())];
    wait_for("messages from both regions to arrive on A", Duration::from_secs(30), async || {
        let deliveries = journal.deliveries("s");
        let from_both = ["r1", "r2"].iter().all(|r| deliveries.iter().any(|(_, m)| m.from == *r));
        from_both.then_some(())
    })
    .await;

    let placed = Instant::now();
    node.admin().set_placement("cart", "s", &b_name).await.unwrap();
    // Every region hears of the placement (well within one rebalance interval;
    // allowed 10 of them on a busy machine).
    for (name, updates) in [(&a_name, &mut a_updates), (&b_name, &mut b_updates)] {
        let target =
            next_update(updates, &format!("PlacementChanged on {name}"), rebalance_interval * 10, |u| match u {
                Update::PlacementChanged { shard, target } if shard == "s" => Some(target.clone()),
                _ => None,
            })
            .await;
        assert_eq!(target.as_deref(), Some(b_name.as_str()), "the placement {name} heard of");
    }
    let heard = placed.elapsed();

    // The shard moves: A stops it, then B starts it.
    wait_for("the shard to run on B", Duration::from_secs(30), async || {
        (journal.running("s") == [b_name.clone()]).then_some(())
    })
    .await;
    let moved = placed.elapsed();
    // Keep sending a while after the move, then stop and let everything arrive.
    let delivered_on_b = journal.deliveries("s").iter().filter(|(r, _)| *r == b_name).count();
    wait_for("more messages on B after the move", Duration::from_secs(30), async || {
        let now = journal.deliveries("s").iter().filter(|(r, _)| *r == b_name).count();
        (now >= delivered_on_b + 40).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = BTreeMap::new();
    for (pump, name) in pumps.into_iter().zip([&a_name, &b_name]) {
        sent.insert(name.clone(), pump.await.expect("a sender panicked"));
    }
    let total: u64 = sent.values().sum();
    wait_for("every message to be delivered", Duration::from_secs(30), async || {
        (journal.deliveries("s").len() as u64 >= total).then_some(())
    })
    .await;

    // A full hand-off: A saw its stop before B saw its start, and the
    // shard never ran on both.
    let entries = journal.entries();
    let position = |entry: &Entry| entries.iter().position(|e| e == entry);
    let a_stop = position(&Entry::Stopped { region: a_name.clone(), shard: "s".into() })
        .unwrap_or_else(|| panic!("A's application never saw stop_shard: {entries:?}"));
    let b_start = position(&Entry::Started { region: b_name.clone(), shard: "s".into() })
        .unwrap_or_else(|| panic!("B's application never saw start_shard: {entries:?}"));
    assert!(a_stop < b_start, "B started the shard before A stopped it: {entries:?}");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());

    // Every message arrived exactly once, each sender's in order, A's
    // deliveries all before B's.
    let deliveries = journal.deliveries("s");
    assert_eq!(deliveries.len() as u64, total, "sent {sent:?}, delivered {}", deliveries.len());
    for (name, count) in &sent {
        let numbers: Vec<u64> = deliveries.iter().filter(|(_, m)| m.from == *name).map(|(_, m)| m.n).collect();
        let expected: Vec<u64> = (0..*count).collect();
        if numbers != expected {
            let first_bad = numbers.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "{name}'s messages were not delivered exactly once in order: \
                 {} of {count}, first difference at {first_bad:?}",
                numbers.len()
            );
        }
    }
    // Both regions sent while the shard moved (from the start of A's stop
    // until B started it); those messages arrived on B.
    let timed = journal.timed_entries();
    let at = |entry: &Entry| timed.iter().find(|(_, e)| e == entry).map(|(t, _)| *t).unwrap();
    let moving_from = at(&Entry::Stopped { region: a_name.clone(), shard: "s".into() }) - stop_delay;
    let moving_until = at(&Entry::Started { region: b_name.clone(), shard: "s".into() });
    for name in [&a_name, &b_name] {
        let during = deliveries
            .iter()
            .filter(|(r, m)| *r == b_name && m.from == *name && m.at >= moving_from && m.at <= moving_until)
            .count();
        // How many fit in the hand-off depends on this machine's speed;
        // that both senders' messages crossed it in order is the point.
        assert!(during >= 1, "none of {name}'s messages were sent during the hand-off");
    }
    let last_on_a = deliveries.iter().rposition(|(r, _)| *r == a_name).expect("deliveries on A");
    let first_on_b = deliveries.iter().position(|(r, _)| *r == b_name).expect("deliveries on B");
    assert!(last_on_a < first_on_b, "A delivered after B started delivering");
    // Each sender's messages reached both sides.
    for name in [&a_name, &b_name] {
        let on_a = deliveries.iter().filter(|(r, m)| *r == a_name && m.from == *name).count();
        let on_b = deliveries.iter().filter(|(r, m)| *r == b_name && m.from == *name).count();
        assert!(on_a > 0 && on_b > 0, "{name}'s messages: {on_a} on A, {on_b} on B");
    }

    let state = node.admin().shard("cart", "s").await.unwrap();
    assert_eq!(state.home.as_deref(), Some(b_name.as_str()), "{state:?}");
    assert_eq!(state.reason.map(|r| r.as_str()), Some("placement"), "{state:?}");
    assert_eq!(state.placement.as_deref(), Some(b_name.as_str()), "{state:?}");
    assert!(!state.moving, "{state:?}");
    assert_eq!(a.home_of("s").await.unwrap(), b_name);
    assert_eq!(b.home_of("s").await.unwrap(), b_name);
    // Removing the placement reaches every region too; the shard stays put.
    let mut a_updates = a.updates();
    let mut b_updates = b.updates();
    assert!(node.admin().remove_placement("cart", "s").await.unwrap());
    for (name, updates) in [(&a_name, &mut a_updates), (&b_name, &mut b_updates)] {
        let target = next_update(updates, &format!("the removal on {name}"), rebalance_interval * 10, |u| match u {
            Update::PlacementChanged { shard, target } if shard == "s" => Some(target.clone()),
            _ => None,
        })
        .await;
        assert_eq!(target, None, "the removal {name} heard of");
    }
    let state = node.admin().shard("cart", "s").await.unwrap();
    assert_eq!((state.home.as_deref(), state.placement.as_deref()), (Some(b_name.as_str()), None), "{state:?}");
    eprintln!("placement heard after {heard:?}, shard moved after {moved:?}, {total} messages");
    a.shutdown().await;
    b.shutdown().await;
}

/// A node with the fast timings and regions `a` and `b` on one in-memory
/// network, both registered.
async fn two_regions() -> (Node, Journal, RegionHandle<Msg, String>, RegionHandle<Msg, String>) {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    (node, journal, a, b)
}

/// A region declares its capacity when it registers (protocol version 5):
/// the node keeps it, shows it in the type's state and hands it to
/// strategies (the snapshot is what they see: every quantity, and the
/// `load` one as the region's capacity). A region that declares none has
/// none.
#[tokio::test(flavor = "multi_thread")]
async fn a_region_declares_its_capacity_and_strategies_see_it() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let declared = shardalloc_proto::capacity::RegionCapacity::new([("load", 800.0), ("memory-mb", 4096.0)]).unwrap();
    let a = node.region("cart", "a", &journal, &network, |config| config.capacity = declared.clone());
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    let admin = node.admin();
    let state = admin.type_state("cart").await.unwrap();
    let capacity_of = |address: &str| state.regions.iter().find(|r| r.address == address).map(|r| r.capacity.clone());
    assert_eq!(capacity_of("a"), Some(declared.clone()), "{state:?}");
    assert_eq!(capacity_of("b"), Some(Default::default()), "{state:?}");
    let snapshot = admin.snapshot("cart").await.unwrap();
    let region = |address: &str| {
        snapshot["regions"].as_array().unwrap().iter().find(|r| r["address"] == address).cloned().unwrap()
    };
    assert_eq!(region("a")["capacity"], 800.0, "{snapshot}");
    assert_eq!(region("a")["quantities"], serde_json::json!({"load": 800.0, "memory-mb": 4096.0}), "{snapshot}");
    assert!(region("b").get("quantities").is_none() && region("b").get("capacity").is_none(), "{snapshot}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn draining_a_region_moves_its_shards_away() {
    let (node, journal, a, b) = two_regions().await;
    let shards: Vec<String> = (0..8).map(|i| format!("d{i}")).collect();
    for shard in &shards {
        for region in [&a, &b] {
            tokio::time::timeout(Duration::from_secs(30), region.home_of(shard)).await.unwrap().unwrap();
        }
    }
    let on_a = journal.running_on("a");
    assert!(!on_a.is_empty(), "a holds no shard to drain");
    let admin = node.admin();
    admin.drain("a").await.unwrap();
    let regions = admin.regions().await.unwrap();
    let summary = regions.regions.iter().find(|r| r.address == "a").unwrap_or_else(|| panic!("{regions:?}"));
    assert!(summary.draining, "{summary:?}");
    wait_for("the drained region to hold no shard", Duration::from_secs(30), async || {
        let state = admin.type_state("cart").await.ok()?;
        let a_state = state.regions.iter().find(|r| r.address == "a")?;
        (a_state.shard_count == 0 && state.hand_offs.is_empty()).then_some(())
    })
    .await;
    // Its shards stopped on A; asked for again, they live on B.
    for shard in &on_a {
        assert_eq!(tokio::time::timeout(Duration::from_secs(30), a.home_of(shard)).await.unwrap().unwrap(), "b");
        assert!(
            journal.saw(&Entry::Stopped { region: "a".into(), shard: shard.clone() }),
            "{shard} never stopped on a"
        );
    }
    assert!(journal.running_on("a").is_empty());
    // A new shard is not given to the drained region.
    assert_eq!(tokio::time::timeout(Duration::from_secs(30), a.home_of("fresh")).await.unwrap().unwrap(), "b");
    admin.undrain("a").await.unwrap();
    let regions = admin.regions().await.unwrap();
    assert!(regions.regions.iter().any(|r| r.address == "a" && !r.draining), "{regions:?}");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_region_is_removed_and_the_others_drop_their_homes_on_it() {
    let (node, journal, a, b) = two_regions().await;
    let on_b = wait_for("b to hold a shard", Duration::from_secs(30), async || {
        for i in 0..16 {
            let shard = format!("r{i}");
            b.home_of(&shard).await.ok()?;
            a.home_of(&shard).await.ok()?;
        }
        let on_b = journal.running_on("b");
        (!on_b.is_empty()).then_some(on_b)
    })
    .await;
    let mut updates = a.updates();
    // b goes without a word to the node (as a crashed process would):
    // removed 4.5 s after its last heartbeat.
    b.shutdown().await;
    next_update(&mut updates, "b's removal", Duration::from_secs(60), |u| {
        (*u == Update::RegionRemoved { address: "b".into() }).then_some(())
    })
    .await;
    // Every home a had cached on b was dropped: asked again, it is a.
    for shard in &on_b {
        assert_eq!(tokio::time::timeout(Duration::from_secs(30), a.home_of(shard)).await.unwrap().unwrap(), "a");
    }
    // The node said so in its log, once each, in words.
    let log = node.log_tail();
    let lines = |words: &str| log.lines().filter(|l| l.contains(words) && l.contains("region=b")).count();
    assert_eq!(lines("region unreachable"), 1, "{log}");
    assert_eq!(lines("region removed"), 1, "{log}");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unhonoured_placement_is_logged_once() {
    let (node, _journal, a, b) = two_regions().await;
    let admin = node.admin();
    admin.drain("b").await.unwrap();
    admin.set_placement("cart", "pinned", "b").await.unwrap();
    // b is draining: the placement is not honoured, the strategy homes it on a.
    assert_eq!(tokio::time::timeout(Duration::from_secs(30), a.home_of("pinned")).await.unwrap().unwrap(), "a");
    let lines = wait_for("the warning in the node's log", Duration::from_secs(30), async || {
        let log = node.log_tail();
        let lines: Vec<String> = log.lines().filter(|l| l.contains("not honoured")).map(str::to_owned).collect();
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    // Give a second warning time to arrive, were there one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = node.log_tail().lines().filter(|l| l.contains("not honoured")).count();
    assert_eq!(again, 1, "logged {again} times: {lines:?}");
    assert!(lines[0].contains("cart") && lines[0].contains("pinned"), "{lines:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A network where every message to `lost` is taken, then reported lost a
/// moment later through the sender's inbox, one report per message and in
/// the order sent (as a connection's reset would be found); the rest goes
/// through `InMemoryTransport`.
#[derive(Clone)]
struct Lossy {
    network: InMemoryTransport<Msg, String>,
    lost: &'static str,
    senders: Arc<std::sync::Mutex<Vec<Inbox<Msg, String>>>>,
    reports: tokio::sync::mpsc::UnboundedSender<(Inbox<Msg, String>, String, String, Msg)>,
}

impl Lossy {
    fn new(lost: &'static str) -> Self {
        let (reports, mut pending) =
            tokio::sync::mpsc::unbounded_channel::<(Inbox<Msg, String>, String, String, Msg)>();
        tokio::spawn(async move {
            while let Some((inbox, to, shard, message)) = pending.recv().await {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let error = TransportError::Unreachable { address: to.clone(), reason: "connection reset".into() };
                inbox.not_delivered(&to, &shard, vec![message], &error);
            }
        });
        Lossy { network: InMemoryTransport::new(), lost, senders: Default::default(), reports }
    }
}

impl Transport<Msg, String> for Lossy {
    fn send(&self, to: &str, shard: &str, message: Msg) -> Result<(), Undelivered<Msg>> {
        if to != self.lost {
            return self.network.send(to, shard, message);
        }
        let senders = self.senders.lock().unwrap().clone();
        if let Some(inbox) = senders.into_iter().find(|inbox| inbox.address() == message.from) {
            let _ = self.reports.send((inbox, to.to_owned(), shard.to_owned(), message));
        }
        Ok(())
    }

    fn attach(&self, inbox: Inbox<Msg, String>) {
        self.senders.lock().unwrap().push(inbox.clone());
        self.network.attach(inbox);
    }

    fn detach(&self, inbox: &Inbox<Msg, String>) {
        self.network.detach(inbox);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn forwards_reported_lost_are_retried_then_given_up_to_the_application_by_name() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = Lossy::new("b");
    let a = node.region("cart", "a", &journal, &network, |c| {
        c.forward_attempts = 3;
        c.home_retry = Duration::from_millis(100);
    });
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    // A shard homed on b (which lives, but whose messages are all lost).
    let shard = shard_homed_on(&b, "l").await;
    a.home_of(&shard).await.unwrap();
    for n in 0..5 {
        a.send(&shard, Msg::new("a", n)).unwrap();
    }
    // Each failure is retried after the home is asked again; the third in
    // a row gives every waiting message up, in order, by name.
    let given_up = wait_for("the five messages given up", Duration::from_secs(30), async || {
        let entries = journal.entries();
        let given_up: Vec<(u64, String)> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Undelivered { region, shard: s, msg, error } if region == "a" && *s == shard => {
                    Some((msg.n, error.clone()))
                }
                _ => None,
            })
            .collect();
        (given_up.len() >= 5).then_some(given_up)
    })
    .await;
    assert_eq!(given_up.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 1, 2, 3, 4], "{given_up:?}");
    for (_, error) in &given_up {
        assert!(error.contains("3 forwards in a row failed") && error.contains("connection reset"), "{error}");
    }
    assert!(journal.deliveries(&shard).is_empty(), "nothing reached b");
    // None is handed over twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count = journal.entries().iter().filter(|e| matches!(e, Entry::Undelivered { .. })).count();
    assert_eq!(count, 5);
    a.shutdown().await;
    b.shutdown().await;
}

/// A region on the built-in transport, listening on a free port of
/// 127.0.0.1 that is also its registered address.
async fn peer_region(
    node: &Node,
    journal: &Journal,
    token: &str,
) -> (RegionHandle<Msg, String>, PeerTransport<Msg, String>) {
    let config = |address: String| PeerConfig {
        entity_type: "cart".into(),
        address,
        incarnation: 1,
        token: Some(token.to_owned()),
    };
    let port = node::free_port();
    let address = format!("127.0.0.1:{port}");
    let transport = PeerTransport::bind(config(address.clone()), &address).await.unwrap();
    // Rounds of failed forwards must outlast the node's removal (4.5 s
    // here) on a busy machine: 100 rounds at the harness's 300 ms home
    // retry (30 s, the default forward deadline), not just the 15 it needs.
    let region = node.region("cart", &address, journal, &transport, |c| c.forward_attempts = 100);
    registered(&region).await;
    (region, transport)
}

/// A shard the node homes on `on`, asked by `on` itself.
async fn shard_homed_on(on: &RegionHandle<Msg, String>, prefix: &str) -> String {
    let address = on.address().to_owned();
    wait_for("a shard homed there", Duration::from_secs(30), async || {
        for i in 0..32 {
            let shard = format!("{prefix}{i}");
            if on.home_of(&shard).await.ok()? == address {
                return Some(shard);
            }
        }
        None
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_built_in_transport_carries_every_message_to_the_home_across_a_region_gone_without_leaving() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let (a, _a_transport) = peer_region(&node, &journal, "secret").await;
    let (b, b_transport) = peer_region(&node, &journal, "secret").await;
    let (a_address, b_address) = (a.address().to_owned(), b.address().to_owned());
    // A shard homed on b, which a's messages reach over the wire.
    let shard = shard_homed_on(&b, "p").await;
    for n in 0..100 {
        a.send(&shard, Msg::new(&a_address, n)).unwrap();
    }
    wait_for("100 messages delivered on b", Duration::from_secs(30), async || {
        (journal.deliveries(&shard).len() == 100).then_some(())
    })
    .await;
    // b goes without leaving (its listener and connections close): a keeps
    // sending; what b did not take comes back and waits for the new home.
    b.shutdown().await;
    drop(b_transport);
    for n in 100..200 {
        a.send(&shard, Msg::new(&a_address, n)).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for("every message delivered", Duration::from_secs(60), async || {
        let given_up = journal.entries().into_iter().find(|e| matches!(e, Entry::Undelivered { .. }));
        assert!(given_up.is_none(), "a message was given up: {given_up:?}");
        let numbers: std::collections::BTreeSet<u64> = journal.deliveries(&shard).iter().map(|(_, m)| m.n).collect();
        (numbers.len() == 200).then_some(())
    })
    .await;
    // Each once, and in order on each home.
    let deliveries = journal.deliveries(&shard);
    assert_eq!(deliveries.len(), 200, "none twice");
    for home in [&a_address, &b_address] {
        let numbers: Vec<u64> = deliveries.iter().filter(|(r, _)| r == home).map(|(_, m)| m.n).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "out of order on {home}: {numbers:?}");
    }
    assert!(deliveries.iter().any(|(r, _)| *r == a_address), "the shard moved to a");
    assert!(journal.entries().iter().all(|e| !matches!(e, Entry::Undelivered { .. })), "none given up");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn asks_over_the_built_in_transport_are_answered_once_by_the_home_or_fail_by_name() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let (a, a_transport) = peer_region(&node, &journal, "secret").await;
    let (b, b_transport) = peer_region(&node, &journal, "secret").await;
    let (a_address, b_address) = (a.address().to_owned(), b.address().to_owned());
    let remote = shard_homed_on(&b, "q").await;
    let local = shard_homed_on(&a, "q").await;
    let wait = Duration::from_secs(30);
    // Answered by the home, over the wire or in process, in order with the
    // sends to the same shard.
    for n in 0..40 {
        if n % 2 == 0 {
            a.send(&remote, Msg::new("a", n)).unwrap();
        } else {
            assert_eq!(a.ask(&remote, Msg::new("a", n), wait).await, Ok(b_address.clone()));
        }
    }
    assert_eq!(a.ask(&local, Msg::new("a", 0), wait).await, Ok(a_address.clone()));
    let numbers: Vec<u64> = journal.deliveries(&remote).iter().map(|(_, m)| m.n).collect();
    assert_eq!(numbers, (0..40).collect::<Vec<_>>(), "each once, in order");
    // An ask is routed when it is called, not when its future is polled:
    // two asks awaited in the other order still arrive in call order.
    let first = a.ask(&remote, Msg::new("a", 40), wait);
    let second = a.ask(&remote, Msg::new("a", 41), wait);
    assert_eq!(second.await, Ok(b_address.clone()));
    assert_eq!(first.await, Ok(b_address.clone()));
    let numbers: Vec<u64> = journal.deliveries(&remote).iter().map(|(_, m)| m.n).collect();
    assert_eq!(numbers, (0..42).collect::<Vec<_>>(), "in call order");
    // Many at once, each answered once.
    let asks = (100..300).map(|n| {
        let a = a.clone();
        let remote = remote.clone();
        async move { a.ask(&remote, Msg::new("a", n), wait).await }
    });
    let answers = futures_util::future::join_all(asks).await;
    assert!(answers.iter().all(|answer| *answer == Ok(b_address.clone())), "{answers:?}");
    assert_eq!(journal.deliveries(&remote).len(), 242);
    // A request that reaches a region which is not the home is routed on
    // over the wire, and the answer relayed back: a asks b (its transport,
    // directly) for a shard homed on a itself.
    let (relayed, answer) = tokio::sync::oneshot::channel();
    let replier = Replier::new(&local, wait, move |outcome| {
        let _ = relayed.send(outcome);
    });
    assert!(a_transport.ask(&b_address, &local, Msg::new("a", 500), replier).is_ok());
    let relayed = tokio::time::timeout(wait, answer).await.expect("an answer in time").expect("answered");
    assert_eq!(relayed, Ok(a_address.clone()), "answered by the home, through b");
    // The home failing a request fails the ask with its words.
    let refused = a.ask(&remote, Msg::new(REFUSED_ASKER, 0), wait).await;
    assert_eq!(
        refused,
        Err(AskError::Failed { shard: remote.clone(), reason: format!("{b_address} does not answer {REFUSED_ASKER}") })
    );
    // The home gone without leaving: an ask that cannot wait for the new
    // home times out by name; one that can is answered by the new home.
    b.shutdown().await;
    drop(b_transport);
    let hurried = a.ask(&remote, Msg::new("a", 1000), Duration::from_millis(300)).await;
    assert_eq!(hurried, Err(AskError::Timeout { shard: remote.clone(), timeout: Duration::from_millis(300) }));
    let patient = a.ask(&remote, Msg::new("a", 1001), Duration::from_secs(60)).await;
    assert_eq!(patient, Ok(a_address.clone()), "answered by the new home");
    assert!(journal.entries().iter().all(|e| !matches!(e, Entry::Undelivered { .. })), "none given up");
    let after = a.clone();
    a.shutdown().await;
    // A stopped region takes no more requests.
    let stopped = after.ask(&remote, Msg::new("a", 1002), wait).await;
    assert!(matches!(stopped, Err(AskError::Send(_))), "{stopped:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_built_in_transport_refuses_a_wrong_token_and_the_message_is_given_up_by_name() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let (a, _a_transport) = peer_region(&node, &journal, "one").await;
    let (b, _b_transport) = peer_region(&node, &journal, "other").await;
    let shard = shard_homed_on(&b, "w").await;
    a.send(&shard, Msg::new("a", 0)).unwrap();
    // Refused at the upgrade, the message is retried and, past the
    // attempts, given up by name; it never reaches b.
    let error = wait_for("the message given up", Duration::from_secs(60), async || {
        journal.entries().iter().find_map(|e| match e {
            Entry::Undelivered { error, .. } => Some(error.clone()),
            _ => None,
        })
    })
    .await;
    assert!(error.contains("401"), "{error}");
    assert!(journal.deliveries(&shard).is_empty());
    a.shutdown().await;
    b.shutdown().await;
}

/// Homes shards `d0` … `d7` by asking both regions; answers those that run on `a`.
async fn home_shards(journal: &Journal, a: &RegionHandle<Msg, String>, b: &RegionHandle<Msg, String>) -> Vec<String> {
    for i in 0..8 {
        let shard = format!("d{i}");
        for region in [a, b] {
            tokio::time::timeout(Duration::from_secs(30), region.home_of(&shard)).await.unwrap().unwrap();
        }
    }
    // The application's starts are recorded by the shard workers: wait
    // until they match what the region runs.
    wait_for("a's shards to run on a", Duration::from_secs(30), async || {
        let on_a = journal.running_on(a.address());
        (!on_a.is_empty() && on_a == a.running_shards()).then_some(on_a)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_and_leave_hands_every_shard_off_while_traffic_flows_then_leaves() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |c| c.drain_and_leave_timeout = Duration::from_secs(30));
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    let on_a = home_shards(&journal, &a, &b).await;
    let busy: &'static str = Box::leak(on_a[0].clone().into_boxed_str());
    let stop = Arc::new(AtomicBool::new(false));
    let sender = pump(b.clone(), busy, stop.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let began = Instant::now();
    tokio::time::timeout(Duration::from_secs(60), a.clone().drain_and_leave())
        .await
        .expect("drain_and_leave returns")
        .expect("a drains and leaves within its bound");
    let took = began.elapsed();
    // Traffic goes on a moment after the move, so some of it reaches b (a
    // drain quicker than the pump's pace would otherwise leave b none).
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = sender.await.unwrap();
    eprintln!("drain_and_leave of {} shards took {took:?}", on_a.len());

    // Every shard that ran on a stopped there and now runs on b.
    for shard in &on_a {
        assert!(
            journal.saw(&Entry::Stopped { region: "a".into(), shard: shard.clone() }),
            "{shard} never stopped on a"
        );
        assert_eq!(tokio::time::timeout(Duration::from_secs(30), b.home_of(shard)).await.unwrap().unwrap(), "b");
    }
    assert!(journal.running_on("a").is_empty(), "{:?}", journal.running_on("a"));
    // The node let a go: it is no longer a region of the cluster.
    let admin = node.admin();
    let regions = admin.regions().await.unwrap();
    assert!(!regions.regions.iter().any(|r| r.address == "a"), "a is still registered: {regions:?}");
    // Nothing b sent to the busy shard was lost, and it arrived in order.
    let delivered = wait_for("every message to the busy shard delivered", Duration::from_secs(30), async || {
        let delivered = journal.deliveries(busy);
        (delivered.len() as u64 == sent).then_some(delivered)
    })
    .await;
    let numbers: Vec<u64> = delivered.iter().map(|(_, m)| m.n).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "out of order: {numbers:?}");
    assert!(delivered.iter().any(|(r, _)| r == "a") && delivered.last().unwrap().0 == "b", "not moved: {delivered:?}");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    // The handle's region is gone.
    assert_eq!(a.home_of("late").await, Err(RegionError::Left));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_and_leave_past_its_bound_stops_its_shards_and_names_them() {
    let node = Node::start(&fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let bound = Duration::from_secs(1);
    let a = node.region("cart", "a", &journal, &network, |c| {
        c.drain_and_leave_timeout = bound;
        c.stop_deadline = Duration::from_secs(10);
    });
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    let on_a = home_shards(&journal, &a, &b).await;
    // Stopping a shard now takes 3 s: no hand-off finishes within the bound.
    let stop_delay = Duration::from_secs(3);
    journal.set_stop_delay(stop_delay);

    let began = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(60), a.drain_and_leave()).await.expect("it returns");
    let took = began.elapsed();
    eprintln!("drain_and_leave gave up after {took:?}: {outcome:?}");
    let Err(RegionError::DrainAndLeaveTimedOut { bound: reported, shards, leave_asked }) = &outcome else {
        panic!("expected DrainAndLeaveTimedOut, got {outcome:?}");
    };
    assert_eq!(*reported, bound);
    assert_eq!(shards, &on_a, "the error names every shard that still ran");
    assert!(*leave_asked, "the leave was asked at half the bound");
    let text = outcome.unwrap_err().to_string();
    assert!(text.contains(&on_a[0]) && text.contains("the node had not confirmed its leave"), "{text}");
    // Not before the bound; then within the bound and one stop.
    assert!(took >= bound, "{took:?}");
    assert!(took <= bound + stop_delay + Duration::from_secs(30), "{took:?}");
    // Its shards stopped; a restart at this address is not left draining.
    assert!(journal.running_on("a").is_empty(), "{:?}", journal.running_on("a"));
    let admin = node.admin();
    let regions = admin.regions().await.unwrap();
    assert!(!regions.regions.iter().any(|r| r.address == "a" && r.draining), "a stayed draining: {regions:?}");
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    b.shutdown().await;
}

/// Starts `shardalloc regions` against `node` (with `extra` flags) and
/// waits for `ready 2`; answers the child and the rest of its output (read
/// on a thread).
async fn simulator(node: &Node, extra: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = node::command()
        .args(["regions", "--node", &node.url(""), "--type", "cart", "--count", "2", "--interval-ms", "50"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, output) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    for reader in [Box::new(stdout) as Box<dyn BufRead + Send>, Box::new(stderr)] {
        let lines = lines.clone();
        std::thread::spawn(move || reader.lines().map_while(Result::ok).for_each(|l| drop(lines.send(l))));
    }
    let ready = wait_for("the simulator's regions registered", Duration::from_secs(60), async || {
        output.try_iter().find(|line| line.starts_with("ready"))
    })
    .await;
    assert_eq!(ready, "ready 2");
    (child, output)
}

/// SIGTERM, then the exit status within `bound` (`None` if it still ran).
async fn terminate_within(child: &mut std::process::Child, bound: Duration) -> Option<std::process::ExitStatus> {
    let status = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn the_region_simulator_leaves_on_sigterm_and_exits_promptly_when_its_node_is_gone() {
    // 10× the promised two seconds; the old behaviour took 60.
    let bound = Duration::from_secs(20);
    let mut node = Node::start(&fast_args(&[])).await;

    // Each region declares the common capacity and its own from the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("regions.toml");
    std::fs::write(&file, "[[region]]\ncapacity = { memory-mb = 4096 }\n").unwrap();
    let extra = ["--capacity", "load=100", "--regions-file", file.to_str().unwrap()];
    let (mut child, output) = simulator(&node, &extra).await;
    let state = node.admin().type_state("cart").await.unwrap();
    // By address: the regions are listed in join order, whichever registered first.
    let declared: std::collections::BTreeMap<&str, Vec<(&str, f64)>> =
        state.regions.iter().map(|r| (r.address.as_str(), r.capacity.iter().collect())).collect();
    let want = [("sim-1", vec![("load", 100.0), ("memory-mb", 4096.0)]), ("sim-2", vec![("load", 100.0)])];
    assert_eq!(declared, want.into_iter().collect(), "{state:?}");
    let status = terminate_within(&mut child, bound).await.expect("the simulator exits after SIGTERM");
    let said: Vec<String> = output.try_iter().collect();
    assert!(status.success(), "{status}: {said:?}");
    assert!(said.iter().any(|l| l == "left") && !said.iter().any(|l| l.contains("did not leave")), "{said:?}");

    let (mut child, output) = simulator(&node, &[]).await;
    node.kill();
    let since = Instant::now();
    let status = terminate_within(&mut child, bound).await.expect("the simulator exits after SIGTERM without its node");
    let said: Vec<String> = output.try_iter().collect();
    assert!(status.success(), "{status}: {said:?}");
    assert!(said.iter().any(|l| l.contains("2 of 2 regions did not leave cleanly")), "{said:?}");
    eprintln!("exited {:?} after SIGTERM with its node gone", since.elapsed());
}
