//! `cargo xtask demo --ha`: a three-member etcd, three nodes sharing it and
//! three simulated regions given every node, on 127.0.0.1; prints who
//! leads and the commands to kill the leader and watch the failover.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::{Child, cargo, packages, run, setup, start_regions, target_dir, wait_for_line};

/// etcd members: client port, peer port.
const MEMBERS: [(u16, u16); 3] = [(12379, 12380), (22379, 22380), (32379, 32380)];
/// The nodes' ports.
const NODES: [u16; 3] = [7871, 7872, 7873];

fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

pub(crate) fn demo_ha(root: &Path) -> anyhow::Result<()> {
    setup()?;
    packages::ensure("demo --ha")?;
    run(root, &cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    let binary = target_dir(root).join("debug/shardalloc");
    let dir = target_dir(root).join("demo/ha");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let cluster: Vec<String> =
        MEMBERS.iter().enumerate().map(|(i, (_, peer))| format!("e{i}=http://127.0.0.1:{peer}")).collect();
    let mut children = Vec::new();
    for (i, (client, peer)) in MEMBERS.iter().enumerate() {
        let log = std::fs::File::create(dir.join(format!("etcd-e{i}.log")))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        children.push(
            Child::spawn(
                Command::new("etcd")
                    .args(["--name", &format!("e{i}"), "--data-dir"])
                    .arg(dir.join(format!("etcd-e{i}")))
                    .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                    .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
                    .args(["--initial-cluster", &cluster.join(","), "--initial-cluster-state", "new"])
                    .args(["--heartbeat-interval", "250", "--election-timeout", "2500"])
                    .stdout(Stdio::null())
                    .stderr(log),
            )
            .context("start etcd")?,
        );
    }
    let started = Instant::now();
    while !MEMBERS.iter().all(|(client, _)| healthy(*client)) {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("etcd is not healthy after 60 s; see {}/etcd-e*.log (are ports 12379-32380 free?)", dir.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let etcd: Vec<String> = MEMBERS.iter().map(|(client, _)| format!("http://127.0.0.1:{client}")).collect();
    let etcd = etcd.join(",");
    // The secret the nodes sign their leader claims with (the same file for
    // all three; a real cluster keeps it in a secret store).
    let secret = dir.join("cluster-secret");
    std::fs::write(&secret, format!("demo-{:032x}\n", std::process::id() as u128 * 0x9e37_79b9_7f4a_7c15))?;
    let mut pids = Vec::new();
    let mut node_lines = Vec::new();
    for (i, port) in NODES.iter().enumerate() {
        let listen = format!("127.0.0.1:{port}");
        let mut node = Child::spawn(
            Command::new(&binary)
                .args(["serve", "--listen", &listen, "--advertise", &format!("http://{listen}")])
                .args(["--node-name", &format!("n{}", i + 1), "--etcd", &etcd, "--type", "cart"])
                .arg("--cluster-secret-file")
                .arg(&secret)
                .args(["--rebalance-interval-ms", "2000", "--heartbeat-interval-ms", "300"])
                .arg("--data")
                .arg(dir.join(format!("data-n{}", i + 1)))
                .env_remove("SHARDALLOC_ADMIN_TOKEN")
                .stdout(Stdio::piped()),
        )
        .context("start a node")?;
        let mut lines = std::io::BufReader::new(node.take_stdout().expect("piped")).lines();
        wait_for_line(&mut lines, "a node", |line| line.starts_with("shardalloc listening on ").then(String::new))
            .with_context(|| format!("is {listen} already in use?"))?;
        pids.push(node.id());
        node_lines.push(lines);
        children.push(node);
    }
    let urls: Vec<String> = NODES.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
    let all = urls.join(",");
    let (regions, region_lines) = start_regions(&binary, &all, &[])?;
    let bin = binary.display();
    println!();
    println!("Dashboard: {}/ui/  (any node serves it; the stream follows the leader)", urls[0]);
    println!();
    println!("Three etcd members ({etcd}), three shardalloc nodes and three simulated regions are running.");
    for (i, url) in urls.iter().enumerate() {
        println!("  n{}: {url}  (pid {})", i + 1, pids[i]);
    }
    println!();
    println!("Try:");
    println!("  # 1. who leads (any node answers)");
    println!("  curl -s {}/v1/cluster/leader", urls[1]);
    println!("  # 2. kill the leader (its pid above), then watch another node take over within ~3 s");
    println!("  kill -9 PID_OF_THE_LEADER");
    println!("  watch -n 0.5 curl -s {}/v1/cluster/leader", urls[2]);
    println!("  # 3. write through any node: followers forward to the leader");
    println!("  {bin} placements set --node {all} cart sim-2 7");
    println!("  curl -s {}/v1/cluster/shards/cart/shards/7", urls[0]);
    println!();
    println!("Logs of etcd in {}. Press Ctrl-C to stop everything.", dir.display());
    std::thread::spawn(move || region_lines.for_each(drop));
    let mut readers = Vec::new();
    for (i, lines) in node_lines.into_iter().enumerate() {
        readers.push(std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                println!("[n{}] {line}", i + 1);
            }
        }));
    }
    for reader in readers {
        let _ = reader.join();
    }
    drop(regions);
    drop(children);
    Ok(())
}
