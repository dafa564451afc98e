//! Commits and loads: the log of turns after the checkpoint. See the
//! module documentation of `etcd` for the shape of both.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use shardalloc_etcd::{ops, pb};

use super::keys::{self, CheckpointRecord, LOG_PAGE, LogPart};
use super::{Inner, corrupt, stored_number};
use crate::store::records::{self, v1, v2};
use crate::store::{Loaded, MemoryStore, Revision, SCHEMA_VERSION, Store, StoreError, Turn};

/// How often a load starts again when etcd compacted the revision it was
/// reading at (a checkpoint finished meanwhile).
const LOAD_ATTEMPTS: usize = 5;

/// How often a commit's transaction is sent when etcd does not answer (a
/// member died under the connection; the client moves to another).
const WRITE_ATTEMPTS: u32 = 4;

/// The pause before sending it again, times the attempt number.
const WRITE_RETRY: std::time::Duration = std::time::Duration::from_millis(150);

/// Writes `turn` as the log entry of `based_on + 1`. See the module
/// documentation of `etcd`.
pub(super) fn commit(inner: &Inner, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
    let current = inner.cache.load_revision();
    if current != based_on {
        return Err(StoreError::Fenced { based_on, current });
    }
    let bytes = records::encode(&records::turn(turn));
    let parts = keys::split(&bytes, nonce());
    let revision = based_on + 1;
    let last = parts.len() - 1;
    // One fence for every part: a commit begun under one leadership never
    // finishes under the next.
    let fence = inner.fence_compare();
    for (index, part) in parts.iter().enumerate() {
        let mut writes = vec![ops::put(inner.keys.log_part(revision, index as u32), part.encode())];
        if index == last {
            writes.push(ops::put(inner.keys.revision(), revision.to_string()));
        }
        let txn = ops::txn(guards(inner, based_on, fence.clone()), writes, Vec::new());
        let key = inner.keys.log_part(revision, index as u32);
        if !send_once_applied(inner, txn, &key, part.nonce)? {
            return Err(refusal(inner, based_on));
        }
    }
    let committed = inner.cache.commit(based_on, turn)?;
    saw(inner, committed);
    Ok(committed)
}

/// Sends a part's transaction, again when etcd did not answer. An answer
/// lost after etcd applied it makes the next attempt's comparison fail:
/// the part found under `key` with this commit's `nonce` tells that apart
/// from a refusal. True when the part is written.
fn send_once_applied(inner: &Inner, txn: pb::TxnRequest, key: &str, nonce: u64) -> Result<bool, StoreError> {
    let mut attempt = 1;
    let started = std::time::Instant::now();
    loop {
        match inner.txn(txn.clone()) {
            Ok(response) if response.succeeded => return Ok(true),
            Ok(_) if attempt == 1 => return Ok(false),
            Ok(_) => {
                let found = inner.get_one(key.to_owned(), 0)?;
                return Ok(found.and_then(|v| LogPart::decode(&v)).is_some_and(|p| p.nonce == nonce));
            }
            // Quick failures (a connection refused) are sent again; a
            // request that timed out is not: the lease would not outlast it.
            Err(error) if attempt < WRITE_ATTEMPTS && started.elapsed() < super::REQUEST_TIMEOUT / 2 => {
                tracing::debug!(%error, attempt, "an etcd write got no answer; sending it again");
                std::thread::sleep(WRITE_RETRY * attempt);
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// What every write of a commit based on `based_on` compares: the
/// revision, and the leader's `fence` when elected.
fn guards(inner: &Inner, based_on: Revision, fence: Option<pb::Compare>) -> Vec<pb::Compare> {
    let key = inner.keys.revision();
    let mut compares =
        vec![if based_on == 0 { ops::version_is(key, 0) } else { ops::value_is(key, based_on.to_string()) }];
    compares.extend(fence);
    compares
}

/// Why a guarded write was refused: the fence moved, or the revision did.
fn refusal(inner: &Inner, based_on: Revision) -> StoreError {
    if let Some(fence) = inner.fence() {
        let key = fence.key.clone();
        match inner.get(ops::range(key.clone())) {
            Ok(kvs) if kvs.first().map(|kv| kv.create_revision) == Some(fence.create_revision) => {}
            Ok(_) => return StoreError::Deposed { key },
            Err(error) => return error,
        }
    }
    match inner.get_one(inner.keys.revision(), 0) {
        Ok(value) => {
            let current = value.and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok()).unwrap_or(0);
            StoreError::Fenced { based_on, current }
        }
        Err(error) => error,
    }
}

/// A number no other commit of any process uses for its parts.
pub(super) fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}

/// Loads the checkpoint and the log after it, at one etcd revision, and
/// keeps the result as the store's memory.
pub(super) fn load(inner: &Inner) -> Result<Loaded, StoreError> {
    load_schema(inner, SCHEMA_VERSION).map(|(loaded, _)| loaded)
}

/// [`load`] of a store whose keys hold `schema`; also the etcd revision
/// it was read at.
pub(super) fn load_schema(inner: &Inner, schema: u64) -> Result<(Loaded, i64), StoreError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match load_once(inner, schema) {
            Err(StoreError::Backend { source, .. }) if attempt < LOAD_ATTEMPTS && compacted(&*source) => {
                tracing::debug!("etcd compacted the revision a load was reading at; loading again");
            }
            result => return result,
        }
    }
}

