//! Load on the dashboard, in a real browser against the real node: shards
//! coloured by the loads their regions report, each region's load against
//! the band around the mean, the hottest shards' list, and the regions'
//! overview at 1,000 regions (sorted by load, filtered by zone, status and
//! address, a click opening the region).

use crate::browser;
use crate::node;

use std::collections::BTreeMap;
use std::time::Duration;

use fantoccini::{Client, Locator};
use shardalloc_client::region::RegionHandle;

use browser::*;
use node::{Msg, Node, wait_for};

/// The loads the tests give shards, the bound of every wait on them.
const LOADS_WITHIN: Duration = Duration::from_secs(120);

/// Waits until every shard runs on its home, then sets each shard's load
/// on its home region until the node lists them all with a load.
async fn report_loads(node: &Node, regions: &[RegionHandle<Msg, String>], loads: &BTreeMap<String, f64>) {
    wait_for("every shard running on its home", LOADS_WITHIN, async || {
        let running: usize = regions.iter().map(|r| r.running_shards().len()).sum();
        (running == loads.len()).then_some(())
    })
    .await;
    let admin = node.admin();
    wait_for("every shard's load on the node", LOADS_WITHIN, async || {
        for region in regions {
            for shard in region.running_shards() {
                region.set_load(&shard, loads[&shard]);
            }
        }
        let state = admin.type_state("cart").await.ok()?;
        let page =
            node.http().get(node.url("/v1/cluster/shards/cart/shards?sort=load&limit=10000")).send().await.ok()?;
        let page: serde_json::Value = page.json().await.ok()?;
        let listed = page["shards"].as_array()?.len();
        let exact = state.regions.iter().all(|r| {
            let carried: f64 = state.shards.iter().filter(|s| s.region == r.address).map(|s| loads[&s.shard_id]).sum();
            r.load.is_some_and(|load| (load - carried).abs() < 1e-6) || carried == 0.0
        });
        (listed == loads.len() && exact).then_some(())
    })
    .await;
}

/// The values of an attribute of every element at `css`, in page order (one call).
async fn attributes(browser: &Client, css: &str, attribute: &str) -> Vec<String> {
    let script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]));";
    let values = browser.execute(script, vec![css.into(), attribute.into()]).await.expect("run the script");
    serde_json::from_value(values).expect("a list of strings")
}

/// The three-region cluster with shard `n` carrying `n` units a second:
/// shards coloured by load, each region's load against the band, the
/// hottest shards listed and opened.
#[tokio::test(flavor = "multi_thread")]
async fn shards_are_coloured_by_load_and_the_hottest_are_listed() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let loads: BTreeMap<String, f64> = (1..=SHARDS).map(|s| (s.to_string(), s as f64)).collect();
    report_loads(&cluster.node, &cluster.regions, &loads).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;

    // The hottest first, each opening its story with its load.
    wait_for_count(&browser, "#hot-shards li button[data-shard]", Some(10), PATIENCE).await;
    assert_eq!(attributes(&browser, "#hot-shards button[data-shard]", "data-shard").await[..3], ["30", "29", "28"]);
    assert!(text(&browser, "#hot-shards li").await.contains("30/s on region-"), "the load and home as text");
    click(&browser, "#hot-shards button[data-shard='30']").await;
    wait_for_text(&browser, "#story h2", "Shard 30").await;
    wait_for_text(&browser, "#story dl", "30/s (smoothed)").await;

    // Coloured by load: the hottest shard hottest, every title with its load.
    choose(&browser, "#colour-by", "load").await;
    wait_for_count(&browser, "#map button.shard.heat-4[data-shard='30']", Some(1), PATIENCE).await;
    wait_for_count(&browser, "#map button.shard.strategy", Some(0), PATIENCE).await;
    let titles = attributes(&browser, "#map button.shard[data-shard='7']", "title").await;
    assert!(titles[0].contains("load 7/s"), "{titles:?}");
    let levels = attributes(&browser, "#map button.shard[data-shard='1']", "class").await;
    assert!(levels[0].contains("heat-1"), "shard 1 is cool: {levels:?}");
    wait_for_count(&browser, "#legend-load:not([hidden])", Some(1), PATIENCE).await;

    // Each region's load against the band, as the node counts it.
    let state = cluster.admin().type_state("cart").await.unwrap();
    let mean = state.regions.iter().map(|r| r.load.unwrap()).sum::<f64>() / REGIONS.len() as f64;
    for region in &state.regions {
        let load = region.load.unwrap();
        let standing = if load > mean * 1.1 {
            "above band"
        } else if load < mean * 0.9 {
            "below band"
        } else {
            "within band"
        };
        let line = text(&browser, &format!("#map article.region[data-address='{}'] .load", region.address)).await;
        assert!(line.starts_with(&format!("load {}/s", load)), "{}: {line}", region.address);
        assert!(line.ends_with(standing), "{} ({load} against a mean of {mean}): {line}", region.address);
    }
    let summary = text(&browser, "#regions-summary").await;
    assert!(summary.starts_with("3 of 3 regions · mean 155/s · band "), "{summary}");
    assert!(summary.contains("(±10%)"), "{summary}");
    screenshot(&browser, "load").await;
    browser.close().await.unwrap();
}

