//! Fencing writes with shard epochs: a write a stale region cannot make.
//!
//! ```text
//! cargo run -p shardalloc-client --example fenced -- http://127.0.0.1:7878 cart
//! ```
//!
//! Every change of a shard's home gives the shard a greater epoch, and the
//! region that starts it is told the epoch (`Application::start_shard_at`).
//! An application that writes to its own storage only where no greater
//! epoch has written yet (a conditional write: `UPDATE … WHERE epoch <= ?`,
//! an etcd or DynamoDB compare, a Postgres row version) cannot be
//! overwritten by a run that lost the shard and has not noticed: a process
//! paused by a long GC or cut off from the node, still believing it owns
//! the shard.
//!
//! Here two regions share one [`Ledger`] (the application's storage, in
//! memory for the example). Region `fenced-a` starts the shard `account-1`
//! and deposits into it; then it drains and leaves, the shard moves to
//! `fenced-b` at a greater epoch and `fenced-b` deposits too. Last, the run
//! that `fenced-a` had (its epoch kept, as a paused process keeps it) tries
//! to write once more: the ledger refuses it, and the balance stays what
//! `fenced-b` wrote. The type must exist on the node with no other region
//! serving it (the demo's `cart` does, with no regions connected).
//!
//! Set `SHARDALLOC_REGION_TOKEN` if the node wants a region token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardalloc_client::region::{Application, InMemoryTransport, Region, RegionConfig, RegionHandle};

/// The shard the example moves.
pub const SHARD: &str = "account-1";

/// How long each step may take before the example gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// A write the ledger refused: a greater epoch wrote the row already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    /// The epoch the refused write was made at.
    pub attempted: u64,
    /// The epoch of the row's last write.
    pub stored: u64,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a write at epoch {} was refused: epoch {} wrote already", self.attempted, self.stored)
    }
}

impl std::error::Error for Stale {}

/// The application's own storage: each shard's balance and the epoch of
/// its last write.
#[derive(Debug, Default)]
pub struct Ledger {
    rows: Mutex<HashMap<String, Row>>,
}

/// A ledger row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Row {
    /// The balance.
    pub balance: i64,
    /// The epoch that wrote it.
    pub epoch: u64,
}

impl Ledger {
    /// Adds `amount` to the shard's balance, at `epoch`: refused when a
    /// greater epoch wrote the row. Read and write are one step, as a
    /// database's conditional update is.
    pub fn deposit(&self, shard: &str, epoch: u64, amount: i64) -> Result<Row, Stale> {
        let mut rows = self.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let row = rows.entry(shard.to_owned()).or_default();
        if row.epoch > epoch {
            return Err(Stale { attempted: epoch, stored: row.epoch });
        }
        *row = Row { balance: row.balance + amount, epoch };
        Ok(*row)
    }

    /// The shard's row.
    pub fn row(&self, shard: &str) -> Row {
        self.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(shard).copied().unwrap_or_default()
    }
}

/// A region's accounts: the epoch of each shard it runs, and the ledger.
pub struct Accounts {
    ledger: Arc<Ledger>,
    epochs: Mutex<HashMap<String, u64>>,
    refused: Mutex<Vec<Stale>>,
}

impl Accounts {
    fn new(ledger: Arc<Ledger>) -> Arc<Self> {
        Arc::new(Accounts { ledger, epochs: Mutex::default(), refused: Mutex::default() })
    }

    /// The epoch this region last started `shard` at, kept after it
    /// stopped: what a paused process still holds.
    pub fn epoch(&self, shard: &str) -> Option<u64> {
        self.epochs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(shard).copied()
    }

    /// Deposits into `shard` at the epoch this region started it at.
    pub fn deposit(&self, shard: &str, amount: i64) -> Result<Row, Stale> {
        let epoch = self.epoch(shard).unwrap_or(0);
        self.ledger.deposit(shard, epoch, amount).inspect_err(|stale| {
            self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(*stale);
        })
    }
}

/// The [`Application`] of a region: deposits the amounts it is sent.
struct Teller(Arc<Accounts>);

impl Application for Teller {
    type Message = i64;
    type Reply = ();

    async fn start_shard(&self, shard: &str) {
        self.start_shard_at(shard, 0).await
    }

    async fn start_shard_at(&self, shard: &str, epoch: u64) {
        self.0.epochs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(shard.to_owned(), epoch);
        println!("started {shard} at epoch {epoch}");
    }

