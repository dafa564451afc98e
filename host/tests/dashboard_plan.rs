//! The plan form on the dashboard, in a real browser against the real node:
//! planning a drain lists round 0 and each rebalance round, shows every
//! region's shards now and after, outlines the shards it would move on the
//! map and changes nothing; a plan the node refuses shows its error.

use crate::browser;

use std::collections::BTreeMap;

use fantoccini::Client;

use browser::*;

/// Each region's shard count, as the node has it now.
async fn counts(cluster: &Cluster) -> BTreeMap<String, usize> {
    let regions = cluster.admin().regions().await.unwrap();
    regions.regions.iter().map(|r| (r.address.clone(), r.shards)).collect()
}

async fn type_into(browser: &Client, css: &str, text: &str) {
    on_element(browser, css, async |e| {
        e.clear().await?;
        e.send_keys(text).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plan_form_draws_a_drain_on_the_map_and_changes_nothing() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;
    let before = counts(&cluster).await;
    let draining = before[REGIONS[0]];
    assert!(draining > 0, "{before:?}");

    // Plan region-a's drain with one region added: round 0 moves its shards.
    type_into(&browser, "#plan-drain", REGIONS[0]).await;
    type_into(&browser, "#plan-add", "region-new,zone=z9").await;
    click(&browser, "#plan-submit").await;
    wait_for_count(&browser, "#plan-result li.round", Some(4), PATIENCE).await;
    let rounds = text(&browser, "#plan-result ol").await;
    assert!(rounds.contains(&format!("{draining} shard(s) displaced: {} → ", REGIONS[0])), "{rounds}");
    let drained = text(&browser, &format!("#plan-result tr[data-address='{}']", REGIONS[0])).await;
    assert_eq!(drained.split_whitespace().collect::<Vec<_>>(), [REGIONS[0], &draining.to_string(), "0", "–"]);
    let added = text(&browser, "#plan-result tr[data-address='region-new']").await;
    assert!(added.starts_with("region-new new "), "{added}");
    let outlined = wait_for_count(&browser, "#map button.shard.dry-run", None, PATIENCE).await;
    assert!(outlined >= draining, "{outlined} shards outlined, {draining} displaced");
    wait_for_text(&browser, "#notice", "nothing changed").await;
    screenshot(&browser, "plan").await;

    // Nothing changed.
    assert_eq!(counts(&cluster).await, before);
    let regions = cluster.admin().regions().await.unwrap();
    assert!(regions.regions.iter().all(|r| !r.draining), "{regions:?}");

    // A region the type lacks: the node's words in the notice.
    type_into(&browser, "#plan-drain", "region-x").await;
    type_into(&browser, "#plan-add", "").await;
    click(&browser, "#plan-submit").await;
    let notice = wait_for_text(&browser, "#notice", "invalid-plan").await;
    assert!(notice.contains("no region \"region-x\""), "{notice}");
}
