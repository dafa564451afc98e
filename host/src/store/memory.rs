//! [`MemoryStore`]: the [`Store`] contract in memory. Clones share one
//! state, so dropping a clone and using another is a "restart" that keeps
//! everything; a new [`MemoryStore`] starts empty. Coordinator changes are
//! applied with [`Durable::apply`], so a load gives back exactly what the
//! coordinator built.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use crate::coordinator::Home;

use super::{
    ACTIVATION_HISTORY, ComponentRecord, Loaded, LoadedType, Revision, SCHEMA_VERSION, Store, StoreError, Turn,
};

#[derive(Default)]
struct State {
    loaded: Loaded,
    blobs: BTreeMap<String, Vec<u8>>,
}

/// The in-memory store. See the module documentation.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The revision it holds.
    pub fn load_revision(&self) -> Revision {
        self.state().loaded.revision
    }

    /// Replaces everything but the blobs with `loaded` (a backend that
    /// keeps its state in memory after reading it elsewhere).
    pub fn replace(&self, loaded: Loaded) {
        self.state().loaded = loaded;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        Ok(self.state().loaded.clone())
    }

    fn load_type(&self, entity_type: &str) -> Result<Option<LoadedType>, StoreError> {
        Ok(self.state().loaded.types.get(entity_type).cloned())
    }

    fn placements(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let state = self.state();
        let Some(loaded) = state.loaded.types.get(entity_type) else { return Ok(None) };
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let page = loaded
            .durable
            .placements
            .range::<str, _>((start, Bound::Unbounded))
            .filter_map(|(shard, entry)| entry.target.as_ref().map(|t| (shard.clone(), t.clone())))
            .take(limit)
            .collect();
        Ok(Some(page))
    }

    fn homes(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, Home)>>, StoreError> {
        let state = self.state();
        let Some(loaded) = state.loaded.types.get(entity_type) else { return Ok(None) };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let page = loaded
            .durable
            .homes
            .range::<str, _>((start, Bound::Unbounded))
            .take(limit)
            .map(|(shard, home)| (shard.clone(), home.clone()))
            .collect();
        Ok(Some(page))
    }

    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        let mut state = self.state();
        let loaded = &mut state.loaded;
        if loaded.revision != based_on {
            return Err(StoreError::Fenced { based_on, current: loaded.revision });
        }
        for name in &turn.removed_types {
            loaded.types.remove(name);
        }
        for (name, record) in &turn.types {
            loaded.types.entry(name.clone()).or_default().record = Some(record.clone());
        }
        for (name, changes) in &turn.changes {
            if changes.is_empty() {
                continue;
            }
            let durable = &mut loaded.types.entry(name.clone()).or_default().durable;
            for change in changes {
                durable.apply(change);
            }
        }
        for (name, activation) in &turn.activations {
            let history = &mut loaded.types.entry(name.clone()).or_default().activations;
            history.push(activation.clone());
            let excess = history.len().saturating_sub(ACTIVATION_HISTORY);
            history.drain(..excess);
        }
        for record in &turn.components {
            loaded.components.insert(record.digest.clone(), ComponentRecord::clone(record));
        }
        for digest in &turn.removed_components {
            loaded.components.remove(digest);
        }
        loaded.revision += 1;
        Ok(loaded.revision)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.state().blobs.insert(digest.to_owned(), bytes.to_vec());
        Ok(())
    }

    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.state().blobs.get(digest).cloned())
    }

    fn delete_blob(&self, digest: &str) -> Result<(), StoreError> {
        self.state().blobs.remove(digest);
        Ok(())
    }

    fn blob_digests(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.state().blobs.keys().cloned().collect())
    }

    fn schema_version(&self) -> Result<u64, StoreError> {
        Ok(SCHEMA_VERSION)
    }

    fn describe(&self) -> String {
        "memory (not durable)".to_owned()
    }
}
