//! Migrating a store of an older schema (1 or 2) to [`SCHEMA_VERSION`] when
//! it opens.
//!
//! 1. Refused while `{prefix}leader` exists: a node of the older version
//!    may lead and keep writing schema 1 (stop those nodes first; the key
//!    goes when its lease runs out).
//! 2. The state is read as the older schema (checkpoint and log) at one
//!    etcd revision.
//! 3. The node takes the migration over: in one transaction it deletes
//!    what an earlier attempt left under `{prefix}v{schema}/` and writes its
//!    own token to `{prefix}migrating`. Every key of that revision but the
//!    blobs, the leader's and earlier copies is then copied under
//!    `{prefix}v{schema}/` (one put a
//!    request: each value is at most a chunk or a log part), each put only
//!    while the token is still this node's. A node that starts migrating
//!    later takes over, and the earlier one, its next write refused, waits
//!    (at most [`TAKEN_OVER_WAIT`]) for the later one's switch: the copy
//!    that stands is always one node's whole copy.
//! 4. The state is written as a current checkpoint's chunks (under the
//!    current schema's own `checkpoint-v{n}/`, which no older schema reads).
//! 5. One transaction makes the current schema visible: if the schema, the
//!    revision and the absent leader are unchanged, it points `checkpoint`
//!    to the new chunks, deletes the older log and checkpoint data and the
//!    token, and moves `schema` on (only while the token is this node's).
//!    Until it succeeds the store is the older store it was (a crash midway
//!    only leaves keys no older reader looks at), so the next start
//!    migrates again.
//!
//! Blobs are stored alike in both schemas, and stay where they are.

use std::sync::atomic::Ordering;

use shardalloc_etcd::ops;

use super::{BACKEND, Inner, checkpoint, log};
use crate::store::{SCHEMA_VERSION, StoreError};

/// How long a node whose migration another node took over waits for that
/// node to finish before it gives up (and says to start again).
pub const TAKEN_OVER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

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
    let (owner, token) = (keys.migrating(), super::log::nonce().to_string());
    let mine = || {
        let mut compares = unchanged();
        compares.push(ops::value_is(owner.clone(), token.clone()));
        compares
    };

    // The copy of every schema-1 key, as of `at`, by this node alone.
    let copy = keys.copy_of(found);
    let take_over =
        vec![ops::delete_range(copy.clone(), keys.copy_end_of(found)), ops::put(owner.clone(), token.clone())];
    if !inner.txn(ops::txn(unchanged(), take_over, Vec::new()))?.succeeded {
        return migrated_elsewhere(inner, found);
    }
    let prefix_end = String::from_utf8(ops::prefix_end(keys.prefix().as_bytes())).expect("a UTF-8 prefix");
    let mut skipped = vec![keys.blobs(), keys.leader(), owner.clone()];
    skipped.extend((1..SCHEMA_VERSION).map(|schema| keys.copy_of(schema)));
    let mut copied = 0usize;
    for kv in inner.range(keys.prefix().to_owned(), &prefix_end, at, 1_000, true)? {
        let key = String::from_utf8(kv.key).map_err(|e| super::corrupt("a key", e))?;
        if skipped.iter().any(|s| key.starts_with(s.as_str())) {
            continue;
        }
        let Some(value) = inner.get_one(key.clone(), at)? else { continue };
        let name = &key[keys.prefix().len()..];
        if !inner.txn(ops::txn(mine(), vec![ops::put(format!("{copy}{name}"), value)], Vec::new()))?.succeeded {
            return taken_over(inner, found);
        }
        copied += 1;
    }

    // The state as the current schema, and the switch.
    let revision_key = keys.revision();
    let mut compares = vec![
        ops::value_is(keys.schema(), found.to_string()),
        ops::value_is(owner.clone(), token.clone()),
        ops::version_is(keys.leader(), 0),
        if revision == 0 {
            ops::version_is(revision_key, 0)
        } else {
            ops::value_is(revision_key, revision.to_string())
        },
    ];
    let mut writes = vec![
        ops::delete_range(keys.log_start(), keys.log_end()),
        ops::delete_range(keys.checkpoint_data_of(found), keys.checkpoint_data_end_of(found)),
        ops::put(keys.schema(), SCHEMA_VERSION.to_string()),
        ops::delete(owner.clone()),
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
        if owner_now(inner)?.as_deref() != Some(token.as_str()) {
            return taken_over(inner, found);
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
        copied_keys = copied,
        ms = started.elapsed().as_millis() as u64,
        copy = %copy,
        "migrated the store to the current schema; its older keys are kept under the copy's prefix until you \
         delete them"
    );
    Ok(())
}

/// Deletes the keys of older schemas that migrations kept under
/// `{prefix}v{schema}/`, in one transaction that holds only while the store
/// is at [`SCHEMA_VERSION`] and no migration is under way; answers each
/// copy's prefix and how many of its keys went (0 when none was kept, or
/// it was dropped before).
pub(super) fn drop_copies(inner: &Inner) -> Result<Vec<(String, i64)>, StoreError> {
    let keys = &inner.keys;
    let guards = vec![ops::value_is(keys.schema(), SCHEMA_VERSION.to_string()), ops::version_is(keys.migrating(), 0)];
    let older = 1..SCHEMA_VERSION;
    let drop = older.clone().map(|schema| ops::delete_range(keys.copy_of(schema), keys.copy_end_of(schema))).collect();
    let answer = inner.txn(ops::txn(guards, drop, Vec::new()))?;
    if answer.succeeded {
        let deleted = answer.responses.iter().map(|op| match &op.response {
            Some(shardalloc_etcd::pb::response_op::Response::ResponseDeleteRange(deleted)) => deleted.deleted,
            _ => 0,
        });
        return Ok(older.map(|schema| keys.copy_of(schema)).zip(deleted).collect());
    }
    Err(refused(match (schema_now(inner)?, owner_now(inner)?) {
        (_, Some(_)) => format!(
            "{} is being migrated by a node now: the copies of older schemas are dropped only after the migration, \
             try again once that node has started",
            inner.describe
        ),
        (Some(schema), None) if schema < SCHEMA_VERSION => format!(
            "{} holds schema {schema}: it is not migrated yet to schema {SCHEMA_VERSION}, so its keys are the store \
             itself, not a copy; start a node of this version to migrate it first",
            inner.describe
        ),
        (schema, None) => format!(
            "{} holds schema {}, not {SCHEMA_VERSION}: this shardalloc does not drop its keys",
            inner.describe,
            schema.map_or_else(|| "none".to_owned(), |v| v.to_string())
        ),
    }))
}

/// The token of the node migrating the store now, if any.
fn owner_now(inner: &Inner) -> Result<Option<String>, StoreError> {
    let kvs = inner.get(ops::range(inner.keys.migrating()))?;
    Ok(kvs.first().map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
}

/// Another node took this node's migration over (or finished it): wait, at
/// most [`TAKEN_OVER_WAIT`], for the store to reach the current schema.
fn taken_over(inner: &Inner, found: u64) -> Result<(), StoreError> {
    let until = std::time::Instant::now() + TAKEN_OVER_WAIT;
    loop {
        match schema_now(inner)? {
            Some(SCHEMA_VERSION) => return migrated_elsewhere(inner, found),
            Some(schema) if schema == found && std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => {
                return Err(refused(format!(
                    "{} was being migrated from schema {found} by another node, which took the migration over \
                     from this one and has not finished it within {} s: start this node again",
                    inner.describe,
                    TAKEN_OVER_WAIT.as_secs()
                )));
            }
        }
    }
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
