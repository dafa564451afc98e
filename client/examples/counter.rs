//! A tiny application: one region that counts the messages each of its
//! shards receives, printing starts, stops, homes and updates.
//!
//! ```text
//! cargo run -p shardalloc-client --example counter -- http://127.0.0.1:7878 cart region-a
//! ```
//!
//! Set `SHARDALLOC_REGION_TOKEN` if the node wants a region token. The
//! region sends a few messages to shards 1, 2 and 3, then runs until Ctrl-C
//! and leaves gracefully. Other regions are not reachable from this
//! process (the transport is in-memory), so run it as the only region of
//! its type, or watch its messages to other regions wait and retry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use shardalloc_client::region::{Application, InMemoryTransport, Region, RegionConfig, RegionHandle};

/// Counts messages per shard.
#[derive(Default)]
struct Counter {
    counts: Mutex<HashMap<String, u64>>,
}

impl Application for Counter {
    type Message = String;
    type Reply = ();

    async fn start_shard(&self, shard: &str) {
        self.counts.lock().unwrap().insert(shard.to_owned(), 0);
        println!("start shard {shard}");
    }

    async fn stop_shard(&self, shard: &str) {
        let count = self.counts.lock().unwrap().remove(shard).unwrap_or(0);
        println!("stop shard {shard} after {count} messages");
    }

    async fn deliver(&self, shard: &str, message: String) {
        let mut counts = self.counts.lock().unwrap();
        let count = counts.entry(shard.to_owned()).or_default();
        *count += 1;
        println!("shard {shard} got {message:?} (message {count})");
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [node, entity_type, address] = args.as_slice() else {
        eprintln!("usage: counter NODE_URL ENTITY_TYPE REGION_ADDRESS");
        eprintln!("   e.g. counter http://127.0.0.1:7878 cart region-a");
        std::process::exit(2);
    };
    let mut config = RegionConfig::new(node, entity_type, address);
    config.token = std::env::var("SHARDALLOC_REGION_TOKEN").ok();
    config.app_version = env!("CARGO_PKG_VERSION").to_owned();
    let region: RegionHandle<String> = Region::start(config, Counter::default(), InMemoryTransport::new())?;

    let mut updates = region.updates();
    tokio::spawn(async move {
        while let Ok(update) = updates.recv().await {
            println!("update: {update:?}");
        }
    });

    println!("connecting region {address} ({entity_type}) to {node}");
    tokio::time::timeout(Duration::from_secs(30), region.wait_registered()).await??;
    println!("registered as incarnation {}", region.incarnation());

    for shard in ["1", "2", "3"] {
        let home = tokio::time::timeout(Duration::from_secs(30), region.home_of(shard)).await??;
        println!("shard {shard} lives on {home}");
        for n in 1..=3 {
            region.send(shard, format!("hello {n}"))?;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("running here: {:?}", region.running_shards());

    println!("Ctrl-C to leave");
    tokio::signal::ctrl_c().await?;
    println!("leaving");
    region.leave().await?;
    println!("left");
    Ok(())
}
