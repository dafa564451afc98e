//! The coordinator's settings, their defaults and their validation.

use super::freeze::MaintenanceRule;
use crate::strategy::churn::ChurnLimits;

/// Settings of one entity type's coordinator. Every duration is in
/// milliseconds of the driver's clock (the `now` carried by events).
///
/// Every collection the coordinator keeps is bounded here; see each
/// `max_*` field.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// How often regions should heartbeat (told to them at registration).
    pub heartbeat_interval_ms: u64,
    /// A region that has not heartbeated for this long becomes unreachable.
    pub unreachable_after_ms: u64,
    /// An unreachable region is removed (its shards re-homed) this long after
    /// it became unreachable, i.e. `unreachable_after_ms + remove_after_ms`
    /// after its last heartbeat.
    pub remove_after_ms: u64,
    /// The lease a region gets with every registration and heartbeat
    /// acknowledgement, counted by the region from when it sent the
    /// heartbeat. A region stops all its shards when its lease runs out.
    /// Must be shorter than `unreachable_after_ms + remove_after_ms`.
    pub lease_ms: u64,
    /// Deadline of every hand-off step (waiting for acknowledgements,
    /// waiting for the owner to stop the shard).
    pub handoff_timeout_ms: u64,
    /// How long a hand-off waits for one region's `BeginHandOffAck`: a region
    /// silent this long counts as unreachable for that hand-off, which goes
    /// on without it (the owner must still stop the shard). A value at or
    /// above `handoff_timeout_ms` turns this off: the step's deadline comes
    /// first and ends the hand-off.
    pub handoff_ack_timeout_ms: u64,
    /// Rebalance runs on the first tick at least this long after the last one.
    pub rebalance_interval_ms: u64,
    /// Most hand-offs a rebalance starts in one tick (strategy, placements
    /// and operator requests together).
    pub max_rebalance_per_tick: usize,
    /// Most hand-offs in flight at once, whatever started them.
    pub max_handoffs_in_flight: usize,
    /// Most hand-offs in flight from one leaving or draining region.
    pub drain_batch: usize,
    /// Allocation waits until this many regions (not proxy-only) have
    /// registered; requests are held until then.
    pub min_regions: usize,
    /// How long a removed placement's tombstone is kept, so a late write
    /// with an older stamp cannot bring it back.
    pub tombstone_retention_ms: u64,
    /// Most registered regions (proxies included).
    pub max_regions: usize,
    /// Most shards with a home; requests for new shards beyond it are refused.
    pub max_shards: usize,
    /// Most placements (live ones plus tombstones).
    pub max_placements: usize,
    /// Most shards waiting for a home with requesters held.
    pub max_pending_shards: usize,
    /// Most requesters held per waiting shard (they retry when dropped).
    pub max_requesters_per_shard: usize,
    /// Most shards queued for the next rebalance by operators.
    pub max_queued_rebalance: usize,
    /// The half-life of the moving average the coordinator keeps of each
    /// shard's reported load: a report covering this long weighs as much as
    /// everything before it. Dicer's default, 2 minutes, is ours.
    pub load_half_life_ms: u64,
    /// How often the smoothed loads that changed are written to the store
    /// (one batch for all of them), on the first tick this long after the
    /// last write. A restart or a failover loses at most this much smoothing.
    pub load_save_interval_ms: u64,
    /// The limits on every rebalance answer of the strategy (moves per
    /// round, cooldown, round interval); all off by default.
    pub churn: ChurnLimits,
    /// When the type freezes itself because too many regions were lost
    /// (`freeze.rs`).
    pub maintenance: MaintenanceRule,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            heartbeat_interval_ms: 1_000,
            unreachable_after_ms: 5_000,
            remove_after_ms: 10_000,
            lease_ms: 10_000,
            handoff_timeout_ms: 60_000,
            handoff_ack_timeout_ms: 5_000,
            rebalance_interval_ms: 10_000,
            max_rebalance_per_tick: 20,
            max_handoffs_in_flight: 100,
            drain_batch: 5,
            min_regions: 1,
            tombstone_retention_ms: 24 * 3600 * 1000,
            max_regions: 4096,
            max_shards: 1_000_000,
            max_placements: 1_000_000,
            max_pending_shards: 100_000,
            max_requesters_per_shard: 1024,
            max_queued_rebalance: 100_000,
            load_half_life_ms: 120_000,
            load_save_interval_ms: 30_000,
            churn: ChurnLimits::default(),
            maintenance: MaintenanceRule::default(),
        }
    }
}

