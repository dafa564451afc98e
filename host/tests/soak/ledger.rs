//! What the soak's acknowledged placement calls say the store must hold: a
//! placement set and acknowledged is there with its target, one removed (or
//! found absent) and acknowledged is not — unless a later call on the same
//! shard failed or timed out, which leaves the shard unknown (that call may
//! or may not have been applied).

use std::collections::BTreeMap;

enum Known {
    Set(String),
    Absent,
    Unknown,
}

#[derive(Default)]
pub struct Ledger(BTreeMap<String, Known>);

impl Ledger {
    /// A call setting `shard`'s placement to `target` ended: acknowledged or not.
    pub fn set(&mut self, shard: &str, target: &str, acknowledged: bool) {
        let known = if acknowledged { Known::Set(target.to_owned()) } else { Known::Unknown };
        self.0.insert(shard.to_owned(), known);
    }

    /// A call removing `shard`'s placement ended: acknowledged (removed, or
    /// there was none) or not.
    pub fn remove(&mut self, shard: &str, acknowledged: bool) {
        self.0.insert(shard.to_owned(), if acknowledged { Known::Absent } else { Known::Unknown });
    }

    /// How many shards' placements are known, and every difference between
    /// what is known and `stored` (shard → target).
    pub fn check(&self, stored: &BTreeMap<String, String>) -> (usize, Vec<String>) {
        let mut known = 0;
        let mut differences = Vec::new();
        for (shard, expected) in &self.0 {
            let found = stored.get(shard);
            match expected {
                Known::Unknown => continue,
                Known::Set(target) if found != Some(target) => {
                    differences.push(format!("shard {shard}: placed on {target}, stored {found:?}"))
                }
                Known::Absent if found.is_some() => {
                    differences.push(format!("shard {shard}: placement removed, stored {found:?}"))
                }
                _ => {}
            }
            known += 1;
        }
        (known, differences)
    }
}
