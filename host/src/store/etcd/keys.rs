//! Where everything lives under the prefix, and how a turn's bytes are cut
//! into parts that each fit one etcd request. Pure functions: no client.
//!
//! ```text
//! {prefix}schema                       "3" (the schema version, decimal)
//! {prefix}revision                     the store's revision, decimal (absent: 0)
//! {prefix}log/{revision:020}/{part:04} one part of the turn that made `revision`
//!                                      (a `records::Turn`)
//! {prefix}checkpoint                   CheckpointRecord (JSON)
//! {prefix}checkpoint-v3/{revision:020}/{chunk:06}
//!                                      the checkpoint's data (a `records::Checkpoint`)
//! {prefix}blobs/{digest}/meta          BlobRecord (JSON)
//! {prefix}blobs/{digest}/{chunk:04}    up to CHUNK_BYTES of the component
//! {prefix}leader                       the elected node (with its lease)
//! {prefix}v1/…, {prefix}v2/…           the keys of schema 1 or 2 a migration kept
//! ```
//!
//! Schema 1 kept its log entries as JSON turns under the same `log/` keys
//! and its checkpoint's data (JSON) under `checkpoint-data/`; schema 2 its
//! log entries as postcard turns and its checkpoint's data under
//! `checkpoint-v2/` (a `records::v2::Checkpoint`, then the sections its
//! record points to with `loads_at`, `operations_at` and `epochs_at`). A
//! migration copies an older schema's keys under `v{schema}/` and deletes
//! them in the transaction that moves the schema on (`migrate.rs`).

use serde::{Deserialize, Serialize};

use crate::store::SCHEMA_VERSION;

/// At most this many bytes of a turn go in one log part. etcd refuses a
/// request over 1.5 MiB by default (`--max-request-bytes`); a turn is
/// written in as many parts as it needs, the last one moving the revision.
pub const PART_BYTES: usize = 512 * 1024;

/// At most this many bytes of a checkpoint or a blob per key (one request).
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Log parts read per request: `LOG_PAGE * PART_BYTES` stays under the
/// client's 4 MiB answer limit.
pub const LOG_PAGE: i64 = 4;

/// The keys of one store, under its prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (which should end with `/`).
    pub fn new(prefix: &str) -> Self {
        Keys { prefix: prefix.to_owned() }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The schema version's key.
    pub fn schema(&self) -> String {
        format!("{}schema", self.prefix)
    }

    /// The revision's key.
    pub fn revision(&self) -> String {
        format!("{}revision", self.prefix)
    }

    /// The checkpoint record's key.
    pub fn checkpoint(&self) -> String {
        format!("{}checkpoint", self.prefix)
    }

    /// The leader's key (the election).
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// The key naming the node that migrates the store now (`migrate.rs`).
    pub fn migrating(&self) -> String {
        format!("{}migrating", self.prefix)
    }

    /// One part of the turn that made `revision`.
    pub fn log_part(&self, revision: u64, part: u32) -> String {
        format!("{}log/{revision:020}/{part:04}", self.prefix)
    }

    /// The first key of the log parts of `revision` (and of those after it).
    pub fn log_from(&self, revision: u64) -> String {
        format!("{}log/{revision:020}/", self.prefix)
    }

    /// The log's key range end: past every part.
    pub fn log_end(&self) -> String {
        format!("{}log0", self.prefix)
    }

    /// The start of the log.
    pub fn log_start(&self) -> String {
        format!("{}log/", self.prefix)
    }

    /// One chunk of the checkpoint taken at `revision`.
    pub fn checkpoint_chunk(&self, revision: u64, chunk: u32) -> String {
        self.checkpoint_chunk_of(SCHEMA_VERSION, revision, chunk)
    }

    /// One chunk of a checkpoint of schema `schema` taken at `revision`.
    pub fn checkpoint_chunk_of(&self, schema: u64, revision: u64, chunk: u32) -> String {
        format!("{}{revision:020}/{chunk:06}", self.checkpoint_data_of(schema))
    }

    /// The first key of the checkpoint data taken at `revision` (and after).
    pub fn checkpoint_data_from(&self, revision: u64) -> String {
        format!("{}{revision:020}/", self.checkpoint_data_start())
    }

    /// The start of all checkpoint data.
    pub fn checkpoint_data_start(&self) -> String {
        self.checkpoint_data_of(SCHEMA_VERSION)
    }

    /// Where the checkpoint data of schema `schema` lives: schema 1's
    /// under `checkpoint-data/`, each later one's under
    /// `checkpoint-v{schema}/`, so no schema reads another's.
    pub fn checkpoint_data_of(&self, schema: u64) -> String {
        match schema {
            1 => format!("{}checkpoint-data/", self.prefix),
            n => format!("{}checkpoint-v{n}/", self.prefix),
        }
    }

    /// Past all checkpoint data of schema `schema` (`/` + 1).
    pub fn checkpoint_data_end_of(&self, schema: u64) -> String {
        let start = self.checkpoint_data_of(schema);
        format!("{}0", &start[..start.len() - 1])
    }

    /// Where a migration keeps the keys of schema `schema`:
    /// `{prefix}v{schema}/`, each under its name relative to the prefix.
    pub fn copy_of(&self, schema: u64) -> String {
        format!("{}v{schema}/", self.prefix)
    }

    /// Past every key of [`Keys::copy_of`] `schema` (`/` + 1).
    pub fn copy_end_of(&self, schema: u64) -> String {
        format!("{}v{schema}0", self.prefix)
    }

    /// The prefix of every blob key.
    pub fn blobs(&self) -> String {
        format!("{}blobs/", self.prefix)
    }

    /// A blob's description.
    pub fn blob_meta(&self, digest: &str) -> String {
        format!("{}blobs/{digest}/meta", self.prefix)
    }

    /// One chunk of a blob.
    pub fn blob_chunk(&self, digest: &str, chunk: u32) -> String {
        format!("{}blobs/{digest}/{chunk:04}", self.prefix)
    }

    /// The prefix of one blob's keys.
    pub fn blob(&self, digest: &str) -> String {
        format!("{}blobs/{digest}/", self.prefix)
    }

    /// The digest of a blob's description key, if `key` is one.
    pub fn digest_of_meta<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.prefix.as_str())?.strip_prefix("blobs/")?.strip_suffix("/meta")
    }

    /// The (revision, part) of a log part's key.
    pub fn parse_log_part(&self, key: &str) -> Option<(u64, u32)> {
        let rest = key.strip_prefix(self.prefix.as_str())?.strip_prefix("log/")?;
        let (revision, part) = rest.split_once('/')?;
        Some((revision.parse().ok()?, part.parse().ok()?))
    }
}