/// The settings one entity type may have apart from the node's
/// (`[types.NAME]` in the settings file): each one set here replaces the
/// node's [`Config`] value for that type only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeSettings {
    /// [`Config::load_half_life_ms`] for this type.
    pub load_half_life_ms: Option<u64>,
    /// [`ChurnLimits::max_moves_per_round`] for this type.
    pub max_moves_per_round: Option<usize>,
    /// [`ChurnLimits::max_moves_fraction`] for this type.
    pub max_moves_fraction: Option<f64>,
    /// [`ChurnLimits::move_cooldown_ms`] for this type.
    pub move_cooldown_ms: Option<u64>,
    /// [`ChurnLimits::min_round_interval_ms`] for this type.
    pub min_round_interval_ms: Option<u64>,
    /// [`MaintenanceRule::enabled`] for this type.
    pub maintenance: Option<bool>,
    /// [`MaintenanceRule::window_ms`] for this type.
    pub maintenance_window_ms: Option<u64>,
    /// [`MaintenanceRule::enter_lost`] for this type.
    pub maintenance_enter_lost: Option<usize>,
    /// [`MaintenanceRule::enter_share`] for this type.
    pub maintenance_enter_share: Option<f64>,
    /// [`MaintenanceRule::exit_lost`] for this type.
    pub maintenance_exit_lost: Option<usize>,
    /// [`MaintenanceRule::exit_share`] for this type.
    pub maintenance_exit_share: Option<f64>,
}

impl TypeSettings {
    /// The node's `base` settings with this type's in their place.
    pub fn over(&self, base: &Config) -> Config {
        let mut config = base.clone();
        if let Some(ms) = self.load_half_life_ms {
            config.load_half_life_ms = ms;
        }
        let churn = &mut config.churn;
        churn.max_moves_per_round = self.max_moves_per_round.or(churn.max_moves_per_round);
        churn.max_moves_fraction = self.max_moves_fraction.or(churn.max_moves_fraction);
        churn.move_cooldown_ms = self.move_cooldown_ms.unwrap_or(churn.move_cooldown_ms);
        churn.min_round_interval_ms = self.min_round_interval_ms.unwrap_or(churn.min_round_interval_ms);
        let rule = &mut config.maintenance;
        rule.enabled = self.maintenance.unwrap_or(rule.enabled);
        rule.window_ms = self.maintenance_window_ms.unwrap_or(rule.window_ms);
        rule.enter_lost = self.maintenance_enter_lost.unwrap_or(rule.enter_lost);
        rule.enter_share = self.maintenance_enter_share.unwrap_or(rule.enter_share);
        rule.exit_lost = self.maintenance_exit_lost.unwrap_or(rule.exit_lost);
        rule.exit_share = self.maintenance_exit_share.unwrap_or(rule.exit_share);
        config
    }
}

