//! The node under test: `shardalloc serve` started on `127.0.0.1:0` over a
//! fresh data directory, pinned with `taskset` to the cores given, with its
//! CPU time and resident memory read from `/proc`. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The admin token the node is started with (loopback only, so a fixed one).
pub const ADMIN_TOKEN: &str = "busy-host-benchmark-admin-token-0123456789abcdef";

/// The entity type every load uses.
pub const TYPE: &str = "bench";

/// Lines of the node's output kept for a failure's report.
const LOG_LINES: usize = 200;

/// A running node.
pub struct Node {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
    ticks_per_second: f64,
}

/// The node's CPU time and the wall time at one moment.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    at: Instant,
    cpu_seconds: f64,
}

impl Node {
    /// Starts `binary serve` with `cpus` (a `taskset -c` list; `None`: not
    /// pinned) over `data`, and waits for its address.
    pub fn start(binary: &Path, cpus: Option<&str>, data: &Path) -> anyhow::Result<Node> {
        let mut command = match cpus {
            Some(cpus) => {
                let mut command = Command::new("taskset");
                command.args(["-c", cpus]).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SHARDALLOC_") {
                command.env_remove(&key);
            }
        }
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--type", TYPE, "--admin-token", ADMIN_TOKEN, "--data"])
            .arg(data)
            .env("SHARDALLOC_LOG", "info,tower_http=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().with_context(|| format!("could not start {command:?}"))?;
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().context("the node's stdout")?;
        let stderr = child.stderr.take().context("the node's stderr")?;
        for (stream, is_stdout) in
            [(Box::new(stdout) as Box<dyn std::io::Read + Send>, true), (Box::new(stderr), false)]
        {
            let log = log.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if is_stdout && let Some(rest) = line.strip_prefix("shardalloc listening on http://") {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                    }
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    if log.len() >= LOG_LINES {
                        log.remove(0);
                    }
                    log.push(line);
                }
            });
        }
        let ticks_per_second = clock_ticks();
        let mut node = Node { child, base: String::new(), log, ticks_per_second };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => node.base = format!("http://{addr}"),
            Err(_) => bail!("the node did not print its address within 60 s; its output:\n{}", node.log_tail()),
        }
        Ok(node)
    }

    /// The node's process id (`taskset` execs the node: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the node printed.
    pub fn log_tail(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }

    /// Fails when the node has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the node exited ({status}); its output:\n{}", self.log_tail());
        }
        Ok(())
    }

    /// The node's CPU time so far.
    pub fn cpu(&self) -> CpuSample {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the command (which may hold spaces) in parentheses.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the `)`.
        let ticks: f64 = [11, 12].iter().filter_map(|i| fields.get(*i)?.parse::<f64>().ok()).sum();
        CpuSample { at: Instant::now(), cpu_seconds: ticks / self.ticks_per_second }
    }

    /// The node's resident memory in MiB.
    pub fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    }
}

impl CpuSample {
    /// The share of one core the node used from `self` to `later`, in percent.
    pub fn percent_until(&self, later: &CpuSample) -> f64 {
        let wall = later.at.duration_since(self.at).as_secs_f64();
        if wall <= 0.0 { 0.0 } else { 100.0 * (later.cpu_seconds - self.cpu_seconds) / wall }
    }
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
