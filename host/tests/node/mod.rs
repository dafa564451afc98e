//! Shared helpers for the end-to-end tests of the real node: the
//! `shardalloc serve` binary as a child process ([`Node`]), a raw REST
//! helper ([`Node::request`]), region clients whose application records
//! every start, stop and delivery ([`Journal`], [`App`]) and polling waits.
//!
//! Every wait polls with a generous bound; nothing relies on a bare sleep.

#![allow(dead_code, reason = "shared by several test files, each using a part")]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use shardalloc_client::admin::AdminClient;
use shardalloc_client::region::{
    Application, InMemoryTransport, Inbox, Region, RegionConfig, RegionHandle, Replier, Transport, TransportError,
    Undelivered, Update,
};
use tokio::sync::broadcast;

/// How long a node may take to print its address.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of node output kept for a failing test's report.
const LOG_LINES: usize = 400;

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_shardalloc")
}

/// A `Command` for the binary, with no `SHARDALLOC_*` settings inherited
/// from the test's environment (they would change what is tested).
pub fn command() -> Command {
    let mut command = Command::new(binary());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SHARDALLOC_") {
            command.env_remove(&key);
        }
    }
    command
}

type Log = Arc<Mutex<VecDeque<String>>>;

fn remember(log: &Log, line: String) {
    let mut log = log.lock().unwrap();
    if log.len() >= LOG_LINES {
        log.pop_front();
    }
    log.push_back(line);
}

/// A running `shardalloc serve` child; killed (SIGKILL) when dropped. When
/// the test is failing, the tail of its output is printed.
pub struct Node {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://ADDR`.
    pub base: String,
    args: Vec<String>,
    log: Log,
    http: reqwest::Client,
    data: tempfile::TempDir,
}

impl Node {
    /// Starts a node on `127.0.0.1:0` over a fresh data directory, with
    /// `args` after `serve --listen … --data …`.
    pub async fn start(args: &[&str]) -> Node {
        Self::start_on("127.0.0.1:0", args).await
    }

    /// Starts a node listening on `listen` (a fixed port, for a node that
    /// must know its URL before it starts).
    pub async fn start_on(listen: &str, args: &[&str]) -> Node {
        let data = tempfile::tempdir().expect("a temporary data directory");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (child, addr, log) = spawn(data.path(), listen, &args).await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Node { child: Some(child), base: format!("http://{addr}"), addr, args, log, http, data }
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        self.data.path()
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the node runs").id()
    }

    /// SIGTERM, then waits for the exit (at most [`STOP_TIMEOUT`]).
    pub async fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed: {status}");
        self.wait_exit(STOP_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("the node did not exit within {STOP_TIMEOUT:?} of SIGTERM\n{}", self.log_tail()))
    }

    /// Sends `signal` (`STOP`, `CONT`…) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed: {status}");
    }

    /// True while the process runs.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, then reaps the process.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("the node runs");
        child.kill().expect("SIGKILL the node");
        child.wait().expect("reap the node");
    }

    /// Waits (polling) for the child to exit; `None` if it still runs at the deadline.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut().expect("the node runs");
            if let Some(status) = child.try_wait().expect("poll the node") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Starts the node again, after it stopped, on the same address and
    /// data directory with the same arguments.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the node still runs");
        let (child, addr, log) = spawn(self.data.path(), &self.addr.to_string(), &self.args).await;
        assert_eq!(addr, self.addr, "the restarted node listens elsewhere");
        // Keep the earlier run's output too.
        let earlier: Vec<String> = self.log.lock().unwrap().iter().cloned().collect();
        {
            let mut log = log.lock().unwrap();
            for line in earlier.into_iter().rev() {
                log.push_front(line);
            }
            while log.len() > LOG_LINES {
                log.pop_front();
            }
        }
        self.child = Some(child);
        self.log = log;
    }

    /// The last lines the node printed (stdout and stderr).
    pub fn log_tail(&self) -> String {
        self.log.lock().unwrap().iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// An admin client without a token.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(&self.base, None).unwrap()
    }

    /// An admin client with a token.
    pub fn admin_with(&self, token: &str) -> AdminClient {
        AdminClient::new(&self.base, Some(token.to_owned())).unwrap()
    }

    /// The node's URL for `path` (starting with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The shared HTTP client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A raw request: `body` is sent as JSON when given; the answer's status
    /// and body (JSON when it parses, else a JSON string of the text, `null`
    /// when empty).
    pub async fn request(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let mut request = self.http.request(method.clone(), self.url(path));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let response =
            request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}\nnode output:\n{}", self.log_tail()));
        read(response).await
    }

    /// A region of `entity_type` at `address` recording into `journal`,
    /// with short timings (see [`region_config`]); `tweak` adjusts the config.
    pub fn region<T: Transport<Msg, String> + Clone>(
        &self,
        entity_type: &str,
        address: &str,
        journal: &Journal,
        network: &T,
        tweak: impl FnOnce(&mut RegionConfig),
    ) -> RegionHandle<Msg, String> {
        let mut config = region_config(&self.base, entity_type, address);
        tweak(&mut config);
        Region::start(config, journal.app(address), network.clone()).expect("start a region")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- node output (last {LOG_LINES} lines) ----\n{}\n----", self.log_tail());
        }
    }
}

