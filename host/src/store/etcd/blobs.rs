//! Component blobs in chunks of at most 1 MiB (one request each), the
//! description last, so a blob without its description is never read;
//! verified against their digest when read.

use shardalloc_etcd::ops;

use super::keys::{BlobRecord, CHUNK_BYTES, chunks, sha256};
use super::{Inner, corrupt};
use crate::store::StoreError;

/// Blob descriptions listed per request.
const LIST_PAGE: i64 = 1_000;

pub(super) fn put(inner: &Inner, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let chunks = chunks(bytes, CHUNK_BYTES);
    for (index, chunk) in chunks.iter().enumerate() {
        let put = ops::put(inner.keys.blob_chunk(digest, index as u32), chunk.to_vec());
        inner.txn(ops::txn(Vec::new(), vec![put], Vec::new()))?;
    }
    let record = BlobRecord { size: bytes.len() as u64, chunks: chunks.len() as u32 };
    let record = serde_json::to_vec(&record).map_err(|e| corrupt(digest, e))?;
    inner.txn(ops::txn(Vec::new(), vec![ops::put(inner.keys.blob_meta(digest), record)], Vec::new()))?;
    Ok(())
}

pub(super) fn get(inner: &Inner, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let meta_key = inner.keys.blob_meta(digest);
    let Some(meta) = inner.get_one(meta_key.clone(), 0)? else { return Ok(None) };
    let record: BlobRecord = serde_json::from_slice(&meta).map_err(|e| corrupt(&meta_key, e))?;
    let mut bytes = Vec::with_capacity(record.size as usize);
    for index in 0..record.chunks {
        let key = inner.keys.blob_chunk(digest, index);
        let chunk =
            inner.get_one(key.clone(), 0)?.ok_or_else(|| corrupt(&key, "a chunk of the component is missing"))?;
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != record.size || sha256(&bytes) != digest {
        return Err(corrupt(meta_key, "the component's chunks do not match its digest"));
    }
    Ok(Some(bytes))
}

pub(super) fn delete(inner: &Inner, digest: &str) -> Result<(), StoreError> {
    let key = inner.keys.blob(digest);
    inner.call(move |client| async move { client.delete_range(ops::delete_prefix(key)).await })?;
    Ok(())
}

pub(super) fn digests(inner: &Inner) -> Result<Vec<String>, StoreError> {
    let start = inner.keys.blobs();
    let end = format!("{}blobs0", inner.keys.prefix());
    let kvs = inner.range(start, &end, 0, LIST_PAGE, true)?;
    let mut digests = Vec::new();
    for kv in &kvs {
        let key = std::str::from_utf8(&kv.key).map_err(|e| corrupt("a blob key", e))?;
        if let Some(digest) = inner.keys.digest_of_meta(key) {
            digests.push(digest.to_owned());
        }
    }
    Ok(digests)
}
