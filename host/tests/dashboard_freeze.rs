//! Freezes on the dashboard, in a real browser against the real node: the
//! banner appears when the type is frozen (through the API, seen from the
//! event stream) saying who froze it and why, its button lifts the freeze,
//! and the side bar's form freezes the type.

use crate::browser;

use std::time::{Duration, Instant};

use fantoccini::Client;
use shardalloc_proto::api::{FreezeRequest, FreezeScope};

use browser::*;

/// Whether the banner is hidden now.
async fn banner_hidden(browser: &Client) -> bool {
    let hidden = browser.execute("return document.getElementById('freeze').hidden;", vec![]).await.expect("run");
    hidden.as_bool().expect("a boolean")
}

async fn wait_banner(browser: &Client, hidden: bool) {
    let started = Instant::now();
    while banner_hidden(browser).await != hidden {
        assert!(started.elapsed() < PATIENCE, "the banner is still {}", if hidden { "shown" } else { "hidden" });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_banner_shows_a_freeze_and_lifts_it_and_the_form_freezes() {
    let _one = BROWSER.lock().await;
    let cluster = Cluster::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    open_map(&browser, &cluster).await;
    assert!(banner_hidden(&browser).await, "a banner with no freeze");

    // Frozen through the API: the banner says who and why.
    let admin = cluster.admin();
    let request = FreezeRequest { for_seconds: Some(600), until: None, reason: "deploy 42".into(), strict: false };
    admin.freeze(Some("cart"), &request).await.unwrap();
    wait_banner(&browser, false).await;
    let said = wait_for_text(&browser, "#freeze-list", "deploy 42").await;
    assert!(said.contains("frozen by an operator since"), "{said}");
    assert!(said.contains("until"), "{said}");
    screenshot(&browser, "freeze").await;

    // Its button lifts it.
    click(&browser, "#freeze-lift").await;
    confirm(&browser).await;
    wait_banner(&browser, true).await;
    let state = admin.freezes(Some("cart")).await.unwrap();
    assert!(!state.frozen, "{state:?}");
    assert_eq!(state.history.last().unwrap().reason, "lifted from the dashboard");

    // The form freezes, strictly, for five minutes.
    on_element(&browser, "#freeze-reason", async |e| e.send_keys("incident 7").await).await;
    on_element(&browser, "#freeze-minutes", async |e| {
        e.clear().await?;
        e.send_keys("5").await
    })
    .await;
    click(&browser, "#freeze-strict").await;
    click(&browser, "#freeze-submit").await;
    confirm(&browser).await;
    wait_banner(&browser, false).await;
    wait_for_text(&browser, "#freeze-list", "Strict").await;
    let state = admin.freezes(Some("cart")).await.unwrap();
    let freeze = &state.freezes[0];
    assert_eq!((freeze.scope, freeze.reason.as_str(), freeze.strict), (FreezeScope::Type, "incident 7", true));
    assert_eq!(freeze.until_ms.unwrap() - freeze.since_ms, 300_000);
}