/// Settings that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A setting that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// The lease would outlive the removal timeout: two live homes possible.
    #[error(
        "lease_ms ({lease}) must be shorter than unreachable_after_ms + remove_after_ms ({removal}), \
         or a removed region could still run its shards"
    )]
    LeaseTooLong {
        /// The lease.
        lease: u64,
        /// The removal timeout after the last heartbeat.
        removal: u64,
    },
    /// A lease no region would accept ([`MAX_LEASE_MS`](shardalloc_proto::protocol::MAX_LEASE_MS)).
    #[error(
        "lease_ms ({0}) is longer than the protocol allows ({max} ms, one day): every region would hang up on it",
        max = shardalloc_proto::protocol::MAX_LEASE_MS
    )]
    LeaseOverProtocol(u64),
    /// Heartbeats must come more often than the lease runs out.
    #[error("heartbeat_interval_ms ({heartbeat}) must be shorter than lease_ms ({lease})")]
    HeartbeatTooSlow {
        /// The heartbeat interval.
        heartbeat: u64,
        /// The lease.
        lease: u64,
    },
    /// A churn limit that cannot work.
    #[error("{0}")]
    Churn(String),
    /// Maintenance thresholds that cannot work (exit not stricter than entry).
    #[error("{0}")]
    Maintenance(String),
}

impl Config {
    /// The time after its last heartbeat at which a region is removed.
    pub fn removal_ms(&self) -> u64 {
        self.unreachable_after_ms.saturating_add(self.remove_after_ms)
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive: [(&'static str, u64); 14] = [
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("unreachable_after_ms", self.unreachable_after_ms),
            ("lease_ms", self.lease_ms),
            ("handoff_timeout_ms", self.handoff_timeout_ms),
            ("handoff_ack_timeout_ms", self.handoff_ack_timeout_ms),
            ("rebalance_interval_ms", self.rebalance_interval_ms),
            ("max_handoffs_in_flight", self.max_handoffs_in_flight as u64),
            ("drain_batch", self.drain_batch as u64),
            ("max_regions", self.max_regions as u64),
            ("max_shards", self.max_shards as u64),
            ("max_pending_shards", self.max_pending_shards as u64),
            ("max_requesters_per_shard", self.max_requesters_per_shard as u64),
            ("load_half_life_ms", self.load_half_life_ms),
            ("load_save_interval_ms", self.load_save_interval_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero(name));
        }
        if self.lease_ms > shardalloc_proto::protocol::MAX_LEASE_MS {
            return Err(ConfigError::LeaseOverProtocol(self.lease_ms));
        }
        if self.lease_ms >= self.removal_ms() {
            return Err(ConfigError::LeaseTooLong { lease: self.lease_ms, removal: self.removal_ms() });
        }
        if self.heartbeat_interval_ms >= self.lease_ms {
            return Err(ConfigError::HeartbeatTooSlow { heartbeat: self.heartbeat_interval_ms, lease: self.lease_ms });
        }
        self.churn.check().map_err(ConfigError::Churn)?;
        self.maintenance.check().map_err(ConfigError::Maintenance)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_lease_is_checked() {
        assert_eq!(Config::default().validate(), Ok(()));
        let config = Config { lease_ms: 15_000, ..Config::default() };
        assert_eq!(config.validate(), Err(ConfigError::LeaseTooLong { lease: 15_000, removal: 15_000 }));
        let config = Config { handoff_timeout_ms: 0, ..Config::default() };
        assert_eq!(config.validate(), Err(ConfigError::Zero("handoff_timeout_ms")));
        let config = Config { heartbeat_interval_ms: 10_000, ..Config::default() };
        assert!(matches!(config.validate(), Err(ConfigError::HeartbeatTooSlow { .. })));
        let config = Config { handoff_ack_timeout_ms: 0, ..Config::default() };
        assert_eq!(config.validate(), Err(ConfigError::Zero("handoff_ack_timeout_ms")));
        // A lease past the protocol's day, even with a removal longer still.
        let day = shardalloc_proto::protocol::MAX_LEASE_MS;
        let config = Config { lease_ms: day + 1, remove_after_ms: 3 * day, ..Config::default() };
        assert_eq!(config.validate(), Err(ConfigError::LeaseOverProtocol(day + 1)));
        let config = Config { lease_ms: day, remove_after_ms: 3 * day, ..Config::default() };
        assert_eq!(config.validate(), Ok(()));
    }
}
