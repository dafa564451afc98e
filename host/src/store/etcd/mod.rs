//! [`EtcdStore`]: the [`Store`] contract on etcd, for several nodes with
//! one leader (`shardalloc serve --etcd URL`).
//!
//! - `keys.rs`: where everything lives under the prefix, and how a turn is
//!   cut into parts under etcd's request limit.
//! - `log.rs`: commits (one etcd transaction per part, fenced) and loads
//!   (checkpoint + log, at one etcd revision, paged).
//! - `checkpoint.rs`: folding the log into a checkpoint, in the background.
//! - `blobs.rs`: components in chunks, verified by sha256 when read.
//! - `bridge.rs`: the async client behind the synchronous trait.
//! - `migrate.rs`: a store of schema 1 (JSON) made schema 2 when it opens,
//!   its keys kept under `{prefix}v1/`.
//!
//! ## The log and the checkpoint
//!
//! A turn is written as a log entry under the revision it makes — one
//! transaction of two operations when it fits one part (512 KiB), as many
//! transactions as it has parts otherwise, the last one moving the
//! revision. Every one of them compares, in the same transaction, the
//! revision the commit was based on and (once elected) the leader's fencing
//! revision: the create revision of its election key. A deposed leader's
//! write is refused whole; parts of a commit that never moved the revision
//! are never read. etcd's limits hold by construction: at most four
//! operations per transaction (of 128), at most 512 KiB of turn per request
//! (of 1.5 MiB), log pages of at most 2 MiB and chunks of 1 MiB per answer
//! (of 4 MiB).
//!
//! Every [`EtcdConfig::checkpoint_every`] commits, a background thread
//! writes the whole state as a checkpoint in 1 MiB chunks, then in one
//! fenced transaction points to it and deletes the log it covers and the
//! previous checkpoint, then compacts etcd's history up to that point.
//! A load reads the checkpoint and the log after it at one etcd revision,
//! so a concurrent checkpoint never shows it half.
//!
//! ## What is read from memory
//!
//! The store keeps what it loaded and committed in a [`MemoryStore`]: the
//! admin API's reads of one type and its placement pages come from there
//! (only the leader serves them). Call [`Store::load`] before the first
//! commit.

mod blobs;
pub mod bridge;
mod checkpoint;
pub mod keys;
mod log;
mod migrate;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shardalloc_etcd::{Client, ConnectOptions, KeyValue, TlsOptions, ops, pb};

use self::bridge::Bridge;
use self::keys::Keys;
use super::{Loaded, LoadedType, MemoryStore, Revision, SCHEMA_VERSION, Store, StoreError, Turn};
use crate::coordinator::Home;

/// Every etcd request gives up after this long; the caller sees an error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The default prefix of every key.
pub const DEFAULT_PREFIX: &str = "/shardalloc/";

/// By default, a checkpoint every this many commits.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 2_000;

/// Where the etcd cluster is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs (`http://127.0.0.1:2379`, `https://…`).
    pub endpoints: Vec<String>,
    /// The prefix of every key; ends with `/`.
    pub prefix: String,
    /// etcd user and password, when etcd has authentication on.
    pub user: Option<(String, String)>,
    /// The CA certificate (PEM) that signed etcd's, for `https://` URLs.
    pub ca_cert: Option<PathBuf>,
    /// A client certificate and key (PEM), when etcd asks for one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Fold the log into a checkpoint every this many commits.
    pub checkpoint_every: u64,
    /// Migrate a store of an older schema when it opens (true), or refuse
    /// it with [`StoreError::NotMigrated`] (`--no-migrate`).
    pub migrate: bool,
}

impl EtcdConfig {
    /// Plain connections to `endpoints` under the default prefix.
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConfig {
            endpoints,
            prefix: DEFAULT_PREFIX.to_owned(),
            user: None,
            ca_cert: None,
            client_cert: None,
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
            migrate: true,
        }
    }
}

/// The leader's fence: its election key and that key's create revision.
/// Every write compares it; a write after the key was lost or taken over
/// is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The election key.
    pub key: String,
    /// Its create revision when this node won.
    pub create_revision: i64,
}

/// The etcd store. See the module documentation.
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    bridge: Bridge,
    client: Client,
    keys: Keys,
    cache: MemoryStore,
    fence: Mutex<Option<Fence>>,
    describe: String,
    checkpoint_every: u64,
    since_checkpoint: AtomicU64,
    checkpointing: AtomicBool,
    /// The highest revision this process loaded or committed: a load
    /// below it is refused (`log::went_back`).
    seen: AtomicU64,
}

