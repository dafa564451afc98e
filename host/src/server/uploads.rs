//! Uploaded components within bounds: the per-node quota (count and bytes)
//! checked before an upload compiles and again, authoritatively, just
//! before its bytes are stored; and the collection of components no type
//! uses once they are older than the retention.
//!
//! Both hold `AppState::component_writes` while they change what is
//! stored, as the upload and the delete handlers do, so a component's
//! record and its bytes never part.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use shardalloc_proto::api::StoredStrategy;

use super::api_error::{ApiError, ErrorCode};
use super::compile::{CompileSettings, Compiler};
use super::driver::request::AdminRequest;
use super::rest::blocking;
use super::state::AppState;
use crate::engine::component::{self, Contract};
use crate::store::ComponentRecord;

/// Most uploaded components a node stores.
pub const DEFAULT_MAX_COMPONENTS: usize = 100;

/// Most bytes of uploaded components a node stores (16 uploads of the
/// largest size, 32 MiB).
pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 512 << 20;

/// How long an uploaded component no type uses is kept.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How often the node looks for components to collect.
pub const COLLECT_EVERY: Duration = Duration::from_secs(600);

/// The bounds of uploads.
#[derive(Clone, Debug)]
pub struct UploadSettings {
    /// Most components stored ([`DEFAULT_MAX_COMPONENTS`]).
    pub max_components: usize,
    /// Most bytes of components stored ([`DEFAULT_MAX_COMPONENT_BYTES`]).
    pub max_bytes: u64,
    /// Unused components older than this are collected ([`DEFAULT_RETENTION`]).
    pub retention: Duration,
    /// How uploads are compiled.
    pub compile: CompileSettings,
}

impl Default for UploadSettings {
    fn default() -> Self {
        UploadSettings {
            max_components: DEFAULT_MAX_COMPONENTS,
            max_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            retention: DEFAULT_RETENTION,
            compile: CompileSettings::default(),
        }
    }
}

/// What the handlers share about uploads.
#[derive(Debug)]
pub struct Uploads {
    /// The bounds.
    pub settings: UploadSettings,
    /// The compile budget.
    pub compiler: Compiler,
    /// The contract of each component listed or uploaded since the start,
    /// by digest (or built-in name): read once from its bytes. Bounded by
    /// the component quota and the built-ins; a deleted one is forgotten.
    contracts: Mutex<HashMap<String, Contract>>,
}

impl Uploads {
    /// Uploads bounded by `settings`.
    pub fn new(settings: UploadSettings) -> Arc<Self> {
        Arc::new(Uploads {
            compiler: Compiler::new(settings.compile.clone()),
            settings,
            contracts: Mutex::new(HashMap::new()),
        })
    }

    fn known_contract(&self, digest: &str) -> Option<Contract> {
        self.contracts.lock().expect("contracts lock").get(digest).copied()
    }

    fn learn_contract(&self, digest: &str, contract: Contract) {
        self.contracts.lock().expect("contracts lock").insert(digest.to_owned(), contract);
    }

    /// Forgets a deleted component's contract.
    pub fn forget_contract(&self, digest: &str) {
        self.contracts.lock().expect("contracts lock").remove(digest);
    }
}

