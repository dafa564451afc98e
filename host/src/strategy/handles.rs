//! The shard table's handles by shard id, each id held once: a hash table
//! of bare handles whose ids are read from the table's own view (where the
//! kept view names every shard), not a map that keeps a second copy of
//! every id as its key. At a million shards that copy was most of the
//! table's memory (a shared string and a map entry a shard, about 70
//! bytes); a handle is 4 bytes and a control byte.
//!
//! The view must name a handle before it is inserted here (a growing table
//! hashes every handle's id again), and a handle is removed by its id's
//! hash and the handle itself, so removing works after the view has
//! dropped the id.

use hashbrown::HashTable;
use shardalloc_guest::Allocations;

type Fold = foldhash::fast::RandomState;

/// Handles by shard id (see the module documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct Handles {
    table: HashTable<u32>,
    /// Seeded per process; looked up on every allocation, so foldhash, not
    /// SipHash (the ids are bounded in length and the node homed each).
    hasher: Fold,
}

impl Handles {
    fn hash(&self, id: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, id)
    }

    /// The id of `handle` in `ids`: the table names every shard it holds.
    fn id(ids: &Allocations, handle: u32) -> &str {
        ids.known_id(handle).expect("the host's table knows every id")
    }

    /// The handle of the shard with this id.
    pub(super) fn get(&self, id: &str, ids: &Allocations) -> Option<u32> {
        self.table.find(self.hash(id), |&h| Self::id(ids, h) == id).copied()
    }

    /// Adds a shard that `ids` names already, by its handle.
    pub(super) fn insert(&mut self, handle: u32, ids: &Allocations) {
        let hash = self.hash(Self::id(ids, handle));
        let hasher = &self.hasher;
        self.table.insert_unique(hash, handle, |&h| std::hash::BuildHasher::hash_one(hasher, Self::id(ids, h)));
    }

    /// Takes away the shard `id` that had `handle` (its id may be gone
    /// from the view already); false when it was not here.
    pub(super) fn remove(&mut self, id: &str, handle: u32) -> bool {
        match self.table.find_entry(self.hash(id), |&h| h == handle) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// How many shards it holds (the table's tests compare it with the view).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }
}