/// Reads an answer: its status and body as JSON (see [`Node::request`]).
pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = response.bytes().await.expect("read the answer");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, body)
}

/// Spawns `serve` and waits for its "listening" line.
async fn spawn(data: &Path, listen: &str, args: &[String]) -> (Child, SocketAddr, Log) {
    let mut command = command();
    command
        .args(["serve", "--listen", listen, "--data"])
        .arg(data)
        .args(args)
        .env("SHARDALLOC_LOG", "info,tower_http=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn shardalloc serve");
    let log: Log = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel::<Option<SocketAddr>>();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("shardalloc listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                    let _ = tx.send(addr);
                }
                remember(&log, format!("[stdout] {line}"));
            }
            if let Some(tx) = tx.take() {
                let _ = tx.send(None);
            }
        });
    }
    {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => remember(&log, String::from_utf8_lossy(&line).trim_end().to_owned()),
                }
            }
        });
    }
    let answer = tokio::task::spawn_blocking(move || rx.recv_timeout(START_TIMEOUT)).await.unwrap();
    match answer {
        Ok(Some(addr)) => (child, addr, log),
        other => {
            let _ = child.kill();
            let status = child.wait().ok();
            // Let the readers catch up with what the child printed.
            std::thread::sleep(Duration::from_millis(200));
            let tail = log.lock().unwrap().iter().cloned().collect::<Vec<_>>().join("\n");
            panic!("the node did not print its address ({other:?}, exit {status:?}); output:\n{tail}")
        }
    }
}

/// Asserts an error answer: `status`, and a body `{"error":{"code","message"}}`
/// with a non-empty code and message. Returns the code.
#[track_caller]
pub fn assert_error(what: &str, answer: &(StatusCode, Value), status: StatusCode) -> String {
    let (got, body) = answer;
    assert_eq!(*got, status, "{what}: expected {status}, got {got} with body {body}");
    let code = body["error"]["code"].as_str().unwrap_or_default();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !code.is_empty() && !message.is_empty(),
        "{what}: the body is not {{\"error\":{{\"code\",\"message\"}}}}: {body}"
    );
    let keys: Vec<&String> = body.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    assert_eq!(keys, ["error"], "{what}: unexpected top-level fields in {body}");
    code.to_owned()
}

/// Polls `probe` every 25 ms until it answers `Some`, panicking with `what`
/// after `timeout`.
pub async fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The next update matching `pred`, skipping others; panics after `timeout`.
pub async fn next_update<T>(
    updates: &mut broadcast::Receiver<Update>,
    what: &str,
    timeout: Duration,
    mut pred: impl FnMut(&Update) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, updates.recv()).await {
            Err(_) => panic!("timed out after {timeout:?} waiting for the update: {what}"),
            Ok(Ok(update)) => {
                if let Some(value) = pred(&update) {
                    return value;
                }
            }
            Ok(Err(broadcast::error::RecvError::Lagged(n))) => panic!("lost {n} updates waiting for {what}"),
            Ok(Err(broadcast::error::RecvError::Closed)) => panic!("the region stopped before {what}"),
        }
    }
}

/// The short timings tests start nodes with: rebalance every 500 ms,
/// heartbeats every 200 ms, a 2 s lease, unreachable after 1.5 s and
/// removed 3 s later.
pub const FAST: &[&str] = &[
    "--rebalance-interval-ms",
    "500",
    "--heartbeat-interval-ms",
    "200",
    "--unreachable-after-ms",
    "1500",
    "--remove-after-ms",
    "3000",
    "--lease-ms",
    "2000",
    "--handoff-timeout-ms",
    "10000",
];

