//! A region on the built-in transport ([`PeerTransport`]), driven over
//! standard input and output with one JSON object a line, as the test that
//! serves one type with regions in Rust, TypeScript and Python drives the
//! regions of each language (`clients/python/tests_node/test_mixed_node.py`):
//!
//! ```text
//! cargo run -p shardalloc-client --example peer_region -- http://127.0.0.1:7878 TOKEN
//! > {"address":"127.0.0.1:40123"}              registered, reachable there
//! < {"send":"m3","n":7}                         send {"from":"rust","n":7} to shard m3
//! < {"ask":"m3","n":8,"timeoutMs":5000}         ask shard m3 {"from":"rust","n":8}
//! > {"deliver":"m3","n":7}                      a message (or request) delivered here
//! > {"answer":"m3","n":8,"by":"python"}         the answer to an ask: {"by":…,"n":…}
//! > {"askFailed":"m3","n":8,"error":"…"}        an ask that got no answer
//! > {"givenUp":"m3","n":7,"error":"…"}          a message given up
//! ```
//!
//! It shuts down when its input ends.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

use shardalloc_client::region::{Application, DeliveryError, PeerConfig, PeerTransport, Region, RegionConfig};

/// The messages regions of every language exchange in the test.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Msg {
    from: String,
    n: u64,
}

/// The answer to a request, in every language of the test.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Answer {
    by: String,
    n: u64,
}

/// Prints what happens to messages.
struct Printer;

impl Application for Printer {
    type Message = Msg;
    type Reply = Answer;

    async fn start_shard(&self, _shard: &str) {}

    async fn stop_shard(&self, _shard: &str) {}

    async fn deliver(&self, shard: &str, message: Msg) {
        println!("{}", json!({"deliver": shard, "n": message.n}));
    }

    async fn answer(&self, shard: &str, request: Msg) -> Result<Answer, String> {
        println!("{}", json!({"deliver": shard, "n": request.n}));
        Ok(Answer { by: "rust".into(), n: request.n })
    }

    fn undelivered(&self, shard: &str, message: Msg, error: DeliveryError) {
        println!("{}", json!({"givenUp": shard, "n": message.n, "error": error.to_string()}));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let node = args.next().ok_or("usage: peer_region NODE_URL [TOKEN]")?;
    let token = args.next();
    let peer = PeerConfig { entity_type: "cart".into(), address: String::new(), incarnation: 1, token };
    let transport = PeerTransport::bind(peer, "127.0.0.1:0").await?;
    let mut config = RegionConfig::new(node, "cart", transport.address());
    config.home_retry = Duration::from_millis(300);
    let region = Region::start(config, Printer, transport.clone())?;
    region.wait_registered().await?;
    println!("{}", json!({"address": transport.address()}));
    // Standard input is read on a thread of its own; its lines come here.
    let (lines, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        let command: serde_json::Value = serde_json::from_str(&line)?;
        if let (Some(shard), Some(n)) = (command["send"].as_str(), command["n"].as_u64()) {
            region.send(shard, Msg { from: "rust".into(), n })?;
        }
        if let (Some(shard), Some(n)) = (command["ask"].as_str(), command["n"].as_u64()) {
            let timeout = Duration::from_millis(command["timeoutMs"].as_u64().unwrap_or(5_000));
            // Routed now, in input order; answered whenever it is.
            let asked = region.ask(shard, Msg { from: "rust".into(), n }, timeout);
            let shard = shard.to_owned();
            tokio::spawn(async move {
                match asked.await {
                    Ok(answer) => println!("{}", json!({"answer": shard, "n": n, "by": answer.by})),
                    Err(error) => println!("{}", json!({"askFailed": shard, "n": n, "error": error.to_string()})),
                }
            });
        }
    }
    region.shutdown().await;
    Ok(())
}
