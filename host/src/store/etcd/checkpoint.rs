//! Folding the log into a checkpoint. See the module documentation of
//! `etcd`: chunks first, then one fenced transaction that points to them
//! and deletes what they replace, then etcd's history is compacted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use shardalloc_etcd::{ops, pb};

use super::keys::{CHUNK_BYTES, CheckpointRecord, chunks, sha256};
use super::{Inner, corrupt};
use crate::store::records::{self, SCHEMA_V1, v1};
use crate::store::{Loaded, Store, StoreError};

/// Starts a checkpoint on its own thread unless one is running.
pub(super) fn start(inner: &Arc<Inner>) {
    if inner.checkpointing.swap(true, Ordering::AcqRel) {
        return;
    }
    let inner = Arc::clone(inner);
    let spawned = std::thread::Builder::new().name("etcd-checkpoint".into()).spawn(move || {
        if let Err(error) = write(&inner) {
            tracing::warn!(%error, "etcd checkpoint failed; the log keeps growing until the next one");
        }
        inner.checkpointing.store(false, Ordering::Release);
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "could not start the etcd checkpoint thread");
    }
}

/// Writes a checkpoint of what the store holds now.
pub(super) fn write(inner: &Inner) -> Result<(), StoreError> {
    write_at(inner, false)
}

/// Writes what the store's memory holds as the first state of an empty
/// prefix: the checkpoint, and the revision moved to it in the same
/// transaction, which fails if anything was committed there meanwhile.
pub(super) fn import(inner: &Inner) -> Result<(), StoreError> {
    write_at(inner, true)
}

fn write_at(inner: &Inner, first: bool) -> Result<(), StoreError> {
    let loaded = inner.cache.load()?;
    let revision = loaded.revision;
    if revision == 0 {
        return Ok(());
    }
    let before = inner.since_checkpoint.load(Ordering::Relaxed);
    // One fence for every write: a checkpoint begun under one leadership
    // never finishes under the next.
    let fence: Vec<pb::Compare> = inner.fence_compare().into_iter().collect();
    let (record, bytes) = write_chunks(inner, &loaded, &fence)?;
    let chunks = record.chunks;
    let record = serde_json::to_vec(&record).map_err(|e| corrupt("the checkpoint record", e))?;
    let keys = &inner.keys;
    let mut compares = fence;
    let mut writes = Vec::new();
    if first {
        compares.push(ops::version_is(keys.revision(), 0));
        writes.push(ops::put(keys.revision(), revision.to_string()));
    }
    writes.extend([
        ops::put(keys.checkpoint(), record),
        ops::delete_range(keys.log_start(), keys.log_from(revision + 1)),
        ops::delete_range(keys.checkpoint_data_start(), keys.checkpoint_data_from(revision)),
    ]);
    let response = inner.txn(ops::txn(compares, writes, Vec::new()))?;
    if !response.succeeded && first {
        return Err(StoreError::Backend {
            backend: super::BACKEND,
            source: format!("something was committed under {} while the copy ran", keys.prefix()).into(),
        });
    }
    if !response.succeeded {
        return Err(StoreError::Deposed { key: inner.keys.leader() });
    }
    inner.since_checkpoint.fetch_sub(before.min(inner.since_checkpoint.load(Ordering::Relaxed)), Ordering::Relaxed);
    let at = ops::revision_of(response.header.as_ref());
    if at > 0 {
        inner.call(move |client| async move { client.compact(at).await })?;
    }
    tracing::debug!(revision, chunks, bytes, "etcd checkpoint written");
    Ok(())
}

