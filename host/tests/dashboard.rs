//! The dashboard in a real browser against the real node with three
//! simulated regions and thirty shards (and one of 100 regions and 10,000
//! shards): the map, the shard story, every action, the strategy panel and
//! the login. Every state is saved as a screenshot (see `browser`).

use crate::browser;
use crate::node;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::Locator;

use browser::*;
use node::{Node, fast_args, wait_for};

/// How long a pin may take to show on the map: the bound.
const PIN_SHOWS_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn the_map_shows_every_region_and_shard_and_a_pin_moves_a_shard_within_ten_seconds() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;
    for address in REGIONS {
        let card = format!("#map article.region[data-address='{address}'] h3.address");
        assert_eq!(text(&browser, &card).await, address, "the address is DOM text");
    }
    assert!(text(&browser, "#summary").await.starts_with("3 regions · 30 shards"));
    // The first region declared a capacity when it registered; the others none.
    let meta = |address: &str| format!("#map article.region[data-address='{address}'] p.meta");
    let declared = text(&browser, &meta(REGIONS[0])).await;
    assert!(declared.ends_with("· capacity load=500 memory-mb=2048"), "{declared}");
    assert!(!text(&browser, &meta(REGIONS[1])).await.contains("capacity"));
    screenshot(&browser, "map").await;

    let home = cluster.home_of("7").await.expect("shard 7 has a home");
    let target = REGIONS.iter().find(|r| **r != home).unwrap().to_string();
    let tenant = shardalloc_proto::attributes::ShardAttributes::new([("tenant", "acme"), ("tier", "gold")]).unwrap();
    cluster.node.admin().set_shard_attributes("cart", "7", &tenant).await.expect("write shard 7's attributes");
    click(&browser, "#map button.shard[data-shard='7']").await;
    wait_for_count(&browser, "#story #pin-target", Some(1), PATIENCE).await;
    let story = text(&browser, "#story dl").await;
    assert!(story.contains(&home), "the story names its home: {story}");
    assert!(story.contains("tenant=acme, tier=gold"), "the story shows its attributes: {story}");
    choose(&browser, "#pin-target", &target).await;
    click(&browser, "#pin").await;
    confirm(&browser).await;
    let pinned = Instant::now();
    let moved = format!("#map article.region[data-address='{target}'] button.shard[data-shard='7']");
    wait_for_count(&browser, &moved, Some(1), PIN_SHOWS_WITHIN).await;
    eprintln!("the pin showed on the map after {:?}", pinned.elapsed());
    assert_eq!(cluster.home_of("7").await.as_deref(), Some(target.as_str()));
    assert!(text(&browser, "#notice").await.contains("pinned"), "the page says what it did");
    wait_for_count(&browser, "#map button.shard.placement[data-shard='7']", Some(1), PATIENCE).await;
    // The open story follows the shard to its new home.
    wait_for_text(&browser, "#story dd", &target).await;
    wait_for_text(&browser, "#story ol", "shard-homed").await;
    screenshot(&browser, "pinned").await;
    browser.close().await.unwrap();
    drop(cluster.regions);
}

