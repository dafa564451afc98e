//! The dashboard in a real browser: headless Chromium driven through
//! chromedriver (WebDriver, with `fantoccini`) against the real node with
//! three simulated regions and thirty shards. Every state is saved as a
//! screenshot under `target/tmp/dashboard/` and checked to be a real
//! picture; `cargo xtask screenshots` copies them into `docs/images/`.
//!
//! Needs `chromium` and `chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `cargo xtask test` installs them when missing). The
//! browser tests run one at a time: two cores, one browser.

mod node;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};
use shardalloc_client::region::{InMemoryTransport, RegionHandle};

use node::{Journal, Msg, Node, fast_args, registered, wait_for};

/// The regions the tests start.
const REGIONS: [&str; 3] = ["region-a", "region-b", "region-c"];
/// The shards they ask homes for: "1" … "30".
const SHARDS: usize = 30;
/// How long the page may take to show something (generous: shared machines).
const PATIENCE: Duration = Duration::from_secs(60);
/// How long a pin may take to show on the map: the bound.
const PIN_SHOWS_WITHIN: Duration = Duration::from_secs(10);

/// One browser at a time.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where screenshots go.
fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).expect("a screenshot directory");
    dir
}

fn program(name: &str) -> String {
    let found = Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{name}` is not installed: the dashboard's browser tests need Debian's chromium and chromium-driver \
         (`cargo xtask test` installs them)"
    );
    name.to_owned()
}

/// A chromedriver child on a free port, in its own process group with the
/// Chromium it starts; the whole group is killed when dropped, so a test
/// that panics before closing its browser leaves no Chromium behind.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(program("chromedriver"))
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Driver { child, port };
        wait_for("chromedriver to listen", PATIENCE, async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()
        })
        .await;
        driver
    }

    async fn browser(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        let options = serde_json::json!({
            "binary": which_chromium(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--lang=en"],
        });
        capabilities.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a browser session through chromedriver")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn which_chromium() -> String {
    let path = program("chromium");
    let output = Command::new("which").arg(&path).output().expect("which");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A node with three regions and thirty homed shards.
struct Cluster {
    node: Node,
    regions: Vec<RegionHandle<Msg>>,
    token: Option<String>,
}

impl Cluster {
    /// A node without tokens.
    async fn start() -> Cluster {
        Self::with_token(None).await
    }

    /// A node with `--admin-token` when given.
    async fn with_token(token: Option<&str>) -> Cluster {
        let extra = match token {
            Some(token) => vec!["--admin-token", token],
            None => vec![],
        };
        let node = Node::start(&fast_args(&extra)).await;
        let journal = Journal::default();
        let network = InMemoryTransport::default();
        let mut regions = Vec::new();
        for address in REGIONS {
            let region = node.region("cart", address, &journal, &network, |config| {
                config.labels.insert("zone".into(), format!("zone-{}", &address[7..]));
            });
            registered(&region).await;
            regions.push(region);
        }
        for shard in 1..=SHARDS {
            let sender = &regions[shard % regions.len()];
            sender.send(&shard.to_string(), Msg::new(sender.address(), 0)).expect("send to a shard");
        }
        let token = token.map(str::to_owned);
        let admin = match &token {
            Some(token) => node.admin_with(token),
            None => node.admin(),
        };
        wait_for("thirty shards homed", PATIENCE, async || {
            let state = admin.type_state_page("cart", None, Some(1)).await.ok()?;
            (state.regions.iter().map(|r| r.shard_count).sum::<usize>() == SHARDS).then_some(())
        })
        .await;
        Cluster { node, regions, token }
    }

    fn admin(&self) -> shardalloc_client::admin::AdminClient {
        match &self.token {
            Some(token) => self.node.admin_with(token),
            None => self.node.admin(),
        }
    }

    fn page(&self) -> String {
        format!("{}/ui/", self.node.base)
    }

    /// The region that holds `shard` now, from the node.
    async fn home_of(&self, shard: &str) -> Option<String> {
        self.admin().shard("cart", shard).await.ok()?.home
    }
}

/// Saves a screenshot as `name.png` and checks it is a real picture: a
/// PNG of the window's size with many colours (not a blank page).
async fn screenshot(browser: &Client, name: &str) {
    let bytes = browser.screenshot().await.expect("a screenshot");
    let path = screenshots().join(format!("{name}.png"));
    std::fs::write(&path, &bytes).expect("save the screenshot");
    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a buffer size")];
    let info = reader.next_frame(&mut pixels).expect("the PNG decodes");
    assert!(info.width >= 1000 && info.height >= 600, "{name}: a {}×{} picture", info.width, info.height);
    let channels = info.color_type.samples();
    let colours: std::collections::BTreeSet<&[u8]> = pixels[..info.buffer_size()].chunks(channels).collect();
    assert!(colours.len() > 50, "{name}: only {} colours — a blank or broken page ({})", colours.len(), path.display());
}

/// Waits until `css` matches `count` elements (`None`: at least one).
async fn wait_for_count(browser: &Client, css: &str, count: Option<usize>, within: Duration) -> usize {
    let started = Instant::now();
    loop {
        let found = browser.find_all(Locator::Css(css)).await.map(|e| e.len()).unwrap_or(0);
        if count.map_or(found > 0, |c| found == c) {
            return found;
        }
        assert!(
            started.elapsed() < within,
            "{css}: {found} elements after {within:?}, expected {}",
            count.map_or("some".to_owned(), |c| c.to_string())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// True for the error of an element the page redrew between finding and using it.
fn stale(error: &CmdError) -> bool {
    matches!(error, CmdError::Standard(e) if e.error == fantoccini::error::ErrorStatus::StaleElementReference)
}

/// `act` on the element at `css`; found again when the live map redrew
/// it between finding and acting.
async fn on_element<T>(browser: &Client, css: &str, act: impl AsyncFn(Element) -> Result<T, CmdError>) -> T {
    let started = Instant::now();
    loop {
        let element = browser.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        match act(element).await {
            Ok(value) => return value,
            Err(error) if stale(&error) && started.elapsed() < PATIENCE => continue,
            Err(error) => panic!("{css}: {error}"),
        }
    }
}

/// The text of `css`.
async fn text(browser: &Client, css: &str) -> String {
    on_element(browser, css, async |element| element.text().await).await
}

/// Clicks `css`.
async fn click(browser: &Client, css: &str) {
    on_element(browser, css, async |element| element.click().await).await
}

/// Confirms the dialog an action opened.
async fn confirm(browser: &Client) {
    wait_for_count(browser, "dialog#confirm[open]", Some(1), PATIENCE).await;
    click(browser, "#confirm-ok").await;
}

async fn open_map(browser: &Client, cluster: &Cluster) {
    browser.goto(&cluster.page()).await.expect("open the page");
    wait_for_count(browser, "#map article.region", Some(REGIONS.len()), PATIENCE).await;
    wait_for_count(browser, "#map button.shard[data-shard]", Some(SHARDS), PATIENCE).await;
    wait_for_count(browser, "#live.on", Some(1), PATIENCE).await;
}

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
    screenshot(&browser, "map").await;

    let home = cluster.home_of("7").await.expect("shard 7 has a home");
    let target = REGIONS.iter().find(|r| **r != home).unwrap().to_string();
    click(&browser, "#map button.shard[data-shard='7']").await;
    wait_for_count(&browser, "#story #pin-target", Some(1), PATIENCE).await;
    assert!(text(&browser, "#story dl").await.contains(&home), "the story names its home");
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

/// Waits until the text of `css` contains `wanted`.
async fn wait_for_text(browser: &Client, css: &str, wanted: &str) -> String {
    let started = Instant::now();
    loop {
        let found = match browser.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if found.contains(wanted) {
            return found;
        }
        assert!(started.elapsed() < PATIENCE, "{css} says {found:?}, not {wanted:?}, after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Chooses `value` in the `select` at `css`.
async fn choose(browser: &Client, css: &str, value: &str) {
    wait_for_count(browser, &format!("{css} option[value='{value}']"), Some(1), PATIENCE).await;
    on_element(browser, css, async |element| element.select_by_value(value).await).await
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
    let journal = Journal::default();
    let network = InMemoryTransport::default();
    let mut regions = Vec::new();
    for i in 0..MANY_REGIONS {
        let address = format!("region-{i:03}");
        let region = node.region("cart", &address, &journal, &network, |config| {
            config.labels.insert("zone".into(), format!("zone-{}", i % 3));
        });
        regions.push(region);
    }
    for region in &regions {
        registered(region).await;
    }
    for shard in 0..MANY_SHARDS {
        let sender = &regions[shard % regions.len()];
        sender.send(&shard.to_string(), Msg::new(sender.address(), 0)).expect("send to a shard");
    }
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
