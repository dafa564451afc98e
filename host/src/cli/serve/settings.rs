//! The node's settings as one type, [`Settings`], in the settings file's
//! shape (kebab-case keys, `[coordinator]`, `[connections]`,
//! `[strategy-limits]`, `[uploads]` and `[types.NAME]` sections), and its
//! layers: the defaults (every key absent), the file (`--config`), and the
//! flags with their environment variables (clap reads a flag, else its
//! `SHARDALLOC_*` variable). [`Settings::layered`] lays the flags' layer
//! over the file's: a key the upper layer sets wins, sections merge key by
//! key, a key it leaves unset keeps the lower value. What the values mean
//! and how they are checked is `resolve.rs`'s job.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::uploads::UploadsFile;

/// Every setting of `shardalloc serve` that the file can hold.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct Settings {
    pub listen: Option<SocketAddr>,
    pub data: Option<PathBuf>,
    pub admin_token_file: Option<PathBuf>,
    pub region_token_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub auto_create_types: Option<bool>,
    pub advertise: Option<String>,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    pub node_name: Option<String>,
    pub leader_lease_s: Option<u64>,
    pub cluster_secret_file: Option<PathBuf>,
    #[serde(default)]
    pub etcd: Vec<String>,
    pub etcd_prefix: Option<String>,
    pub etcd_user: Option<String>,
    pub etcd_password_file: Option<PathBuf>,
    pub etcd_ca_cert: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
    #[serde(default)]
    pub coordinator: CoordinatorSection,
    #[serde(default)]
    pub strategy_limits: LimitsSection,
    #[serde(default)]
    pub connections: ConnectionsSection,
    #[serde(default)]
    pub types: BTreeMap<String, TypeSection>,
    #[serde(default)]
    pub uploads: UploadsFile,
}

/// `[coordinator]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct CoordinatorSection {
    pub heartbeat_interval_ms: Option<u64>,
    pub unreachable_after_ms: Option<u64>,
    pub remove_after_ms: Option<u64>,
    pub lease_ms: Option<u64>,
    pub handoff_timeout_ms: Option<u64>,
    pub handoff_ack_timeout_ms: Option<u64>,
    pub rebalance_interval_ms: Option<u64>,
    pub max_rebalance_per_tick: Option<usize>,
    pub max_handoffs_in_flight: Option<usize>,
    pub drain_batch: Option<usize>,
    pub min_regions: Option<usize>,
    pub tombstone_retention_ms: Option<u64>,
    pub max_regions: Option<usize>,
    pub max_shards: Option<usize>,
    pub max_placements: Option<usize>,
    pub load_half_life_ms: Option<u64>,
    pub load_save_interval_ms: Option<u64>,
    pub max_moves_per_round: Option<usize>,
    pub max_moves_fraction: Option<f64>,
    pub move_cooldown_ms: Option<u64>,
    pub min_round_interval_ms: Option<u64>,
    pub maintenance: Option<bool>,
    pub maintenance_window_ms: Option<u64>,
    pub maintenance_enter_lost: Option<usize>,
    pub maintenance_enter_share: Option<f64>,
    pub maintenance_exit_lost: Option<usize>,
    pub maintenance_exit_share: Option<f64>,
}

/// `[strategy-limits]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct LimitsSection {
    pub deadline_ms: Option<u64>,
    pub memory_mib: Option<usize>,
    pub view_load_ms: Option<u64>,
}

/// `[connections]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct ConnectionsSection {
    pub header_read_timeout_ms: Option<u64>,
    pub request_body_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub session_handshake_timeout_ms: Option<u64>,
    pub max_connections: Option<usize>,
    pub max_unauthenticated_connections: Option<usize>,
    pub forward_timeout_ms: Option<u64>,
    pub max_event_streams: Option<usize>,
}

/// `[types.NAME]`: a declared type, its strategy and its own load and
/// churn settings (over `[coordinator]`'s).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct TypeSection {
    pub strategy: String,
    pub config: Option<serde_json::Value>,
    pub load_half_life_ms: Option<u64>,
    pub max_moves_per_round: Option<usize>,
    pub max_moves_fraction: Option<f64>,
    pub move_cooldown_ms: Option<u64>,
    pub min_round_interval_ms: Option<u64>,
    pub maintenance: Option<bool>,
    pub maintenance_window_ms: Option<u64>,
    pub maintenance_enter_lost: Option<usize>,
    pub maintenance_enter_share: Option<f64>,
    pub maintenance_exit_lost: Option<usize>,
    pub maintenance_exit_share: Option<f64>,
}

impl Settings {
    /// The settings file at `path`, or nothing set when there is none.
    pub fn from_file(path: Option<&Path>) -> anyhow::Result<Settings> {
        let Some(path) = path else { return Ok(Settings::default()) };
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("invalid settings file {}", path.display()))
    }

    /// `upper` laid over `self`: each key `upper` sets wins, sections and
    /// `[types.NAME]` tables merge key by key, a key `upper` leaves unset
    /// (or a list it leaves empty) keeps `self`'s value.
    pub fn under(self, upper: Settings) -> anyhow::Result<Settings> {
        let mut merged = serde_json::to_value(self).context("the settings as values")?;
        overlay(&mut merged, serde_json::to_value(upper).context("the flags as values")?);
        serde_json::from_value(merged).context("the layered settings")
    }
}

/// Lays `upper` over `lower`, in place: objects merge key by key; a null or
/// an empty list in `upper` leaves `lower`'s value; anything else replaces it.
fn overlay(lower: &mut Value, upper: Value) {
    match (lower, upper) {
        (Value::Object(lower), Value::Object(upper)) => {
            for (key, value) in upper {
                match lower.get_mut(&key) {
                    Some(existing) => overlay(existing, value),
                    None => {
                        lower.insert(key, value);
                    }
                }
            }
        }
        (_, Value::Null) => {}
        (_, Value::Array(items)) if items.is_empty() => {}
        (lower, upper) => *lower = upper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Settings {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_layer_wins_where_it_sets_a_key_and_keeps_the_rest() {
        let file = parse(
            "listen = \"127.0.0.1:1\"\netcd = [\"http://a:1\"]\n[coordinator]\nlease-ms = 9000\nmin-regions = 2\n\
             [types.cart]\nstrategy = \"hash\"\nmove-cooldown-ms = 5\n",
        );
        let mut flags = Settings::default();
        flags.coordinator.lease_ms = Some(4000);
        flags.data = Some("d".into());
        let layered = file.under(flags).unwrap();
        assert_eq!(layered.listen, Some("127.0.0.1:1".parse().unwrap()), "the file's, no flag");
        assert_eq!(layered.data, Some(PathBuf::from("d")), "the flag's, not in the file");
        assert_eq!((layered.coordinator.lease_ms, layered.coordinator.min_regions), (Some(4000), Some(2)));
        assert_eq!(layered.etcd, ["http://a:1"], "an empty list of the flags keeps the file's");
        assert_eq!(layered.types["cart"].move_cooldown_ms, Some(5));
    }

    #[test]
    fn a_set_list_replaces_the_lower_one() {
        let file = parse("etcd = [\"http://a:1\", \"http://b:1\"]\n");
        let flags = Settings { etcd: vec!["http://c:1".into()], ..Settings::default() };
        assert_eq!(file.under(flags).unwrap().etcd, ["http://c:1"]);
    }
}