/// Writes `loaded` as a checkpoint's chunks (each put compares `fence`);
/// the record that points to them, and their size, for the caller to write.
pub(super) fn write_chunks(
    inner: &Inner,
    loaded: &Loaded,
    fence: &[pb::Compare],
) -> Result<(CheckpointRecord, usize), StoreError> {
    let revision = loaded.revision;
    let mut bytes = records::encode(&records::checkpoint(loaded));
    let loads = records::checkpoint_loads(loaded);
    let loads_at = (!loads.types.is_empty()).then(|| {
        let at = bytes.len() as u64;
        bytes.extend(records::encode(&loads));
        at
    });
    let operations = records::checkpoint_operations(loaded);
    let operations_at = (!operations.types.is_empty()).then(|| {
        let at = bytes.len() as u64;
        bytes.extend(records::encode(&operations));
        at
    });
    let epochs = records::checkpoint_epochs(loaded);
    let epochs_at = (!epochs.types.is_empty()).then(|| {
        let at = bytes.len() as u64;
        bytes.extend(records::encode(&epochs));
        at
    });
    let chunks = chunks(&bytes, CHUNK_BYTES);
    for (index, chunk) in chunks.iter().enumerate() {
        let put = ops::put(inner.keys.checkpoint_chunk(revision, index as u32), chunk.to_vec());
        if !inner.txn(ops::txn(fence.to_vec(), vec![put], Vec::new()))?.succeeded {
            return Err(StoreError::Deposed { key: inner.keys.leader() });
        }
    }
    let record = CheckpointRecord {
        revision,
        chunks: chunks.len() as u32,
        sha256: sha256(&bytes),
        loads_at,
        operations_at,
        epochs_at,
    };
    Ok((record, bytes.len()))
}

/// Reads the checkpoint `record` points to, at etcd revision `at`, as a
/// checkpoint of `schema`.
pub(super) fn read(inner: &Inner, record: &CheckpointRecord, at: i64, schema: u64) -> Result<Loaded, StoreError> {
    let mut bytes = Vec::new();
    for index in 0..record.chunks {
        let key = match schema {
            SCHEMA_V1 => inner.keys.v1_checkpoint_chunk(record.revision, index),
            _ => inner.keys.checkpoint_chunk(record.revision, index),
        };
        let chunk = inner.get_one(key.clone(), at)?.ok_or_else(|| corrupt(&key, "a checkpoint chunk is missing"))?;
        bytes.extend_from_slice(&chunk);
    }
    let what = inner.keys.checkpoint();
    if sha256(&bytes) != record.sha256 {
        return Err(corrupt(what, format!("its chunks do not hash to {}", record.sha256)));
    }
    // The sections: the state, then the loads, the operations and the
    // epochs when present.
    let (rest, epochs) = match record.epochs_at {
        Some(at) if at <= bytes.len() as u64 => bytes.split_at(at as usize),
        Some(at) => return Err(corrupt(what, format!("its epochs start at byte {at} of {}", bytes.len()))),
        None => (bytes.as_slice(), &[][..]),
    };
    let (rest, operations) = match record.operations_at {
        Some(at) if at <= rest.len() as u64 => rest.split_at(at as usize),
        Some(at) => return Err(corrupt(what, format!("its operations start at byte {at} of {}", rest.len()))),
        None => (rest, &[][..]),
    };
    let (state, loads) = match record.loads_at {
        Some(at) if at <= rest.len() as u64 => rest.split_at(at as usize),
        Some(at) => return Err(corrupt(what, format!("its loads start at byte {at} of {}", rest.len()))),
        None => (rest, &[][..]),
    };
    let mut loaded: Loaded = records::decode_as::<v1::Checkpoint, records::Checkpoint, Loaded>(schema, state)
        .map_err(|e| corrupt(&what, e))?;
    if record.loads_at.is_some() {
        let loads = records::decode::<records::CheckpointLoads>(loads).map_err(|e| corrupt(&what, e))?;
        loaded = records::with_loads(loaded, loads);
    }
    if record.operations_at.is_some() {
        let operations = records::decode::<records::CheckpointOperations>(operations).map_err(|e| corrupt(&what, e))?;
        loaded = records::with_operations(loaded, operations);
    }
    if record.epochs_at.is_some() {
        let epochs = records::decode::<records::CheckpointEpochs>(epochs).map_err(|e| corrupt(&what, e))?;
        loaded = records::with_epochs(loaded, epochs);
    }
    if loaded.revision != record.revision {
        return Err(corrupt(what, format!("it says revision {}, its data {}", record.revision, loaded.revision)));
    }
    Ok(loaded)
}
