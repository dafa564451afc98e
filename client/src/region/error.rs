//! The region client's errors: [`RegionError`] for lifecycle and home
//! look-ups, [`SendError`] for messages the region cannot take.

use std::time::Duration;

/// Why a region operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// The [`RegionConfig`](super::RegionConfig) cannot work.
    #[error("invalid region configuration: {0}")]
    Config(String),
    /// [`Region::start`](super::Region::start) was called outside a Tokio runtime.
    #[error("a region must be started inside a Tokio runtime")]
    NoRuntime,
    /// The shard id is empty or too long.
    #[error("invalid shard id {shard:?}: {reason}")]
    InvalidShard {
        /// The shard id.
        shard: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The node would not give the shard a home (a limit).
    #[error("the node refused shard {shard}: {reason}")]
    ShardRefused {
        /// The shard.
        shard: String,
        /// The node's reason.
        reason: String,
    },
    /// The node refused the session or the registration (version, entity
    /// type, token, a stale incarnation, too many regions). The region keeps
    /// retrying with backoff.
    #[error("the node refused the region: {reason}")]
    Refused {
        /// The node's reason.
        reason: String,
    },
    /// The region left the cluster.
    #[error("the region has left the cluster")]
    Left,
    /// The region was shut down.
    #[error("the region has shut down")]
    ShutDown,
    /// The node did not confirm the leave in time; the region stopped its
    /// shards and closed anyway.
    #[error("the node did not confirm the leave within {0:?}; the region stopped its shards and closed anyway")]
    LeaveTimedOut(Duration),
}

/// Why [`RegionHandle::send`](super::RegionHandle::send) did not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The shard already has `limit` messages waiting (for its home, or for
    /// the application to take them).
    #[error("the buffer of shard {shard} is full ({limit} messages)")]
    BufferFull {
        /// The shard.
        shard: String,
        /// The per-shard limit.
        limit: usize,
    },
    /// The region holds `limit` buffered messages over all shards.
    #[error("the region's buffers are full ({limit} messages over all shards)")]
    TotalBufferFull {
        /// The region-wide limit.
        limit: usize,
    },
    /// The shard id is empty or too long.
    #[error("invalid shard id {shard:?}: {reason}")]
    InvalidShard {
        /// The shard id.
        shard: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The region has left or shut down.
    #[error("the region has stopped; it takes no more messages")]
    Stopped,
}

/// Checks a shard id: 1 to [`MAX_SHARD_ID_BYTES`](crate::api::MAX_SHARD_ID_BYTES) bytes.
pub(crate) fn check_shard(shard: &str) -> Result<(), String> {
    match shard.len() {
        0 => Err("a shard id is empty".to_owned()),
        n if n > crate::api::MAX_SHARD_ID_BYTES => {
            Err(format!("a shard id of {n} bytes is longer than {} bytes", crate::api::MAX_SHARD_ID_BYTES))
        }
        _ => Ok(()),
    }
}