/// 1,000 regions in three zones, 2,000 shards of distinct loads: every
/// region one cell, sorted by load against the band; filtered by zone,
/// status and address; a click opens the region on the map.
#[tokio::test(flavor = "multi_thread")]
async fn the_overview_stays_readable_at_a_thousand_regions() {
    const REGION_COUNT: usize = 1_000;
    const SHARD_COUNT: usize = 2_000;
    let _one = BROWSER.lock().await;
    // Heartbeats every second, and long leases: 1,000 sessions on two
    // cores beside a browser must not lapse.
    let args = [
        "--type",
        "cart",
        "--heartbeat-interval-ms",
        "1000",
        "--lease-ms",
        "30000",
        "--unreachable-after-ms",
        "30000",
        "--remove-after-ms",
        "60000",
    ];
    let node = Node::start(&args).await;
    let regions = many_regions(&node, REGION_COUNT, |i| format!("region-{i:04}"), SHARD_COUNT).await;
    // Distinct loads 1 … 2,000 (7,919 is prime to 2,000).
    let loads: BTreeMap<String, f64> =
        (0..SHARD_COUNT).map(|s| (s.to_string(), ((s * 7_919) % SHARD_COUNT + 1) as f64)).collect();
    report_loads(&node, &regions, &loads).await;

    let state = node.admin().type_state("cart").await.unwrap();
    let mut by_load: Vec<f64> = state.regions.iter().map(|r| r.load.unwrap_or(0.0)).collect();
    by_load.sort_by(|a, b| b.total_cmp(a));
    let mean = by_load.iter().sum::<f64>() / by_load.len() as f64;
    let above = by_load.iter().filter(|l| **l > mean * 1.1).count();
    let below = by_load.iter().filter(|l| **l < mean * 0.9).count();
    let within = REGION_COUNT - above - below;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&format!("{}/ui/", node.base)).await.unwrap();
    wait_for_count(&browser, "#regions-cells button.cell", Some(REGION_COUNT), PATIENCE).await;
    // Every region against the band, most loaded first.
    let counts = format!("{above} above · {within} within · {below} below");
    let summary = wait_for_text(&browser, "#regions-summary", &counts).await;
    assert!(summary.starts_with("1000 of 1000 regions · mean "), "{summary}");
    let values: Vec<f64> =
        attributes(&browser, "#regions-cells .cell", "data-value").await.iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(values, by_load, "the cells, most loaded first");
    wait_for_count(&browser, "#regions-cells .cell.above", Some(above), PATIENCE).await;
    wait_for_count(&browser, "#regions-cells .cell.below", Some(below), PATIENCE).await;
    wait_for_count(&browser, "#regions-profile rect.bar", Some(REGION_COUNT), PATIENCE).await;
    // The map shows the first hundred cards, in the overview's order.
    wait_for_count(&browser, "#map article.region", Some(100), PATIENCE).await;
    assert!(text(&browser, "#map-note").await.contains("The first 100 of the 1000 regions"));
    let first = attributes(&browser, "#map article.region", "data-address").await;
    let cells = attributes(&browser, "#regions-cells .cell", "data-region").await;
    assert_eq!(first[..], cells[..100], "the cards follow the cells");
    // The hottest shards: the one of load 2,000 first.
    let hottest = loads.iter().find(|(_, l)| **l == SHARD_COUNT as f64).unwrap().0.clone();
    wait_for_count(&browser, "#hot-shards li", Some(10), PATIENCE).await;
    assert_eq!(attributes(&browser, "#hot-shards button", "data-shard").await[0], hottest);
    screenshot(&browser, "overview").await;

    // By zone.
    choose(&browser, "#regions-zone", "zone-1").await;
    wait_for_count(&browser, "#regions-cells .cell", Some(333), PATIENCE).await;
    let zoned = attributes(&browser, "#regions-cells .cell", "data-region").await;
    assert!(zoned.iter().all(|a| a[7..].parse::<usize>().unwrap() % 3 == 1), "only zone-1: {zoned:?}");
    choose(&browser, "#regions-zone", "").await;

    // By address: one region, a click opens it alone on the map.
    let search = browser.find(Locator::Css("#regions-search")).await.unwrap();
    search.send_keys("region-0042").await.unwrap();
    wait_for_count(&browser, "#regions-cells .cell", Some(1), PATIENCE).await;
    click(&browser, "#regions-cells .cell[data-region='region-0042']").await;
    wait_for_text(&browser, "#map-note", "Region region-0042, opened from the overview.").await;
    wait_for_count(&browser, "#regions-cells .cell.open[data-region='region-0042']", Some(1), PATIENCE).await;
    wait_for_count(&browser, "#map article.region", Some(1), PATIENCE).await;
    wait_for_text(&browser, "#map article.region[data-address='region-0042'] .load", "× mean").await;
    wait_for_count(&browser, "#map-all:not([hidden])", Some(1), PATIENCE).await;
    screenshot(&browser, "region").await;
    click(&browser, "#map-all").await;
    search.clear().await.unwrap();
    search.send_keys(" ").await.unwrap();
    wait_for_count(&browser, "#regions-cells .cell", Some(REGION_COUNT), PATIENCE).await;
    wait_for_count(&browser, "#map article.region", Some(100), PATIENCE).await;

    // By status: three drained regions.
    let admin = node.admin();
    for address in ["region-0001", "region-0500", "region-0999"] {
        admin.drain(address).await.unwrap();
    }
    choose(&browser, "#regions-status", "draining").await;
    wait_for_count(&browser, "#regions-cells .cell.status-draining", Some(3), PATIENCE).await;
    wait_for_count(&browser, "#regions-cells .cell", Some(3), PATIENCE).await;
    browser.close().await.unwrap();
    drop(regions);
}
