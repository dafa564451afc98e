//! The [`Application`] a region serves: it starts, feeds and stops shards.

use std::collections::BTreeMap;
use std::future::Future;

/// What the region asks of the application. Implement it on a type holding
/// the application's state (shared with `Arc`s if other code needs it too).
///
/// For each shard, the region calls `start_shard` first, then `deliver` for
/// each message (and `answer` for each request) in order, then `stop_shard`; the calls of one shard never
/// overlap, and one run's calls are awaited one after another. Different
/// shards run concurrently.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use shardalloc_client::region::Application;
///
/// struct Counter(AtomicUsize);
///
/// impl Application for Counter {
///     type Message = String;
///     type Reply = ();
///     async fn start_shard(&self, shard: &str) {
///         println!("start {shard}");
///     }
///     async fn stop_shard(&self, shard: &str) {
///         println!("stop {shard}");
///     }
///     async fn deliver(&self, _shard: &str, _message: String) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// ```
pub trait Application: Send + Sync + 'static {
    /// The messages shards receive.
    type Message: Send + 'static;

    /// The answers to requests ([`RegionHandle::ask`](super::RegionHandle::ask));
    /// `()` for an application that answers none.
    type Reply: Send + 'static;

    /// Starts the shard here: called when the node names this region as its
    /// home and the lease is valid, before any delivery.
    fn start_shard(&self, shard: &str) -> impl Future<Output = ()> + Send;

    /// Starts the shard here at `epoch`: every change of the shard's home
    /// gives it a greater epoch, so a write to the application's own
    /// storage made only while no greater epoch is stored there cannot come
    /// from a stale run elsewhere (`examples/fenced.rs`). By default calls
    /// [`Application::start_shard`].
    fn start_shard_at(&self, shard: &str, epoch: u64) -> impl Future<Output = ()> + Send {
        let _ = epoch;
        self.start_shard(shard)
    }

    /// Stops the shard (a hand-off, an expired lease, leaving, shutting
    /// down). Called after every delivery queued before it. The region tells
    /// the node the shard stopped when this completes, or when the
    /// configured stop deadline passes (this future is then dropped).
    fn stop_shard(&self, shard: &str) -> impl Future<Output = ()> + Send;

    /// Delivers a message to a running shard.
    fn deliver(&self, shard: &str, message: Self::Message) -> impl Future<Output = ()> + Send;

    /// Answers a request to a running shard, in order with its deliveries
    /// (the asker waits for it). An `Err` fails the ask with its text
    /// ([`AskError::Failed`](super::AskError::Failed)). By default answers
    /// that this application answers no requests.
    fn answer(&self, shard: &str, request: Self::Message) -> impl Future<Output = Result<Self::Reply, String>> + Send {
        let _ = (shard, request);
        async { Err("this application answers no requests".to_owned()) }
    }

    /// A message the region took for `shard` was given up: its forwards to
    /// the shard's home kept failing past
    /// [`RegionConfig::forward_attempts`](super::RegionConfig::forward_attempts)
    /// or [`RegionConfig::forward_deadline`](super::RegionConfig::forward_deadline).
    /// Every message accepted by [`RegionHandle::send`](super::RegionHandle::send)
    /// is delivered or handed here. Called on the region's task: keep it
    /// quick. By default logs a warning.
    fn undelivered(&self, shard: &str, message: Self::Message, error: super::error::DeliveryError) {
        let _ = message;
        tracing::warn!(%shard, %error, "a message was given up");
    }

    /// Gauges sent with every heartbeat (`mem-used-ratio`, `cpu`, custom
    /// ones), handed to the strategy. Non-finite values are dropped by the
    /// node. Called on the region's task: keep it quick.
    fn metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }
}
