//! Driving the dashboard in a real browser: headless Chromium through
//! chromedriver (WebDriver, with `fantoccini`), one browser at a time, and
//! the waits, clicks and screenshots the browser tests share. Screenshots
//! go under `target/tmp/dashboard/` and are checked to be real pictures;
//! `cargo xtask screenshots` copies them into `docs/images/`.
//!
//! Needs `chromium` and `chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `cargo xtask test` installs them when missing).

#![allow(dead_code, reason = "shared by several test files, each using a part")]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};

use shardalloc_client::region::{InMemoryTransport, RegionHandle};

use crate::node::{Journal, Msg, Node, fast_args, registered, wait_for};

/// How long the page may take to show something (generous: shared machines).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One browser at a time: two cores, one browser.
pub static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The regions the small cluster starts.
pub const REGIONS: [&str; 3] = ["region-a", "region-b", "region-c"];
/// The shards they ask homes for: "1" … "30".
pub const SHARDS: usize = 30;

/// A node with three regions and thirty homed shards.
pub struct Cluster {
    pub node: Node,
    pub regions: Vec<RegionHandle<Msg, String>>,
    pub token: Option<String>,
}

impl Cluster {
    /// A node without tokens.
    pub async fn start() -> Cluster {
        Self::with_token(None).await
    }

    /// A node with `--admin-token` when given.
    pub async fn with_token(token: Option<&str>) -> Cluster {
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
                if address == REGIONS[0] {
                    let declared = [("load", 500.0), ("memory-mb", 2048.0)];
                    config.capacity = shardalloc_proto::capacity::RegionCapacity::new(declared).unwrap();
                }
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

    pub fn admin(&self) -> shardalloc_client::admin::AdminClient {
        match &self.token {
            Some(token) => self.node.admin_with(token),
            None => self.node.admin(),
        }
    }

    pub fn page(&self) -> String {
        format!("{}/ui/", self.node.base)
    }

    /// The region that holds `shard` now, from the node.
    pub async fn home_of(&self, shard: &str) -> Option<String> {
        self.admin().shard("cart", shard).await.ok()?.home
    }
}

/// `count` regions of `cart` on `node`, region `i` at `address(i)` in zone
/// `zone-{i % 3}`, all registered, and shards "0" … `shards − 1` sent one
/// message each from region `shard % count` (so each starts on its home).
pub async fn many_regions(
    node: &Node,
    count: usize,
    address: impl Fn(usize) -> String,
    shards: usize,
) -> Vec<RegionHandle<Msg, String>> {
    let journal = Journal::default();
    let network = InMemoryTransport::default();
    let regions: Vec<RegionHandle<Msg, String>> = (0..count)
        .map(|i| {
            node.region("cart", &address(i), &journal, &network, |config| {
                config.labels.insert("zone".into(), format!("zone-{}", i % 3));
            })
        })
        .collect();
    for region in &regions {
        registered(region).await;
    }
    for shard in 0..shards {
        let sender = &regions[shard % count];
        sender.send(&shard.to_string(), Msg::new(sender.address(), 0)).expect("send to a shard");
    }
    regions
}

pub async fn open_map(browser: &Client, cluster: &Cluster) {
    browser.goto(&cluster.page()).await.expect("open the page");
    wait_for_count(browser, "#map article.region", Some(REGIONS.len()), PATIENCE).await;
    wait_for_count(browser, "#map button.shard[data-shard]", Some(SHARDS), PATIENCE).await;
    wait_for_count(browser, "#live.on", Some(1), PATIENCE).await;
}

/// Where screenshots go.
pub fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).expect("a screenshot directory");
    dir
}

pub fn program(name: &str) -> String {
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
pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    pub async fn start() -> Driver {
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

    pub async fn browser(&self) -> Client {
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

pub fn which_chromium() -> String {
    let path = program("chromium");
    let output = Command::new("which").arg(&path).output().expect("which");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Saves a screenshot as `name.png` and checks it is a real picture: a
/// PNG of the window's size with many colours (not a blank page).
pub async fn screenshot(browser: &Client, name: &str) {
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
pub async fn wait_for_count(browser: &Client, css: &str, count: Option<usize>, within: Duration) -> usize {
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
pub fn stale(error: &CmdError) -> bool {
    matches!(error, CmdError::Standard(e) if e.error == fantoccini::error::ErrorStatus::StaleElementReference)
}

/// `act` on the element at `css`; found again when the live map redrew
/// it between finding and acting.
pub async fn on_element<T>(browser: &Client, css: &str, act: impl AsyncFn(Element) -> Result<T, CmdError>) -> T {
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
pub async fn text(browser: &Client, css: &str) -> String {
    on_element(browser, css, async |element| element.text().await).await
}

/// Clicks `css`.
pub async fn click(browser: &Client, css: &str) {
    on_element(browser, css, async |element| element.click().await).await
}

/// Confirms the dialog an action opened.
pub async fn confirm(browser: &Client) {
    wait_for_count(browser, "dialog#confirm[open]", Some(1), PATIENCE).await;
    click(browser, "#confirm-ok").await;
}

/// Waits until the text of `css` contains `wanted`.
pub async fn wait_for_text(browser: &Client, css: &str, wanted: &str) -> String {
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
pub async fn choose(browser: &Client, css: &str, value: &str) {
    wait_for_count(browser, &format!("{css} option[value='{value}']"), Some(1), PATIENCE).await;
    on_element(browser, css, async |element| element.select_by_value(value).await).await
}