    async fn stop_shard(&self, shard: &str) {
        // The epoch is kept on purpose: a stale run is one that still
        // believes it holds the shard.
        println!("stopped {shard}");
    }

    async fn deliver(&self, shard: &str, amount: i64) {
        match self.0.deposit(shard, amount) {
            Ok(row) => println!("{shard}: deposited {amount} at epoch {}, balance {}", row.epoch, row.balance),
            Err(stale) => println!("{shard}: {stale}"),
        }
    }
}

/// What the example saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The epoch `fenced-a` ran the shard at.
    pub first: u64,
    /// The epoch `fenced-b` runs it at.
    pub second: u64,
    /// The stale run's write, refused.
    pub refused: Stale,
    /// The shard's row at the end.
    pub row: Row,
}

/// A region of `entity_type` at `address` on `node`, registered.
async fn region(
    node: &str,
    entity_type: &str,
    address: &str,
    ledger: &Arc<Ledger>,
    tweak: &dyn Fn(&mut RegionConfig),
) -> Result<(RegionHandle<i64>, Arc<Accounts>), Box<dyn std::error::Error>> {
    let mut config = RegionConfig::new(node, entity_type, address);
    config.token = std::env::var("SHARDALLOC_REGION_TOKEN").ok();
    tweak(&mut config);
    let accounts = Accounts::new(ledger.clone());
    let region = Region::start(config, Teller(accounts.clone()), InMemoryTransport::new())?;
    tokio::time::timeout(PATIENCE, region.wait_registered()).await??;
    println!("{address} registered");
    Ok((region, accounts))
}

/// Waits until `region` runs [`SHARD`] and `accounts` saw the start.
async fn running(region: &RegionHandle<i64>, accounts: &Accounts) -> Result<u64, Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let home = tokio::time::timeout(PATIENCE, region.home_of(SHARD)).await??;
        if home == region.address()
            && let (Some(epoch), Some(seen)) = (region.epoch_of(SHARD), accounts.epoch(SHARD))
            && epoch == seen
        {
            return Ok(epoch);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{SHARD} did not start on {} (its home: {home})", region.address()).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the ledger's row of [`SHARD`] has `balance`.
async fn balance(ledger: &Ledger, balance: i64) -> Result<Row, Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let row = ledger.row(SHARD);
        if row.balance == balance {
            return Ok(row);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the balance of {SHARD} stayed {} (wanted {balance})", row.balance).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the example against the node at `node`, on `entity_type`, with
/// `tweak` applied to both regions' configs.
pub async fn run(
    node: &str,
    entity_type: &str,
    tweak: &dyn Fn(&mut RegionConfig),
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let ledger = Arc::new(Ledger::default());
    let (a, accounts_a) = region(node, entity_type, "fenced-a", &ledger, tweak).await?;
    let first = running(&a, &accounts_a).await?;
    a.send(SHARD, 100)?;
    balance(&ledger, 100).await?;

    let (b, accounts_b) = region(node, entity_type, "fenced-b", &ledger, tweak).await?;
    println!("fenced-a drains and leaves: {SHARD} moves");
    tokio::time::timeout(PATIENCE, a.drain_and_leave()).await??;
    let second = running(&b, &accounts_b).await?;
    b.send(SHARD, 50)?;
    let row = balance(&ledger, 150).await?;

    // fenced-a's run, woken from a pause, writes with the epoch it had.
    let refused = match accounts_a.deposit(SHARD, -1_000) {
        Err(stale) => stale,
        Ok(row) => return Err(format!("the stale run wrote: {row:?}").into()),
    };
    println!("the stale run of fenced-a: {refused}");
    let outcome = Outcome { first, second, refused, row: ledger.row(SHARD) };
    if outcome.row != row {
        return Err(format!("the row changed after the refusal: {:?}", outcome.row).into());
    }
    b.leave().await?;
    Ok(outcome)
}

#[allow(dead_code, reason = "a test runs `run` (host/tests/node_epochs.rs), not `main`")]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [node, entity_type] = args.as_slice() else {
        eprintln!("usage: fenced NODE_URL ENTITY_TYPE");
        eprintln!("   e.g. fenced http://127.0.0.1:7878 cart");
        std::process::exit(2);
    };
    let outcome = run(node, entity_type, &|_| {}).await?;
    println!(
        "{SHARD} ran at epoch {} on fenced-a, then at epoch {} on fenced-b; balance {} written at epoch {}",
        outcome.first, outcome.second, outcome.row.balance, outcome.row.epoch
    );
    Ok(())
}
