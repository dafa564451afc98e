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
    /// [`RegionHandle::drain_and_leave`](super::RegionHandle::drain_and_leave)
    /// ran out of its bound: the shards named still ran here (they were
    /// stopped then), or none did but the node had not let the region go.
    #[error("the region did not drain and leave within {bound:?}: {}", left_behind(.shards, .leave_asked))]
    DrainAndLeaveTimedOut {
        /// The bound.
        bound: Duration,
        /// The shards still running here when the bound passed.
        shards: Vec<String>,
        /// Whether the region had asked the node to let it go (`Leave`);
        /// false when the node could not be reached for it.
        leave_asked: bool,
    },
}

/// What a drain-and-leave left behind, in words.
fn left_behind(shards: &[String], leave_asked: &bool) -> String {
    const SHOWN: usize = 10;
    let waiting = if *leave_asked {
        "the node had not confirmed its leave"
    } else {
        "it had not reached the node to ask to leave"
    };
    if shards.is_empty() {
        return format!("it ran no shard any more, but {waiting}");
    }
    let mut names = shards.iter().take(SHOWN).map(String::as_str).collect::<Vec<_>>().join(", ");
    if shards.len() > SHOWN {
        names.push_str(&format!(" and {} more", shards.len() - SHOWN));
    }
    let count = if shards.len() == 1 { "1 shard".to_owned() } else { format!("{} shards", shards.len()) };
    format!("it still ran {count} ({names}), stopped there and then, and {waiting}")
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

/// Why a message the region took was never delivered: its forwards kept
/// failing (the transport could not carry it, or reported later that it did
/// not arrive), the node refused its shard, or the region stopped while it
/// waited for a home. Handed to the application with the message
/// ([`Application::undelivered`](super::Application::undelivered)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The shard's forwards failed `attempts` times in a row
    /// ([`CoreConfig::forward_attempts`](super::CoreConfig::forward_attempts)).
    #[error(
        "a message for shard {shard} was not delivered: {attempts} forwards in a row failed (the last to {to}: {reason})"
    )]
    AttemptsExhausted {
        /// The shard.
        shard: String,
        /// The home the last attempt went to.
        to: String,
        /// The failed attempts.
        attempts: u32,
        /// Why the last one failed.
        reason: String,
    },
    /// The shard's forwards kept failing for longer than
    /// [`CoreConfig::forward_deadline_ms`](super::CoreConfig::forward_deadline_ms).
    #[error(
        "a message for shard {shard} was not delivered: its forwards kept failing for {waited_ms} ms (the last to {to}: {reason})"
    )]
    DeadlinePassed {
        /// The shard.
        shard: String,
        /// The home the last attempt went to.
        to: String,
        /// How long since the first failure of the run.
        waited_ms: u64,
        /// Why the last attempt failed.
        reason: String,
    },
    /// The node refused the shard a home (a limit, a bad id): its waiting
    /// messages have nowhere to go.
    #[error("a message for shard {shard} was not delivered: the node refused the shard ({reason})")]
    ShardRefused {
        /// The shard.
        shard: String,
        /// The node's reason.
        reason: String,
    },
    /// The region left or shut down while the message waited for the
    /// shard's home.
    #[error("a message for shard {shard} was not delivered: the region stopped while it waited for the shard's home")]
    RegionStopped {
        /// The shard.
        shard: String,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_drain_and_leave_names_at_most_ten_shards_and_counts_the_rest() {
        let shards: Vec<String> = (1..=12).map(|i| format!("s{i}")).collect();
        let error = RegionError::DrainAndLeaveTimedOut { bound: Duration::from_secs(20), shards, leave_asked: true };
        assert_eq!(
            error.to_string(),
            "the region did not drain and leave within 20s: it still ran 12 shards (s1, s2, s3, s4, s5, s6, s7, s8, \
             s9, s10 and 2 more), stopped there and then, and the node had not confirmed its leave"
        );
        let one = RegionError::DrainAndLeaveTimedOut {
            bound: Duration::from_secs(1),
            shards: vec!["42".into()],
            leave_asked: false,
        };
        assert!(one.to_string().contains("it still ran 1 shard (42)"), "{one}");
    }
}
