//! Migrating a store of schema 1 to [`SCHEMA_VERSION`] when it opens.
//!
//! 1. Refused while `{prefix}leader` exists: a node of the older version
//!    may lead and keep writing schema 1 (stop those nodes first; the key
//!    goes when its lease runs out).
//! 2. The state is read as schema 1 (checkpoint and log) at one etcd
//!    revision.
//! 3. Every key of that revision but the blobs and the leader's is copied
//!    under `{prefix}v1/` (one put a request: each value is at most a chunk
//!    or a log part), after deleting what an earlier attempt left there.
//! 4. The state is written as a schema-2 checkpoint's chunks
//!    (`checkpoint-v2/`, which schema 1 never reads).
//! 5. One transaction makes schema 2 visible: if the schema, the revision
//!    and the absent leader are unchanged, it points `checkpoint` to the
//!    new chunks, deletes the schema-1 log and checkpoint data, and moves
//!    `schema` to 2. Until it succeeds the store is the schema-1 store it
//!    was (a crash midway only leaves keys no schema-1 reader looks at), so
//!    the next start migrates again.
//!
//! Blobs are stored alike in both schemas, and stay where they are.

use std::sync::atomic::Ordering;

use shardalloc_etcd::ops;

use super::{BACKEND, Inner, checkpoint, log};
use crate::store::{SCHEMA_VERSION, StoreError};

fn refused(detail: String) -> StoreError {
    StoreError::Backend { backend: BACKEND, source: detail.into() }
}

/// Migrates the store from schema `found`. See the module documentation.
pub(super) fn migrate(inner: &Inner, found: u64) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let keys = &inner.keys;
    let what = &inner.describe;
    if !inner.get(ops::range(keys.leader()))?.is_empty() {
        return Err(refused(format!(
            "{what} holds schema version {found} and a node leads it ({}): stop every node of the older \
             version and start this one again to migrate the store to schema {SCHEMA_VERSION} (the key goes \
             when its lease runs out)",
            keys.leader()
        )));
    }
    let (loaded, at) = match log::load_schema(inner, found) {
        Ok(read) => read,
        // Another node of this version switched the store meanwhile.
        Err(_) if schema_now(inner)? == Some(SCHEMA_VERSION) => return migrated_elsewhere(inner, found),
        Err(error) => return Err(error),
    };
    let revision = loaded.revision;
    // Every write below holds only while the store is still at `found`: a
    // node migrating beside this one never has its copy or switch undone.
    let unchanged = || vec![ops::value_is(keys.schema(), found.to_string())];

    // The copy of every schema-1 key, as of `at`.
    let copy = keys.v1_copy();
    let copy_end = String::from_utf8(ops::prefix_end(copy.as_bytes())).expect("a prefix ending in `/`");
    if !inner.txn(ops::txn(unchanged(), vec![ops::delete_range(copy.clone(), copy_end)], Vec::new()))?.succeeded {
        return migrated_elsewhere(inner, found);
    }
    let prefix_end = String::from_utf8(ops::prefix_end(keys.prefix().as_bytes())).expect("a UTF-8 prefix");
    let skipped = [keys.blobs(), keys.leader(), copy.clone()];
    let mut copied = 0usize;
    for kv in inner.range(keys.prefix().to_owned(), &prefix_end, at, 1_000, true)? {
        let key = String::from_utf8(kv.key).map_err(|e| super::corrupt("a key", e))?;
        if skipped.iter().any(|s| key.starts_with(s.as_str())) {
            continue;
        }
        let Some(value) = inner.get_one(key.clone(), at)? else { continue };
        let name = &key[keys.prefix().len()..];
        if !inner.txn(ops::txn(unchanged(), vec![ops::put(format!("{copy}{name}"), value)], Vec::new()))?.succeeded {
            return migrated_elsewhere(inner, found);
        }
        copied += 1;
    }

    // The state as schema 2, and the switch.
    let revision_key = keys.revision();
    let mut compares = vec![
        ops::value_is(keys.schema(), found.to_string()),
        ops::version_is(keys.leader(), 0),
        if revision == 0 {
            ops::version_is(revision_key, 0)
        } else {
            ops::value_is(revision_key, revision.to_string())
        },
    ];
    let mut writes = vec![
        ops::delete_range(keys.log_start(), keys.log_end()),
        ops::delete_range(keys.v1_checkpoint_data_start(), keys.v1_checkpoint_data_end()),
        ops::put(keys.schema(), SCHEMA_VERSION.to_string()),
    ];
    let mut bytes = 0;
    if revision > 0 {
        let (record, size) = checkpoint::write_chunks(inner, &loaded, &[])?;
        bytes = size;
        let record = serde_json::to_vec(&record).map_err(|e| super::corrupt("the checkpoint record", e))?;
        writes.push(ops::put(keys.checkpoint(), record));
    } else {
        compares.push(ops::version_is(keys.checkpoint(), 0));
    }
    if !inner.txn(ops::txn(compares, writes, Vec::new()))?.succeeded {
        if schema_now(inner)? == Some(SCHEMA_VERSION) {
            return migrated_elsewhere(inner, found);
        }
        return Err(refused(format!(
            "{what} changed while it was migrated from schema {found} (a node of the older version wrote to it); \
             it is still schema {found}: stop every node of the older version and start this one again"
        )));
    }
    inner.since_checkpoint.store(0, Ordering::Relaxed);
    let (types, homes, placements) = loaded
        .types
        .values()
        .fold((0, 0, 0), |(t, h, p), one| (t + 1, h + one.durable.homes.len(), p + one.durable.placements.len()));
    tracing::warn!(
        store = %what,
        from = found,
        to = SCHEMA_VERSION,
        revision,
        types,
        homes,
        placements,
        checkpoint_bytes = bytes,
        v1_keys = copied,
        ms = started.elapsed().as_millis() as u64,
        copy = %copy,
        "migrated the store to the current schema; its schema-1 keys are kept under the copy's prefix until you \
         delete them"
    );
    Ok(())
}

/// The schema the store holds now, if it says.
fn schema_now(inner: &Inner) -> Result<Option<u64>, StoreError> {
    let kvs = inner.get(ops::range(inner.keys.schema()))?;
    Ok(kvs.first().and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok()))
}

/// Another node moved the store on from schema `found` while this one
/// migrated it: fine if it is now the current schema (that node's copy and
/// switch stand), refused otherwise.
fn migrated_elsewhere(inner: &Inner, found: u64) -> Result<(), StoreError> {
    match schema_now(inner)? {
        Some(SCHEMA_VERSION) => {
            tracing::info!(store = %inner.describe, from = found, "another node migrated the store meanwhile");
            Ok(())
        }
        other => Err(refused(format!(
            "{} changed while it was migrated from schema {found} (it now says schema {}): start this node again",
            inner.describe,
            other.map_or_else(|| "none".to_owned(), |v| v.to_string())
        ))),
    }
}