/// The checkpoint: the whole state as of `revision`, in `chunks` chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The store revision the checkpoint holds.
    pub revision: u64,
    /// How many chunks.
    pub chunks: u32,
    /// `sha256:…` of the chunks' bytes in order.
    pub sha256: String,
    /// Schema 2 only: where the shards' loads (`records::v2::CheckpointLoads`) start in those
    /// bytes, after the `records::Checkpoint`; absent when no shard has a
    /// load (and in every checkpoint written before loads were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loads_at: Option<u64>,
    /// Schema 2 only: where the types' operations (`records::v2::CheckpointOperations`:
    /// freezes and drains) start, after the loads; absent when no type has
    /// a freeze, a freeze history or a drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations_at: Option<u64>,
    /// Schema 2 only: where the types' epochs (`records::v2::CheckpointEpochs`) start, after
    /// the operations; absent when no type has given an epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs_at: Option<u64>,
}

/// A blob's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// Its size in bytes.
    pub size: u64,
    /// How many chunks.
    pub chunks: u32,
}

/// One log part: which commit wrote it (`nonce`), how many parts that
/// commit wrote, and its bytes. A part whose commit never moved the
/// revision is never read; a part left over from such a commit is told
/// apart by its nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPart {
    /// The writing commit's random number.
    pub nonce: u64,
    /// How many parts the commit wrote.
    pub parts: u32,
    /// This part's bytes of the turn.
    pub bytes: Vec<u8>,
}

impl LogPart {
    /// The value stored: nonce, parts (little-endian), then the bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(12 + self.bytes.len());
        value.extend_from_slice(&self.nonce.to_le_bytes());
        value.extend_from_slice(&self.parts.to_le_bytes());
        value.extend_from_slice(&self.bytes);
        value
    }

    /// Reads a stored value back; `None` when it is too short to be one.
    pub fn decode(value: &[u8]) -> Option<LogPart> {
        let nonce = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
        let parts = u32::from_le_bytes(value.get(8..12)?.try_into().ok()?);
        Some(LogPart { nonce, parts, bytes: value[12..].to_vec() })
    }
}

/// `bytes` in pieces of at most `size`; one empty piece for no bytes, so
/// that every value is written as at least one key.
pub fn chunks(bytes: &[u8], size: usize) -> Vec<&[u8]> {
    if bytes.is_empty() { vec![bytes] } else { bytes.chunks(size).collect() }
}