/// `FAST` timings plus `--type cart` and `extra`.
pub fn fast_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = vec!["--type", "cart"];
    args.extend_from_slice(FAST);
    args.extend_from_slice(extra);
    args
}

/// A port free on 127.0.0.1 now (for a node that must know its URL
/// before it starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The leader lease the nodes on etcd run with (the default), in seconds.
pub const LEADER_LEASE_S: u64 = 3;

/// Region timings of nodes on etcd: heartbeats every 200 ms, a 10 s lease
/// (the default), unreachable after 6 s, removed 6 s later, so a failover
/// of a few seconds never costs a region its shards.
pub const HA_TIMINGS: &[&str] = &[
    "--heartbeat-interval-ms",
    "200",
    "--lease-ms",
    "10000",
    "--unreachable-after-ms",
    "6000",
    "--remove-after-ms",
    "6000",
    "--rebalance-interval-ms",
    "1000",
    "--load-save-interval-ms",
    "200",
];

/// `serve` arguments of node `name` in a cluster on `etcd`, advertising
/// `advertise`: [`LEADER_LEASE_S`], [`HA_TIMINGS`] and `--type cart`.
pub fn ha_args(etcd: &str, advertise: &str, name: &str) -> Vec<String> {
    let lease = LEADER_LEASE_S.to_string();
    let secret = cluster_secret_file().to_str().expect("a UTF-8 path").to_owned();
    let mut args = vec!["--etcd", etcd, "--advertise", advertise, "--node-name", name, "--leader-lease-s", &lease];
    args.extend_from_slice(&["--cluster-secret-file", &secret]);
    args.extend_from_slice(&["--type", "cart"]);
    args.extend_from_slice(HA_TIMINGS);
    args.into_iter().map(str::to_owned).collect()
}

/// The cluster secret every node of this test process shares, in a file
/// made once.
pub fn cluster_secret_file() -> &'static std::path::Path {
    static FILE: std::sync::OnceLock<tempfile::TempPath> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::io::Write::write_all(&mut file, b"the test cluster's secret, 32 bytes\n").expect("write the secret");
        file.into_temp_path()
    })
}

/// A region config with short reconnect and retry delays.
pub fn region_config(base: &str, entity_type: &str, address: &str) -> RegionConfig {
    let mut config = RegionConfig::new(base, entity_type, address);
    config.reconnect_min = Duration::from_millis(50);
    config.reconnect_max = Duration::from_millis(500);
    config.home_retry = Duration::from_millis(300);
    config.stop_deadline = Duration::from_secs(5);
    config.leave_timeout = Duration::from_secs(20);
    config.response_timeout = Duration::from_secs(10);
    config
}

/// Waits until the region is registered (at most 30 s).
pub async fn registered(region: &RegionHandle<Msg, String>) {
    match tokio::time::timeout(Duration::from_secs(30), region.wait_registered()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("region {} was not registered: {error}", region.address()),
        Err(_) => panic!("region {} was not registered within 30 s", region.address()),
    }
}

/// A message: who sent it, its number in that sender's sequence and when.
/// Its JSON (for a transport between processes) carries the first two; the
/// time is when it was read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Msg {
    /// The sender's name.
    pub from: String,
    /// Its number, from 0 per sender.
    pub n: u64,
    /// When it was sent.
    #[serde(skip, default = "Instant::now")]
    pub at: Instant,
}

impl Msg {
    /// Message `n` from `from`, sent now.
    pub fn new(from: &str, n: u64) -> Msg {
        Msg { from: from.to_owned(), n, at: Instant::now() }
    }
}

/// What a region's application saw, in the order it happened cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `start_shard`.
    Started { region: String, shard: String },
    /// `stop_shard`.
    Stopped { region: String, shard: String },
    /// `deliver`.
    Delivered { region: String, shard: String, msg: Msg },
    /// `undelivered`: a message given up, with the error's words.
    Undelivered { region: String, shard: String, msg: Msg, error: String },
}

#[derive(Default)]
struct JournalState {
    entries: Vec<(Instant, Entry)>,
    /// Shard → the regions running it now.
    running: BTreeMap<String, Vec<String>>,
    /// Every start of a shard that already ran somewhere, or at an epoch
    /// below an earlier start's, or at another region's epoch.
    overlaps: Vec<String>,
    /// Shard → its starts: (region, epoch), in order.
    starts: BTreeMap<String, Vec<(String, u64)>>,
    /// How long `stop_shard` takes.
    stop_delay: Duration,
}

