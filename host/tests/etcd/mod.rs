//! Real etcd servers for the tests, on 127.0.0.1 with their data on tmpfs
//! and the election timing the HA issue asks for (stable on two busy cores).

#![allow(dead_code, reason = "shared by several test files, each using a part")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long an etcd member may take to answer `/health` after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One etcd member, killed when dropped.
pub struct Etcd {
    /// Its client URL.
    pub url: String,
    name: String,
    peer_url: String,
    initial_cluster: String,
    dir: PathBuf,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn tmpfs() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_owned() } else { std::env::temp_dir() }
}

impl Etcd {
    /// A one-member cluster.
    pub fn start() -> Etcd {
        Self::cluster(1).pop().unwrap()
    }

    /// A cluster of `n` members, every one started and healthy.
    pub fn cluster(n: usize) -> Vec<Etcd> {
        let members: Vec<(String, u16, u16)> = (0..n).map(|i| (format!("m{i}"), free_port(), free_port())).collect();
        let initial_cluster = members
            .iter()
            .map(|(name, _, peer)| format!("{name}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut started: Vec<Etcd> = members
            .into_iter()
            .map(|(name, client, peer)| {
                let tmp = tempfile::Builder::new().prefix("shardalloc-etcd-").tempdir_in(tmpfs()).unwrap();
                let mut etcd = Etcd {
                    url: format!("http://127.0.0.1:{client}"),
                    name,
                    peer_url: format!("http://127.0.0.1:{peer}"),
                    initial_cluster: initial_cluster.clone(),
                    dir: tmp.path().to_owned(),
                    child: None,
                    _tmp: Some(tmp),
                };
                etcd.spawn("new");
                etcd
            })
            .collect();
        for etcd in &mut started {
            etcd.wait_healthy();
        }
        started
    }

    fn spawn(&mut self, state: &str) {
        let log = std::fs::File::create(self.dir.join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &self.url, "--advertise-client-urls", &self.url])
            .args(["--listen-peer-urls", &self.peer_url, "--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", &self.initial_cluster, "--initial-cluster-state", state])
            .args(["--heartbeat-interval", "250", "--election-timeout", "2500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start etcd ({e}): install it with `cargo xtask test` (it installs Debian's \
                     etcd-server) or `apt-get install etcd-server`"
                )
            });
        self.child = Some(child);
    }

    fn healthy(&self) -> bool {
        self.get("/health").contains("\"health\":\"true\"")
    }

    /// True when this member is etcd's raft leader (its `/metrics` say so).
    pub fn is_raft_leader(&self) -> bool {
        self.get("/metrics").lines().any(|line| line.trim() == "etcd_server_is_leader 1")
    }

    fn get(&self, path: &str) -> String {
        let address = self.url.trim_start_matches("http://");
        let Ok(mut stream) = TcpStream::connect(address) else { return String::new() };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
        if stream.write_all(request.as_bytes()).is_err() {
            return String::new();
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    /// Waits for the member to answer healthy (a quorum is up).
    pub fn wait_healthy(&mut self) {
        let started = Instant::now();
        while !self.healthy() {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                panic!("etcd {} exited ({status}):\n{log}", self.name);
            }
            assert!(started.elapsed() < START_TIMEOUT, "etcd {} not healthy after {START_TIMEOUT:?}", self.name);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the member (its data stays).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed member again on the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn("existing");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