/// Cuts a turn's bytes into parts of at most [`PART_BYTES`] (at least one).
pub fn split(bytes: &[u8], nonce: u64) -> Vec<LogPart> {
    let chunks = chunks(bytes, PART_BYTES);
    let parts = u32::try_from(chunks.len()).expect("a turn is far under 4 GiB parts");
    chunks.into_iter().map(|c| LogPart { nonce, parts, bytes: c.to_vec() }).collect()
}

/// Joins the parts one commit wrote back into its bytes: `found` holds
/// what was found under its revision. Part 0 names the commit (the one that
/// moved the revision wrote all its parts, part 0 first); parts past its
/// count are left-overs of a commit that never moved the revision. `None`
/// when they do not make one whole commit.
pub fn join(found: &[(u32, LogPart)]) -> Option<Vec<u8>> {
    let first = &found.iter().find(|(index, _)| *index == 0)?.1;
    let mut bytes = Vec::new();
    for want in 0..first.parts {
        let (_, part) = found.iter().find(|(index, _)| *index == want)?;
        if part.nonce != first.nonce || part.parts != first.parts {
            return None;
        }
        bytes.extend_from_slice(&part.bytes);
    }
    Some(bytes)
}

/// `sha256:` and the hex digest of `bytes` (as component digests are written).
pub use crate::strategy::source::digest_of as sha256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_revision_and_part_and_parse_back() {
        let keys = Keys::new("/x/");
        assert!(keys.log_part(9, 1) < keys.log_part(10, 0));
        assert!(keys.log_part(10, 9) < keys.log_part(10, 10));
        assert!(keys.log_part(u64::MAX, 9999) < keys.log_end());
        assert!(keys.log_start() < keys.log_part(0, 0));
        assert_eq!(keys.parse_log_part(&keys.log_part(42, 3)), Some((42, 3)));
        assert_eq!(keys.parse_log_part("/x/log/nope"), None);
        assert_eq!(keys.digest_of_meta(&keys.blob_meta("sha256:ab")), Some("sha256:ab"));
        assert_eq!(keys.digest_of_meta(&keys.blob_chunk("sha256:ab", 0)), None);
        assert!(keys.checkpoint_data_from(5) < keys.checkpoint_chunk(5, 0));
        assert!(keys.checkpoint_chunk(5, 999) < keys.checkpoint_data_from(6));
        // A copy's range holds every key under `v{n}/` and nothing else;
        // so does a schema's checkpoint data range.
        for schema in 1..=SCHEMA_VERSION {
            let end = keys.copy_end_of(schema);
            assert_eq!(end.as_bytes(), shardalloc_etcd::ops::prefix_end(keys.copy_of(schema).as_bytes()));
            assert!(format!("{}log/\u{10ffff}", keys.copy_of(schema)) < end, "a copied key inside the range");
            let (start, end) = (keys.checkpoint_data_of(schema), keys.checkpoint_data_end_of(schema));
            assert_eq!(end.as_bytes(), shardalloc_etcd::ops::prefix_end(start.as_bytes()));
            assert!(keys.checkpoint_chunk_of(schema, u64::MAX, 999_999) < end);
        }
    }

    #[test]
    fn a_turn_splits_into_parts_that_join_back() {
        for len in [0, 1, PART_BYTES - 1, PART_BYTES, PART_BYTES + 1, 3 * PART_BYTES + 17] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let parts = split(&bytes, 7);
            assert_eq!(parts.len(), len.div_ceil(PART_BYTES).max(1), "{len}");
            assert!(parts.iter().all(|p| p.bytes.len() <= PART_BYTES));
            let found: Vec<(u32, LogPart)> =
                parts.iter().enumerate().map(|(i, p)| (i as u32, LogPart::decode(&p.encode()).unwrap())).collect();
            assert_eq!(join(&found).unwrap(), bytes, "{len}");
        }
    }

    #[test]
    fn parts_of_two_commits_or_a_missing_part_do_not_join() {
        let bytes = vec![1u8; 2 * PART_BYTES + 1];
        let mut found: Vec<(u32, LogPart)> =
            split(&bytes, 1).into_iter().enumerate().map(|(i, p)| (i as u32, p)).collect();
        found.remove(1);
        assert_eq!(join(&found), None, "a missing part");
        let mut mixed: Vec<(u32, LogPart)> =
            split(&bytes, 1).into_iter().enumerate().map(|(i, p)| (i as u32, p)).collect();
        mixed[2].1.nonce = 2;
        assert_eq!(join(&mixed), None, "parts of two commits");
        assert_eq!(LogPart::decode(&[1, 2, 3]), None);
    }

    #[test]
    fn sha256_names_the_algorithm() {
        assert_eq!(sha256(b"").len(), 7 + 64);
        assert!(sha256(b"abc").starts_with("sha256:ba7816bf"));
    }
}
