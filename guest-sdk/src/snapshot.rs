//! The snapshot: a cluster's state as plain JSON data, the format that
//! `shardalloc strategy eval|simulate` reads and the node exports.
//!
//! ```json
//! {"regions":[{"address":"127.0.0.1:2552","shards":["001","002"],"status":"up",
//!   "app_version":"1.0.0","join_order":1,"labels":{"zone":"eu"},
//!   "metrics":{"mem-used-ratio":0.4},"proxy_only":false,"draining":false}],
//!  "in_progress":["003"],"placements":{"042":"127.0.0.2:2552"},"signal":null}
//! ```
//!
//! Only `regions[].address` and `regions[].shards` are required. Unknown
//! fields are ignored. A shard listed twice or a duplicate address is an error.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::view::{Allocations, Region, RegionStatus, Topology, View};

/// A cluster's state for one entity type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// Every region, in the file's order.
    pub regions: Vec<SnapshotRegion>,
    /// Shards whose hand-off is in progress.
    #[serde(default)]
    pub in_progress: Vec<String>,
    /// Operators' placements: shard id → target address.
    #[serde(default)]
    pub placements: BTreeMap<String, String>,
    /// The type's signal (any JSON), handed to the strategy as text.
    #[serde(default)]
    pub signal: Option<serde_json::Value>,
}

/// One region of a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotRegion {
    /// The region's address.
    pub address: String,
    /// Its shards in allocation order, oldest first.
    pub shards: Vec<String>,
    /// Defaults to `up`.
    #[serde(default)]
    pub status: RegionStatus,
    /// Defaults to "" (the lowest version).
    #[serde(default)]
    pub app_version: String,
    /// Defaults to the region's 1-based position in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_order: Option<u64>,
    /// Labels (zone, dc, role…).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Reported metrics.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Routes only, never hosts shards.
    #[serde(default)]
    pub proxy_only: bool,
    /// Gets no new shards.
    #[serde(default)]
    pub draining: bool,
    /// How much load it can carry, in the units its shards' loads are
    /// reported in (contract 0.2 strategies see it); absent: not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
    /// Every quantity of its declared capacity, by name (contract 0.3
    /// strategies see them); absent: none declared.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quantities: BTreeMap<String, f64>,
}

/// A snapshot that cannot be used, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotError(pub String);

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SnapshotError {}

impl Snapshot {
    /// Parses and validates snapshot JSON.
    pub fn from_json(text: &str) -> Result<Self, SnapshotError> {
        let snapshot: Snapshot =
            serde_json::from_str(text).map_err(|e| SnapshotError(format!("snapshot is not valid: {e}")))?;
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Checks that no address and no shard appears twice, and that every
    /// address and shard id is non-empty.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        let mut addresses = HashSet::new();
        let mut shards = HashSet::new();
        for region in &self.regions {
            if region.address.is_empty() {
                return Err(SnapshotError("a region has an empty address".into()));
            }
            if !addresses.insert(region.address.as_str()) {
                return Err(SnapshotError(format!("duplicate region address {:?}", region.address)));
            }
            for shard in &region.shards {
                if shard.is_empty() {
                    return Err(SnapshotError(format!("region {:?} lists an empty shard id", region.address)));
                }
                if !shards.insert(shard.as_str()) {
                    return Err(SnapshotError(format!("shard {shard:?} is listed twice")));
                }
            }
            for (name, value) in &region.metrics {
                if !value.is_finite() {
                    return Err(SnapshotError(format!(
                        "region {:?} metric {name:?} is not a finite number",
                        region.address
                    )));
                }
            }
        }
        Ok(())
    }

    /// The join order of region `index`: its own, else its 1-based position.
    pub fn join_order(&self, index: usize) -> u64 {
        self.regions[index].join_order.unwrap_or(index as u64 + 1)
    }

    /// The signal as the text handed to strategies (`None` for null).
    pub fn signal_text(&self) -> Option<String> {
        match &self.signal {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(value.to_string()),
        }
    }