/// One record shared by every region's application: starts, stops and
/// deliveries in cluster-wide order, and every time a shard started while
/// it already ran somewhere.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<JournalState>>);

impl Journal {
    /// The application of the region at `address`.
    pub fn app(&self, address: &str) -> App {
        App { region: address.to_owned(), journal: self.clone() }
    }

    /// Makes every `stop_shard` take `delay` (the shard runs meanwhile).
    pub fn set_stop_delay(&self, delay: Duration) {
        self.0.lock().unwrap().stop_delay = delay;
    }

    /// Everything so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().entries.iter().map(|(_, e)| e.clone()).collect()
    }

    /// How many deliveries so far (without copying the journal).
    pub fn delivered_count(&self) -> usize {
        self.0.lock().unwrap().entries.iter().filter(|(_, e)| matches!(e, Entry::Delivered { .. })).count()
    }

    /// Everything so far, with when it happened.
    pub fn timed_entries(&self) -> Vec<(Instant, Entry)> {
        self.0.lock().unwrap().entries.clone()
    }

    /// The regions running `shard` now.
    pub fn running(&self, shard: &str) -> Vec<String> {
        self.0.lock().unwrap().running.get(shard).cloned().unwrap_or_default()
    }

    /// The shards `region` runs now.
    pub fn running_on(&self, region: &str) -> Vec<String> {
        let state = self.0.lock().unwrap();
        state.running.iter().filter(|(_, r)| r.iter().any(|r| r == region)).map(|(s, _)| s.clone()).collect()
    }

    /// Every start of a shard that already ran somewhere, or whose epoch
    /// was below an earlier start's or equal to another region's (should
    /// be none).
    pub fn overlaps(&self) -> Vec<String> {
        self.0.lock().unwrap().overlaps.clone()
    }

    /// The starts of `shard`: (region, epoch), in order.
    pub fn starts(&self, shard: &str) -> Vec<(String, u64)> {
        self.0.lock().unwrap().starts.get(shard).cloned().unwrap_or_default()
    }

    /// The messages delivered to `shard`: (region, message), in order.
    pub fn deliveries(&self, shard: &str) -> Vec<(String, Msg)> {
        self.entries()
            .into_iter()
            .filter_map(|e| match e {
                Entry::Delivered { region, shard: s, msg } if s == shard => Some((region, msg)),
                _ => None,
            })
            .collect()
    }

    /// True when `region` has seen `entry`-like start (or stop) of `shard`.
    pub fn saw(&self, entry: &Entry) -> bool {
        self.0.lock().unwrap().entries.iter().any(|(_, e)| e == entry)
    }

    fn record_start(&self, region: &str, shard: &str, epoch: u64) {
        {
            let mut state = self.0.lock().unwrap();
            let starts = state.starts.entry(shard.to_owned()).or_default();
            let fault = starts.iter().find(|(r, e)| *e > epoch || (*e == epoch && r != region)).map(|(r, e)| {
                format!("{shard} started on {region} at epoch {epoch} after it started on {r} at epoch {e}")
            });
            starts.push((region.to_owned(), epoch));
            state.overlaps.extend(fault);
        }
        self.record(Entry::Started { region: region.to_owned(), shard: shard.to_owned() });
    }

    fn record(&self, entry: Entry) {
        let mut state = self.0.lock().unwrap();
        match &entry {
            Entry::Started { region, shard } => {
                let running = state.running.entry(shard.clone()).or_default();
                if !running.is_empty() {
                    let message = format!("{shard} started on {region} while it runs on {running:?}");
                    running.push(region.clone());
                    state.overlaps.push(message);
                } else {
                    running.push(region.clone());
                }
            }
            Entry::Stopped { region, shard } => {
                if let Some(running) = state.running.get_mut(shard)
                    && let Some(i) = running.iter().position(|r| r == region)
                {
                    running.remove(i);
                    if running.is_empty() {
                        state.running.remove(shard);
                    }
                }
            }
            Entry::Delivered { .. } | Entry::Undelivered { .. } => {}
        }
        state.entries.push((Instant::now(), entry));
    }
}

/// The sender whose requests [`App::answer`] fails.
pub const REFUSED_ASKER: &str = "refused";

