//! Folding the log into a checkpoint. See the module documentation of
//! `etcd`: chunks first, then one fenced transaction that points to them
//! and deletes what they replace, then etcd's history is compacted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use shardalloc_etcd::{ops, pb};

use super::keys::{CHUNK_BYTES, CheckpointRecord, chunks, sha256};
use super::{Inner, corrupt};
use crate::store::records::{self, SCHEMA_V2, v1, v2};
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
    let bytes = records::encode(&records::checkpoint(loaded));
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
        loads_at: None,
        operations_at: None,
        epochs_at: None,
    };
    Ok((record, bytes.len()))
}

/// Reads the checkpoint `record` points to, at etcd revision `at`, as a
/// checkpoint of `schema`.
pub(super) fn read(inner: &Inner, record: &CheckpointRecord, at: i64, schema: u64) -> Result<Loaded, StoreError> {
    let mut bytes = Vec::new();
    for index in 0..record.chunks {
        let key = inner.keys.checkpoint_chunk_of(schema, record.revision, index);
        let chunk = inner.get_one(key.clone(), at)?.ok_or_else(|| corrupt(&key, "a checkpoint chunk is missing"))?;
        bytes.extend_from_slice(&chunk);
    }
    let what = inner.keys.checkpoint();
    if sha256(&bytes) != record.sha256 {
        return Err(corrupt(what, format!("its chunks do not hash to {}", record.sha256)));
    }
    let loaded = match schema {
        SCHEMA_V2 => read_v2(record, &bytes).map_err(|e| corrupt(&what, e))?,
        _ => records::decode_as::<v1::Checkpoint, v2::Checkpoint, records::Checkpoint, Loaded>(schema, &bytes)
            .map_err(|e| corrupt(&what, e))?,
    };
    if loaded.revision != record.revision {
        return Err(corrupt(what, format!("it says revision {}, its data {}", record.revision, loaded.revision)));
    }
    Ok(loaded)
}

/// A schema-2 checkpoint's data: the state, then the loads, the operations
/// and the epochs when its record says where they start.
fn read_v2(record: &CheckpointRecord, bytes: &[u8]) -> Result<Loaded, String> {
    let split = |bytes: &'_ [u8], at: Option<u64>, what: &str| -> Result<(usize, usize), String> {
        match at {
            Some(at) if at <= bytes.len() as u64 => Ok((at as usize, bytes.len())),
            Some(at) => Err(format!("its {what} start at byte {at} of {}", bytes.len())),
            None => Ok((bytes.len(), bytes.len())),
        }
    };
    let (epochs_at, end) = split(bytes, record.epochs_at, "epochs")?;
    let (operations_at, _) = split(&bytes[..epochs_at], record.operations_at, "operations")?;
    let (loads_at, _) = split(&bytes[..operations_at], record.loads_at, "loads")?;
    let mut loaded: Loaded = v2::decode::<v2::Checkpoint>(&bytes[..loads_at])?.into();
    if record.loads_at.is_some() {
        loaded = v2::with_loads(loaded, v2::decode(&bytes[loads_at..operations_at])?);
    }
    if record.operations_at.is_some() {
        loaded = v2::with_operations(loaded, v2::decode(&bytes[operations_at..epochs_at])?);
    }
    if record.epochs_at.is_some() {
        loaded = v2::with_epochs(loaded, v2::decode(&bytes[epochs_at..end])?);
    }
    Ok(loaded)
}