/// The backend's name in errors.
const BACKEND: &str = "etcd";

fn backend(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend { backend: BACKEND, source: Box::new(error) }
}

fn corrupt(what: impl Into<String>, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { what: what.into(), detail: detail.to_string() }
}

fn read_file(path: &PathBuf) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|error| StoreError::Io { path: path.display().to_string(), error })
}

impl EtcdStore {
    /// Connects, and writes the schema version into an empty prefix; a
    /// store of an older schema is migrated (or refused, without
    /// [`EtcdConfig::migrate`]), one of a newer schema refused.
    pub fn open(config: &EtcdConfig) -> Result<EtcdStore, StoreError> {
        if config.endpoints.is_empty() {
            return Err(StoreError::Backend { backend: BACKEND, source: "no etcd endpoint given".into() });
        }
        if !config.prefix.ends_with('/') {
            return Err(StoreError::Backend {
                backend: BACKEND,
                source: format!("the key prefix {:?} must end with `/`", config.prefix).into(),
            });
        }
        let bridge = Bridge::new().map_err(backend)?;
        let mut options = ConnectOptions {
            timeout: REQUEST_TIMEOUT,
            connect_timeout: REQUEST_TIMEOUT,
            keep_alive: Some((Duration::from_secs(2), REQUEST_TIMEOUT)),
            user: config.user.clone(),
            tls: None,
        };
        if config.ca_cert.is_some() || config.client_cert.is_some() {
            let mut tls = TlsOptions::default();
            if let Some(ca) = &config.ca_cert {
                tls.ca_pem = Some(read_file(ca)?);
            }
            if let Some((cert, key)) = &config.client_cert {
                tls.identity = Some((read_file(cert)?, read_file(key)?));
            }
            options.tls = Some(tls);
        }
        let endpoints = config.endpoints.clone();
        let client = bridge.run(async move { Client::connect(&endpoints, options).await }).map_err(backend)?;
        let keys = Keys::new(&config.prefix);
        let inner = Inner {
            bridge,
            client,
            describe: format!("etcd {} under {}", config.endpoints.join(","), config.prefix),
            keys,
            cache: MemoryStore::new(),
            fence: Mutex::new(None),
            checkpoint_every: config.checkpoint_every.max(1),
            since_checkpoint: AtomicU64::new(0),
            checkpointing: AtomicBool::new(false),
            seen: AtomicU64::new(0),
        };
        let store = EtcdStore { inner: Arc::new(inner) };
        store.inner.init_schema(config.migrate)?;
        Ok(store)
    }

    /// From now on every write compares `fence` (this node was elected).
    pub fn set_fence(&self, fence: Option<Fence>) {
        *self.inner.fence.lock().unwrap_or_else(PoisonError::into_inner) = fence;
    }

    /// The client, for the election (it shares the connections).
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The runtime the client runs on.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.inner.bridge.handle()
    }

    /// The keys' layout.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Writes a checkpoint now and waits for it.
    pub fn checkpoint_now(&self) -> Result<(), StoreError> {
        checkpoint::write(&self.inner)
    }

    /// Drops the copies of older schemas' keys that migrations kept under
    /// `{prefix}v1/` and `{prefix}v2/` (`shardalloc store drop-copies`):
    /// answers each copy's prefix and how many of its keys went. Refused
    /// while the store is not yet migrated, or a migration is under way.
    pub fn drop_kept_copies(&self) -> Result<Vec<(String, i64)>, StoreError> {
        migrate::drop_copies(&self.inner)
    }

    /// Makes `loaded` (another store's whole state) this store's, when its
    /// prefix holds nothing yet (`shardalloc store copy`). Blobs are copied
    /// by the caller with [`Store::put_blob`].
    pub fn import(&self, loaded: Loaded) -> Result<(), StoreError> {
        let current = self.load()?;
        if current.revision != 0 {
            return Err(StoreError::Backend {
                backend: BACKEND,
                source: format!(
                    "{} already holds a store (revision {}); copy into an empty prefix (--etcd-prefix)",
                    self.inner.describe, current.revision
                )
                .into(),
            });
        }
        if loaded.revision == 0 {
            return Ok(());
        }
        self.inner.cache.replace(loaded);
        checkpoint::import(&self.inner)
    }
}