/// A region's application: records into the shared [`Journal`].
#[derive(Clone)]
pub struct App {
    region: String,
    journal: Journal,
}

impl Application for App {
    type Message = Msg;
    /// The answering region's address.
    type Reply = String;

    async fn start_shard(&self, shard: &str) {
        self.start_shard_at(shard, 0).await
    }

    async fn start_shard_at(&self, shard: &str, epoch: u64) {
        self.journal.record_start(&self.region, shard, epoch);
    }

    async fn stop_shard(&self, shard: &str) {
        let delay = self.journal.0.lock().unwrap().stop_delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.journal.record(Entry::Stopped { region: self.region.clone(), shard: shard.to_owned() });
    }

    async fn deliver(&self, shard: &str, msg: Msg) {
        self.journal.record(Entry::Delivered { region: self.region.clone(), shard: shard.to_owned(), msg });
    }

    /// Records the request as a delivery and answers with this region's
    /// address; a request from [`REFUSED_ASKER`] is failed.
    async fn answer(&self, shard: &str, msg: Msg) -> Result<String, String> {
        let refused = msg.from == REFUSED_ASKER;
        self.journal.record(Entry::Delivered { region: self.region.clone(), shard: shard.to_owned(), msg });
        if refused {
            return Err(format!("{} does not answer {REFUSED_ASKER}", self.region));
        }
        Ok(self.region.clone())
    }

    fn undelivered(&self, shard: &str, msg: Msg, error: shardalloc_client::region::DeliveryError) {
        let (region, shard, error) = (self.region.clone(), shard.to_owned(), error.to_string());
        self.journal.record(Entry::Undelivered { region, shard, msg, error });
    }
}

/// A data directory path that outlives a [`Node`] (for tests that run the
/// binary themselves).
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Runs the binary with `args` to completion (at most `timeout`): exit
/// status, stdout, stderr. A run still going at the deadline is killed and
/// reported.
pub async fn run_binary(args: &[&str], timeout: Duration) -> (Option<i32>, String, String) {
    let mut child = command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shardalloc");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("shardalloc {args:?} still ran after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    (status.code(), out.join().unwrap(), err.join().unwrap())
}

/// A path inside `dir`.
pub fn path_in(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// An [`InMemoryTransport`] the test can partition: messages to a blocked
/// address fail as unreachable.
#[derive(Clone, Default)]
pub struct Net {
    inner: InMemoryTransport<Msg, String>,
    blocked: Arc<Mutex<BTreeSet<String>>>,
}

impl Net {
    /// Messages to `address` fail from now on.
    pub fn block(&self, address: &str) {
        self.blocked.lock().unwrap().insert(address.to_owned());
    }

    /// Messages to `address` are carried again.
    pub fn unblock(&self, address: &str) {
        self.blocked.lock().unwrap().remove(address);
    }
}

impl Transport<Msg, String> for Net {
    fn send(&self, to: &str, shard: &str, message: Msg) -> Result<(), Undelivered<Msg>> {
        if self.blocked.lock().unwrap().contains(to) {
            let error =
                TransportError::Unreachable { address: to.to_owned(), reason: "partitioned by the test".into() };
            return Err(Undelivered::new(error, message));
        }
        self.inner.send(to, shard, message)
    }

    fn ask(
        &self,
        to: &str,
        shard: &str,
        message: Msg,
        reply: Replier<String>,
    ) -> Result<(), Undelivered<(Msg, Replier<String>)>> {
        if self.blocked.lock().unwrap().contains(to) {
            let error =
                TransportError::Unreachable { address: to.to_owned(), reason: "partitioned by the test".into() };
            return Err(Undelivered::new(error, (message, reply)));
        }
        self.inner.ask(to, shard, message, reply)
    }

    fn attach(&self, inbox: Inbox<Msg, String>) {
        self.inner.attach(inbox);
    }

    fn detach(&self, inbox: &Inbox<Msg, String>) {
        self.inner.detach(inbox);
    }
}

/// A TCP proxy in front of the node that the test can cut (every
/// connection through it dropped, new ones refused) and heal.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    open: Arc<std::sync::atomic::AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accept = {
            let open = open.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(std::sync::atomic::Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    let mut connections = connections.lock().unwrap();
                    connections.retain(|t| !t.is_finished());
                    connections.push(task);
                }
            })
        };
        Proxy { addr, open, connections, accept }
    }

    /// `http://ADDR` of the proxy.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Accepts connections again.
    pub fn heal(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}