fn compacted(error: &(dyn std::error::Error + 'static)) -> bool {
    error.to_string().contains("compacted")
}

fn load_once(inner: &Inner, schema: u64) -> Result<(Loaded, i64), StoreError> {
    let keys = &inner.keys;
    let txn = ops::txn(Vec::new(), vec![ops::get(keys.revision()), ops::get(keys.checkpoint())], Vec::new());
    let response = inner.txn(txn)?;
    let at = ops::revision_of(response.header.as_ref());
    let revision = stored_number(&response, &keys.revision())?.unwrap_or(0);
    let checkpoint = match ops::txn_reads(&response).flatten().find(|kv| kv.key == keys.checkpoint().as_bytes()) {
        Some(kv) => {
            Some(serde_json::from_slice::<CheckpointRecord>(&kv.value).map_err(|e| corrupt(keys.checkpoint(), e))?)
        }
        None => None,
    };
    let memory = MemoryStore::new();
    let from = match &checkpoint {
        Some(record) => {
            let state = super::checkpoint::read(inner, record, at, schema)?;
            memory.replace(state);
            record.revision
        }
        None => 0,
    };
    if from > revision {
        return Err(corrupt(keys.checkpoint(), format!("it holds revision {from}, the store is at {revision}")));
    }
    let mut parts: BTreeMap<Revision, Vec<(u32, LogPart)>> = BTreeMap::new();
    let found = inner.range(keys.log_from(from + 1), &keys.log_from(revision + 1), at, LOG_PAGE, false)?;
    for kv in found {
        let key = String::from_utf8(kv.key).map_err(|e| corrupt("a log key", e))?;
        let (r, index) = keys.parse_log_part(&key).ok_or_else(|| corrupt(&key, "not a log part's key"))?;
        let part = LogPart::decode(&kv.value).ok_or_else(|| corrupt(&key, "too short for a log part"))?;
        parts.entry(r).or_default().push((index, part));
    }
    went_back(inner, revision, at)?;
    for r in from + 1..=revision {
        let found = parts.remove(&r).unwrap_or_default();
        let what = keys.log_from(r);
        let bytes = keys::join(&found).ok_or_else(|| corrupt(&what, "the log entry is incomplete"))?;
        let turn: Turn = records::decode_as::<v1::Turn, v2::Turn, records::Turn, Turn>(schema, &bytes)
            .map_err(|e| corrupt(&what, e))?;
        memory.commit(r - 1, &turn)?;
    }
    let loaded = memory.load()?;
    saw(inner, loaded.revision);
    inner.cache.replace(loaded.clone());
    Ok((loaded, at))
}

/// Refuses a revision lower than one already seen: by this process (a
/// load or a commit), or by the log itself (a complete entry after the
/// revision; a commit's last part moves the revision in the same
/// transaction, so only a revision key set back leaves one).
fn went_back(inner: &Inner, revision: Revision, at: i64) -> Result<(), StoreError> {
    let seen = inner.seen.load(Ordering::Acquire);
    let what = inner.describe.clone();
    if revision < seen {
        return Err(StoreError::WentBack { what, found: revision, seen, how: "seen by this node" });
    }
    let keys = &inner.keys;
    let mut after: BTreeMap<Revision, Vec<(u32, LogPart)>> = BTreeMap::new();
    for kv in inner.range(keys.log_from(revision + 1), &keys.log_end(), at, LOG_PAGE, false)? {
        let key = String::from_utf8(kv.key).map_err(|e| corrupt("a log key", e))?;
        let Some((r, index)) = keys.parse_log_part(&key) else { continue };
        if let Some(part) = LogPart::decode(&kv.value) {
            after.entry(r).or_default().push((index, part));
        }
    }
    match after.iter().rev().find(|(_, parts)| keys::join(parts).is_some()) {
        Some((newest, _)) => {
            Err(StoreError::WentBack { what, found: revision, seen: *newest, how: "written to its log" })
        }
        None => Ok(()),
    }
}

/// Remembers `revision` as seen (the highest one counts).
pub(super) fn saw(inner: &Inner, revision: Revision) {
    inner.seen.fetch_max(revision, Ordering::AcqRel);
}