    /// The slow-changing part, with a fresh generation. Metric columns are
    /// every metric name any region reports, sorted.
    pub fn topology(&self) -> Topology {
        let metric_names: BTreeSet<&String> = self.regions.iter().flat_map(|r| r.metrics.keys()).collect();
        let regions = self
            .regions
            .iter()
            .enumerate()
            .map(|(i, r)| Region {
                address: r.address.clone(),
                status: r.status,
                app_version: r.app_version.clone(),
                join_order: self.join_order(i),
                labels: r.labels.clone(),
                proxy_only: r.proxy_only,
                draining: r.draining,
                capacity: r.capacity,
                quantities: r.quantities.clone(),
            })
            .collect();
        Topology::new(regions, metric_names.into_iter().cloned().collect(), self.signal_text())
    }

    /// The per-call view over `topology` (which must come from this snapshot).
    pub fn view(&self, topology: Arc<Topology>) -> View {
        let counts = self.regions.iter().map(|r| r.shards.len() as u32).collect();
        let metrics = self
            .regions
            .iter()
            .flat_map(|r| topology.metric_names().iter().map(|name| r.metrics.get(name).copied().unwrap_or(f64::NAN)))
            .collect();
        View::new(topology, counts, metrics).expect("a snapshot's view matches its own topology")
    }

    /// The allocation table.
    pub fn allocations(&self) -> Allocations {
        let per_region: Vec<Vec<&str>> =
            self.regions.iter().map(|r| r.shards.iter().map(String::as_str).collect()).collect();
        let in_progress: Vec<&str> = self.in_progress.iter().map(String::as_str).collect();
        let mut table = Allocations::from_ids(&per_region, &in_progress);
        // A shard is pinned when a placement targets the region it is on.
        table.pin_ids(self.regions.iter().flat_map(|region| {
            region
                .shards
                .iter()
                .filter(|shard| self.placements.get(*shard).is_some_and(|target| *target == region.address))
                .map(String::as_str)
        }));
        table
    }

    /// The region that owns `shard`, by index.
    pub fn home_of(&self, shard: &str) -> Option<usize> {
        self.regions.iter().position(|r| r.shards.iter().any(|s| s == shard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in_and_unknown_fields_are_ignored() {
        let snapshot = Snapshot::from_json(
            r#"{"regions":[{"address":"a","shards":["1"],"extra":true},{"address":"b","shards":[],"join_order":7}]}"#,
        )
        .unwrap();
        assert_eq!(snapshot.regions[0].status, RegionStatus::Up);
        assert_eq!(snapshot.join_order(0), 1);
        assert_eq!(snapshot.join_order(1), 7);
        assert!(snapshot.in_progress.is_empty() && snapshot.placements.is_empty());
        assert_eq!(snapshot.signal_text(), None);
    }

    #[test]
    fn duplicates_are_errors_naming_them() {
        let dup_shard = r#"{"regions":[{"address":"a","shards":["1"]},{"address":"b","shards":["1"]}]}"#;
        assert!(Snapshot::from_json(dup_shard).unwrap_err().0.contains("\"1\""));
        let dup_addr = r#"{"regions":[{"address":"a","shards":[]},{"address":"a","shards":[]}]}"#;
        assert!(Snapshot::from_json(dup_addr).unwrap_err().0.contains("\"a\""));
        assert!(Snapshot::from_json(r#"{"regions":[{"address":"a"}]}"#).unwrap_err().0.contains("shards"));
    }

    #[test]
    fn view_carries_counts_and_metrics() {
        let snapshot = Snapshot::from_json(
            r#"{"regions":[{"address":"a","shards":["1","2"],"metrics":{"cpu":0.5}},{"address":"b","shards":[]}],"signal":{"k":1}}"#,
        )
        .unwrap();
        let view = snapshot.view(Arc::new(snapshot.topology()));
        assert_eq!(view.shard_counts(), &[2, 0]);
        assert_eq!(view.metric(crate::RegionId(0), "cpu"), Some(0.5));
        assert_eq!(view.metric(crate::RegionId(1), "cpu"), None);
        assert_eq!(view.signal(), Some(r#"{"k":1}"#));
    }
}
