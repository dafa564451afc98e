//! The nodes a soak runs against: one node on its own redb store, or three
//! nodes on one real etcd whose leader the soak kills (SIGKILL) and starts
//! again a few seconds later on the same port.

use std::time::{Duration, Instant};

use shardalloc_client::admin::AdminClient;

use super::etcd::Etcd;
use super::node::{self, Node};

/// Nodes of the cluster on etcd.
const NODES: usize = 3;
/// How long a killed leader stays down before it starts again.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// How long a node may take to answer `/metrics` before it counts as silent.
const ASK_WITHIN: Duration = Duration::from_secs(2);

pub struct Fleet {
    pub nodes: Vec<Node>,
    /// When each killed node starts again.
    restart_at: Vec<Option<Instant>>,
    /// Leaders killed so far.
    pub kills: u64,
    _etcd: Option<Etcd>,
}

impl Fleet {
    /// One node on its own store, with the tests' short timings.
    pub async fn one() -> Fleet {
        // Regions reach it through proxies on other ports: their Host.
        let node = Node::start(&node::fast_args(&["--allowed-host", "127.0.0.1"])).await;
        Fleet { nodes: vec![node], restart_at: vec![None], kills: 0, _etcd: None }
    }

    /// Three nodes on one etcd member, once one of them leads.
    pub async fn on_etcd() -> Fleet {
        let etcd = Etcd::start();
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let listen = format!("127.0.0.1:{}", node::free_port());
            let args = node::ha_args(&etcd.url, &format!("http://{listen}"), &format!("n{i}"));
            nodes.push(Node::start_on(&listen, &args.iter().map(String::as_str).collect::<Vec<_>>()).await);
        }
        let fleet = Fleet { restart_at: vec![None; nodes.len()], nodes, kills: 0, _etcd: Some(etcd) };
        node::wait_for("a node to lead", Duration::from_secs(60), async || fleet.leader().await).await;
        fleet
    }

    /// True when the nodes run on etcd (and the leader is killed now and then).
    pub fn on_etcd_store(&self) -> bool {
        self._etcd.is_some()
    }

    /// Every node's URL, comma-separated: what regions are given.
    pub fn urls(&self) -> String {
        self.nodes.iter().map(|n| n.base.clone()).collect::<Vec<_>>().join(",")
    }

    /// The running node `pick` chooses among the running ones.
    pub fn some_node(&self, pick: u64) -> &Node {
        let running: Vec<&Node> = self.nodes.iter().filter(|n| n.running()).collect();
        running[pick as usize % running.len()]
    }

    /// An admin client of a running node (followers forward to the leader).
    pub fn admin(&self, pick: u64) -> AdminClient {
        self.some_node(pick).admin()
    }

    /// A running node's `/metrics`, or `None` when it does not answer in time.
    pub async fn metrics(&self, i: usize) -> Option<String> {
        let node = &self.nodes[i];
        if !node.running() {
            return None;
        }
        let answer = node.http().get(node.url("/metrics")).timeout(ASK_WITHIN).send().await.ok()?;
        answer.text().await.ok()
    }

    /// The node whose metrics say it leads (the only node, without etcd).
    pub async fn leader(&self) -> Option<usize> {
        if !self.on_etcd_store() {
            return Some(0);
        }
        for i in 0..self.nodes.len() {
            if self.metrics(i).await.is_some_and(|m| m.lines().any(|l| l == "shardalloc_leader 1")) {
                return Some(i);
            }
        }
        None
    }

    /// Kills the leader, if one is known and the nodes run on etcd; it
    /// starts again after [`DOWN_FOR`] (see [`Fleet::restart_due`]).
    pub async fn kill_leader(&mut self) -> Option<usize> {
        if !self.on_etcd_store() || self.restart_at.iter().any(Option::is_some) {
            return None;
        }
        let leader = self.leader().await?;
        self.nodes[leader].kill();
        self.restart_at[leader] = Some(Instant::now() + DOWN_FOR);
        self.kills += 1;
        Some(leader)
    }

    /// Starts again every killed node whose time is up; returns those nodes.
    pub async fn restart_due(&mut self) -> Vec<usize> {
        let mut restarted = Vec::new();
        for i in 0..self.nodes.len() {
            if self.restart_at[i].is_some_and(|at| Instant::now() >= at) {
                self.nodes[i].restart().await;
                self.restart_at[i] = None;
                restarted.push(i);
            }
        }
        restarted
    }
}