#[tokio::test(flavor = "multi_thread")]
async fn draining_a_region_from_the_page_empties_it() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;
    let drained = "region-c";
    click(&browser, &format!("#map article.region[data-address='{drained}'] button[data-action='drain']")).await;
    confirm(&browser).await;
    let card = format!("#map article.region[data-address='{drained}']");
    wait_for_count(&browser, &format!("{card} button.shard"), Some(0), PATIENCE).await;
    wait_for_count(&browser, &format!("{card}.draining"), Some(1), PATIENCE).await;
    assert_eq!(text(&browser, &format!("{card} .count")).await, "0 shards");
    wait_for_count(&browser, "#map button.shard[data-shard]", Some(SHARDS), PATIENCE).await;
    let state = cluster.admin().type_state("cart").await.unwrap();
    assert_eq!(state.regions.iter().find(|r| r.address == drained).unwrap().shard_count, 0);
    assert!(!state.shards.iter().any(|s| s.region == drained), "{state:?}");
    screenshot(&browser, "drained").await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_draws_the_moves_it_would_make() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;
    choose(&browser, "#candidate", "hash").await;
    click(&browser, "#dry-run").await;
    wait_for_count(&browser, "#dry-run-result li.round", Some(3), PATIENCE).await;
    wait_for_count(&browser, "#dry-run-result svg rect", None, PATIENCE).await;
    let rounds = text(&browser, "#dry-run-result ol").await;
    assert!(rounds.contains("moves"), "{rounds}");
    // Hash places shards elsewhere than least-shard: its moves are marked on the map.
    wait_for_count(&browser, "#map button.shard.dry-run", None, PATIENCE).await;
    assert!(text(&browser, "#notice").await.starts_with("Dry run of hash@"));
    screenshot(&browser, "dry-run").await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_token_is_named_and_the_right_one_opens_the_page() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::with_token(Some("the-right-token")).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&cluster.page()).await.unwrap();
    wait_for_count(&browser, "form#login:not([hidden])", Some(1), PATIENCE).await;
    screenshot(&browser, "login").await;
    browser.find(Locator::Css("#token")).await.unwrap().send_keys("a-wrong-token").await.unwrap();
    click(&browser, "#login-submit").await;
    wait_for_count(&browser, "#login-error:not([hidden])", Some(1), PATIENCE).await;
    let message = text(&browser, "#login-error").await;
    assert!(message.contains("refused this token"), "{message}");
    screenshot(&browser, "wrong-token").await;
    browser.find(Locator::Css("#token")).await.unwrap().send_keys("the-right-token").await.unwrap();
    click(&browser, "#login-submit").await;
    wait_for_count(&browser, "#map button.shard[data-shard]", Some(SHARDS), PATIENCE).await;
    wait_for_count(&browser, "#live.on", Some(1), PATIENCE).await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_view_renders_under_dump_dom_while_the_stream_stays_open() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let mut command = Command::new(which_chromium());
    command
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom"])
        .arg("--virtual-time-budget=15000")
        .arg(cluster.page())
        .stderr(Stdio::null());
    let output = tokio::time::timeout(Duration::from_secs(120), tokio::task::spawn_blocking(move || command.output()))
        .await
        .expect("chromium --dump-dom ends although the page holds a stream open")
        .unwrap()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&output.stdout);
    let regions = dom.matches("<article class=\"region").count();
    let shards = dom.matches("data-shard=\"").count();
    assert_eq!((regions, shards), (REGIONS.len(), SHARDS), "the dumped page:\n{dom}");
    for address in REGIONS {
        assert!(dom.contains(&format!(">{address}</h3>")), "{address} is not in the page as text");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_other_action_works_from_the_page() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;

    // Pin, then remove the placement.
    click(&browser, "#map button.shard[data-shard='3']").await;
    wait_for_count(&browser, "#story #pin-target", Some(1), PATIENCE).await;
    click(&browser, "#pin").await;
    confirm(&browser).await;
    wait_for_count(&browser, "#story #unpin", Some(1), PATIENCE).await;
    click(&browser, "#unpin").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#notice", "placement of 3 is removed").await;
    wait_for_count(&browser, "#map button.shard.placement", Some(0), PATIENCE).await;
    assert!(cluster.admin().placements("cart").await.unwrap().placements.is_empty());

    // Rebalance two selected shards now.
    click(&browser, "#select-mode").await;
    click(&browser, "#map button.shard[data-shard='1']").await;
    click(&browser, "#map button.shard[data-shard='2']").await;
    wait_for_text(&browser, "#selected", "Selected: 1, 2").await;
    click(&browser, "#immediate").await;
    click(&browser, "#rebalance").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#notice", "2 shard(s) accepted").await;
    click(&browser, "#select-mode").await;

    // Drain, then undrain.
    let card = "#map article.region[data-address='region-a']";
    click(&browser, &format!("{card} button[data-action='drain']")).await;
    confirm(&browser).await;
    wait_for_count(&browser, &format!("{card}.draining"), Some(1), PATIENCE).await;
    click(&browser, &format!("{card} button[data-action='undrain']")).await;
    confirm(&browser).await;
    wait_for_count(&browser, &format!("{card}.draining"), Some(0), PATIENCE).await;
    wait_for_count(&browser, &format!("{card} button[data-action='drain']"), Some(1), PATIENCE).await;

    // Upload a component.
    let component = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
    std::fs::write(component.path(), include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"))).unwrap();
    let upload = browser.find(Locator::Css("#upload")).await.unwrap();
    upload.send_keys(&component.path().display().to_string()).await.unwrap();
    confirm(&browser).await;
    let uploaded = wait_for_text(&browser, "#notice", "Uploaded").await;
    let digest = uploaded.split(" as ").nth(1).unwrap().trim_end_matches('.').to_owned();
    wait_for_count(&browser, &format!("#candidate option[value='{digest}']"), Some(1), PATIENCE).await;

    // Dry-run then activate hash; shadow least-shard; stop the shadow; roll back.
    choose(&browser, "#candidate", "hash").await;
    click(&browser, "#dry-run").await;
    wait_for_text(&browser, "#notice", "Dry run of hash@").await;
    click(&browser, "#activate").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#active-strategy", "Active: hash@").await;
    wait_for_text(&browser, "#summary", "strategy hash@").await;
    choose(&browser, "#candidate", "least-shard").await;
    click(&browser, "#shadow").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#shadow-state", "Shadow: least-shard@").await;
    wait_for_text(&browser, "#shadow-state", "disagreement(s)").await;
    screenshot(&browser, "strategy").await;
    click(&browser, "#clear-shadow").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#shadow-state", "No shadow.").await;
    click(&browser, "#rollback").await;
    confirm(&browser).await;
    wait_for_text(&browser, "#active-strategy", "Active: least-shard@").await;
    wait_for_text(&browser, "#active-strategy", "(rollback)").await;
    let state = cluster.admin().strategy("cart").await.unwrap();
    assert_eq!(state.active.name, "least-shard");

    // A cancelled action does nothing.
    click(&browser, "#map article.region[data-address='region-b'] button[data-action='drain']").await;
    wait_for_count(&browser, "dialog#confirm[open]", Some(1), PATIENCE).await;
    click(&browser, "#confirm-cancel").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let regions = cluster.admin().regions().await.unwrap();
    assert!(regions.regions.iter().all(|r| !r.draining), "a cancelled drain drained: {regions:?}");
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_regions_and_ten_thousand_shards_stay_readable() {
    const MANY_REGIONS: usize = 100;
    const MANY_SHARDS: usize = 10_000;
    let _one = BROWSER.lock().await;
    let node = Node::start(&fast_args(&[])).await;
    let regions = many_regions(&node, MANY_REGIONS, |i| format!("region-{i:03}"), MANY_SHARDS).await;
    let admin = node.admin();
    wait_for("ten thousand shards homed", Duration::from_secs(300), async || {
        let state = admin.type_state_page("cart", None, Some(1)).await.ok()?;
        (state.regions.iter().map(|r| r.shard_count).sum::<usize>() == MANY_SHARDS).then_some(())
    })
    .await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&format!("{}/ui/", node.base)).await.unwrap();
    wait_for_count(&browser, "#map article.region", Some(MANY_REGIONS), PATIENCE).await;
    // Aggregated: counts per region as SVG text, no button per shard.
    wait_for_count(&browser, "#map .aggregate svg text", Some(MANY_REGIONS), PATIENCE).await;
    assert_eq!(wait_for_count(&browser, "#map button.shard[data-shard]", Some(0), PATIENCE).await, 0);
    wait_for_text(&browser, "#summary", "100 regions · 10000 shards").await;
    let first = text(&browser, "#map article.region .aggregate svg text").await;
    assert!(first.ends_with("strategy"), "{first}");
    // A shard is still found by its id.
    browser.find(Locator::Css("#find-shard")).await.unwrap().send_keys("4242").await.unwrap();
    click(&browser, "#find button").await;
    let home = node.admin().shard("cart", "4242").await.unwrap().home.unwrap();
    wait_for_text(&browser, "#story dl", &home).await;
    screenshot(&browser, "many").await;
    browser.close().await.unwrap();
    drop(regions);
}
