//! Placements: validation, last-writer-wins, tombstones and broadcast.

use std::collections::BTreeSet;

use super::allocation::MAX_SHARD_ID_BYTES;
use super::{Change, Coordinator, NodeMessage, Observation, PlacementEntry, PlacementError, Reply, RequestId, Stamp};

fn check_shard(index: usize, shard: &str, seen: &mut BTreeSet<String>) -> Result<(), PlacementError> {
    if shard.is_empty() {
        return Err(PlacementError::EmptyShard { index });
    }
    if shard.len() > MAX_SHARD_ID_BYTES {
        return Err(PlacementError::ShardTooLong { index, len: shard.len() });
    }
    if !seen.insert(shard.to_owned()) {
        return Err(PlacementError::Duplicate { index, shard: shard.to_owned() });
    }
    Ok(())
}

impl Coordinator {
    fn check_room(&self, shards: impl Iterator<Item = String>) -> Result<(), PlacementError> {
        let new = shards.filter(|s| !self.durable.placements.contains_key(s)).count();
        if self.durable.placements.len() + new > self.config.max_placements {
            return Err(PlacementError::TooMany { limit: self.config.max_placements });
        }
        Ok(())
    }

    /// Whether [`OperatorRequest::SetPlacements`](super::OperatorRequest)
    /// would accept `placements` now: ids, targets, duplicates and the
    /// type's placement limit, checked as a whole without writing anything.
    /// A driver that writes a large request in slices checks it here first.
    pub fn check_placements(&self, placements: &[(String, String)]) -> Result<(), PlacementError> {
        if placements.is_empty() {
            return Err(PlacementError::Empty);
        }
        let mut seen = BTreeSet::new();
        for (index, (shard, target)) in placements.iter().enumerate() {
            check_shard(index, shard, &mut seen)?;
            if target.is_empty() {
                return Err(PlacementError::EmptyTarget { index, shard: shard.clone() });
            }
        }
        self.check_room(placements.iter().map(|(s, _)| s.clone()))
    }

    /// Sets placements, all or nothing.
    pub(super) fn set_placements(&mut self, request: RequestId, placements: Vec<(String, String)>, stamp: Stamp) {
        if let Err(error) = self.check_placements(&placements) {
            self.reply(request, Reply::PlacementRefused(error));
            return;
        }
        let mut applied = Vec::new();
        let mut stale = Vec::new();
        for (shard, target) in placements {
            if self.write_placement(&shard, Some(target), &stamp) {
                applied.push(shard);
            } else {
                stale.push(shard);
            }
        }
        self.reply(request, Reply::PlacementsWritten { applied, stale });
    }

    /// Removes placements, leaving tombstones.
    pub(super) fn remove_placements(&mut self, request: RequestId, shards: Vec<String>, stamp: Stamp) {
        let checked = (|| {
            if shards.is_empty() {
                return Err(PlacementError::Empty);
            }
            let mut seen = BTreeSet::new();
            for (index, shard) in shards.iter().enumerate() {
                check_shard(index, shard, &mut seen)?;
            }
            self.check_room(shards.iter().cloned())
        })();
        if let Err(error) = checked {
            self.reply(request, Reply::PlacementRefused(error));
            return;
        }
        let mut applied = Vec::new();
        let mut stale = Vec::new();
        for shard in shards {
            if self.write_placement(&shard, None, &stamp) {
                applied.push(shard);
            } else {
                stale.push(shard);
            }
        }
        self.reply(request, Reply::PlacementsWritten { applied, stale });
    }

    /// Applies one write when its stamp is newer than the current entry's;
    /// pushes the change to every region.
    fn write_placement(&mut self, shard: &str, target: Option<String>, stamp: &Stamp) -> bool {
        if self.durable.placements.get(shard).is_some_and(|e| e.stamp >= *stamp) {
            return false;
        }
        let entry = PlacementEntry { target: target.clone(), stamp: stamp.clone(), written_at: self.now };
        self.change(Change::PlacementWritten { shard: shard.to_owned(), entry });
        match &target {
            Some(t) => self.external.set_placement(shard, t.clone()),
            None => {
                self.external.remove_placement(shard);
            }
        }
        let regions: Vec<String> = self.durable.regions.keys().cloned().collect();
        for region in regions {
            self.reveal(&region, NodeMessage::PlacementChanged { shard: shard.to_owned(), target: target.clone() });
        }
        self.observe(Observation::PlacementChanged { shard: shard.to_owned(), target, stamp: stamp.clone() });
        true
    }

    /// Forgets tombstones older than the retention period (the oldest
    /// first, from the index: no walk over the live placements).
    pub(super) fn purge_tombstones(&mut self) {
        let Some(cutoff) = self.now.checked_sub(self.config.tombstone_retention_ms) else { return };
        let expired: Vec<String> =
            self.tombstones.iter().take_while(|(at, _)| *at <= cutoff).map(|(_, shard)| shard.clone()).collect();
        for shard in expired {
            self.change(Change::PlacementPurged { shard });
        }
    }
}