/// Fills in the contract each listed strategy speaks: known since it was
/// uploaded or last listed, else read from its bytes (a built-in's, or the
/// stored blob, on a blocking thread). One that cannot be read is listed
/// without it, and the read's error is logged.
pub async fn with_contracts(state: &AppState, strategies: &mut [StoredStrategy]) {
    for strategy in strategies.iter_mut() {
        let digest = strategy.digest.clone();
        let contract = match state.uploads.known_contract(&digest) {
            Some(contract) => Some(contract),
            None => {
                let store = state.store.clone();
                let read: Result<Option<Vec<u8>>, String> = if digest.starts_with("sha256:") {
                    let digest = digest.clone();
                    match blocking(move || store.blob(&digest)).await {
                        Ok(read) => read.map_err(|e| e.to_string()),
                        Err(error) => Err(format!("{error:?}")),
                    }
                } else {
                    Ok(crate::strategy::builtin::component_bytes(&digest).map(<[u8]>::to_vec))
                };
                match read {
                    Ok(bytes) => {
                        let contract = bytes.as_deref().and_then(component::contract_of);
                        if let Some(contract) = contract {
                            state.uploads.learn_contract(&digest, contract);
                        }
                        contract
                    }
                    Err(error) => {
                        tracing::warn!(%digest, "cannot read the component to list its contract: {error}");
                        None
                    }
                }
            }
        };
        strategy.contract = contract.map(Contract::name);
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// 507 `component-quota` unless one more component of `size` bytes fits
/// (a digest already stored always does).
async fn check_quota(state: &AppState, digest: &str, size: u64) -> Result<(), ApiError> {
    let digest = digest.to_owned();
    let stored = state.driver.ask(|reply| AdminRequest::StoredComponents { digest, reply }).await?;
    let settings = &state.uploads.settings;
    if stored.has_digest {
        return Ok(());
    }
    let full = |what: String| {
        let message = format!(
            "{what}; this node stores {} components ({}): delete the ones no type uses \
             (`shardalloc strategies delete DIGEST`), or raise the quota",
            stored.count,
            mib(stored.bytes)
        );
        Err(ApiError::new(StatusCode::INSUFFICIENT_STORAGE, ErrorCode::ComponentQuota, message))
    };
    if stored.count >= settings.max_components {
        return full(format!("the component quota (max-components) is {} components", settings.max_components));
    }
    if stored.bytes + size > settings.max_bytes {
        return full(format!(
            "this component ({}) would pass the byte quota (max-component-bytes-mib) of {}",
            mib(size),
            mib(settings.max_bytes)
        ));
    }
    Ok(())
}

/// Uploads `body`: quota, compile within the budget, quota again, bytes,
/// record.
pub async fn upload(state: &AppState, body: bytes::Bytes) -> Result<StoredStrategy, ApiError> {
    let size = body.len() as u64;
    let digest = crate::strategy::source::digest_of(&body);
    check_quota(state, &digest, size).await?;
    tracing::info!(bytes = size, "compiling an uploaded component");
    let compiled = state.uploads.compiler.compile(&state.engine, body.clone()).await?;
    let record = ComponentRecord {
        digest: compiled.digest.clone(),
        name: compiled.info.name.clone(),
        version: compiled.info.version.clone(),
        size,
        uploaded_at_ms: crate::clock::wall_clock_ms(),
    };
    // The bytes first, then the record: a crash between leaves bytes that
    // the next start collects, never a record without bytes.
    let _writes = state.component_writes.lock().await;
    check_quota(state, &digest, size).await?;
    let (store, digest) = (state.store.clone(), record.digest.clone());
    blocking(move || store.put_blob(&digest, &body)).await?.map_err(ApiError::store)?;
    state.uploads.learn_contract(&record.digest, compiled.contract);
    let stored = StoredStrategy {
        digest: record.digest.clone(),
        name: record.name.clone(),
        version: record.version.clone(),
        size: record.size,
        active_in: Vec::new(),
        contract: Some(compiled.contract.name()),
    };
    state.driver.ask(|reply| AdminRequest::AddComponent { record, reply }).await?;
    Ok(stored)
}

/// Collects the components no type uses that are older than the
/// retention: their records in one turn, then their bytes. Returns their
/// digests.
pub async fn collect(state: &AppState) -> Result<Vec<String>, ApiError> {
    let _writes = state.component_writes.lock().await;
    let retention_ms = state.uploads.settings.retention.as_millis() as u64;
    let engine = state.engine.clone();
    let in_flight = Box::new(move |digest: &str| engine.holds(digest));
    let now_ms = crate::clock::wall_clock_ms();
    let collected =
        state.driver.ask(|reply| AdminRequest::CollectComponents { now_ms, retention_ms, in_flight, reply }).await?;
    for digest in &collected {
        state.uploads.forget_contract(digest);
    }
    let (store, digests) = (state.store.clone(), collected.clone());
    blocking(move || {
        for digest in &digests {
            if let Err(error) = store.delete_blob(digest) {
                tracing::warn!(%digest, %error, "cannot delete a collected component's bytes; the next start does");
            }
        }
    })
    .await?;
    Ok(collected)
}

/// Collects every [`COLLECT_EVERY`] until the node shuts down (on a
/// follower, the driver is elsewhere and each round is skipped).
pub fn start_collecting(state: AppState) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(COLLECT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = state.shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            match collect(&state).await {
                Ok(collected) if !collected.is_empty() => {
                    tracing::info!(count = collected.len(), "unused uploaded components collected");
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error.message, "no collection of uploaded components this round"),
            }
        }
    });
}