impl Inner {
    fn fence(&self) -> Option<Fence> {
        self.fence.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The fence's comparison, when elected.
    fn fence_compare(&self) -> Option<pb::Compare> {
        self.fence().map(|f| ops::created_at(f.key, f.create_revision))
    }

    /// Runs one request `request(client)` on the client's runtime.
    fn call<T, F>(&self, request: impl FnOnce(Client) -> F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, shardalloc_etcd::Error>> + Send + 'static,
    {
        self.bridge.run(request(self.client.clone())).map_err(backend)
    }

    fn txn(&self, txn: pb::TxnRequest) -> Result<pb::TxnResponse, StoreError> {
        self.call(move |client| async move { client.txn(txn).await })
    }

    fn get(&self, request: pb::RangeRequest) -> Result<Vec<KeyValue>, StoreError> {
        self.call(move |client| async move { client.range(request).await.map(|r| r.kvs) })
    }

    fn get_one(&self, key: String, revision: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let request = pb::RangeRequest { revision, ..ops::range(key) };
        Ok(self.get(request)?.into_iter().next().map(|kv| kv.value))
    }

    /// Every key-value in `[start, end)` at `revision` (0: now), `page` at a time.
    fn range(
        &self,
        start: String,
        end: &str,
        revision: i64,
        page: i64,
        keys_only: bool,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let mut found = Vec::new();
        let mut from = start.into_bytes();
        loop {
            let request = pb::RangeRequest {
                range_end: end.as_bytes().to_vec(),
                revision,
                limit: page,
                keys_only,
                ..ops::range(from.clone())
            };
            let kvs = self.get(request)?;
            let full = kvs.len() as i64 == page;
            if let Some(last) = kvs.last() {
                from = last.key.clone();
                from.push(0);
            }
            found.extend(kvs);
            if !full {
                return Ok(found);
            }
        }
    }

    fn init_schema(&self, migrate: bool) -> Result<(), StoreError> {
        let key = self.keys.schema();
        let txn = ops::txn(
            vec![ops::version_is(key.clone(), 0)],
            vec![ops::put(key.clone(), SCHEMA_VERSION.to_string())],
            vec![ops::get(key.clone())],
        );
        let response = self.txn(txn)?;
        if response.succeeded {
            return Ok(());
        }
        let found = stored_number(&response, &key)?.unwrap_or(SCHEMA_VERSION);
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION });
        }
        if found < SCHEMA_VERSION {
            if !migrate {
                return Err(StoreError::NotMigrated { what: self.describe.clone(), found, current: SCHEMA_VERSION });
            }
            migrate::migrate(self, found)?;
        }
        Ok(())
    }
}

/// The number stored under `key` in a transaction's reads.
fn stored_number(answer: &pb::TxnResponse, key: &str) -> Result<Option<u64>, StoreError> {
    for kvs in ops::txn_reads(answer) {
        if let Some(kv) = kvs.iter().find(|kv| kv.key == key.as_bytes()) {
            let text = std::str::from_utf8(&kv.value).map_err(|e| corrupt(key, e))?;
            return text.parse().map(Some).map_err(|e| corrupt(key, e));
        }
    }
    Ok(None)
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        log::load(&self.inner)
    }

    fn load_type(&self, entity_type: &str) -> Result<Option<LoadedType>, StoreError> {
        self.inner.cache.load_type(entity_type)
    }

    fn placements(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        self.inner.cache.placements(entity_type, after, limit)
    }

    fn homes(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, Home)>>, StoreError> {
        self.inner.cache.homes(entity_type, after, limit)
    }

    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        let revision = log::commit(&self.inner, based_on, turn)?;
        let since = self.inner.since_checkpoint.fetch_add(1, Ordering::Relaxed) + 1;
        if since >= self.inner.checkpoint_every {
            checkpoint::start(&self.inner);
        }
        Ok(revision)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        blobs::put(&self.inner, digest, bytes)
    }

    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        blobs::get(&self.inner, digest)
    }

    fn delete_blob(&self, digest: &str) -> Result<(), StoreError> {
        blobs::delete(&self.inner, digest)
    }

    fn blob_digests(&self) -> Result<Vec<String>, StoreError> {
        blobs::digests(&self.inner)
    }

    fn schema_version(&self) -> Result<u64, StoreError> {
        let key = self.inner.keys.schema();
        let value = self.inner.get_one(key.clone(), 0)?;
        match value {
            None => Ok(SCHEMA_VERSION),
            Some(bytes) => {
                std::str::from_utf8(&bytes).map_err(|e| corrupt(&key, e))?.parse().map_err(|e| corrupt(&key, e))
            }
        }
    }

    fn describe(&self) -> String {
        self.inner.describe.clone()
    }
}
