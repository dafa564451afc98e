//! Loading a driver: every stored type opened, the declared ones created,
//! the first commit, and the bytes of components no record names deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::catalog::{CatalogSettings, TypeCatalog};
use super::sessions::Sessions;
use super::{Driver, DriverError, DriverSettings};
use crate::clock::StampSequence;
use crate::coordinator::Millis;
use crate::engine::Engine;
use crate::server::metrics::Metrics;
use crate::store::{Store, Turn};

impl Driver {
    /// Loads every stored type, declares the configured ones that are not
    /// stored, and commits, at time `now`.
    pub fn load(
        store: Arc<dyn Store>,
        engine: Arc<Engine>,
        settings: DriverSettings,
        metrics: Arc<Metrics>,
        now: Millis,
    ) -> Result<Self, DriverError> {
        settings.coordinator.validate()?;
        let started = std::time::Instant::now();
        let mut loaded = store.load()?;
        let read = started.elapsed();
        // Components recorded before upload times were kept age from now.
        let wall = settings.clocks.wall();
        loaded.components.values_mut().filter(|c| c.uploaded_at_ms == 0).for_each(|c| c.uploaded_at_ms = wall);
        // The events' term: the leadership's (unique per election) when
        // elected; a node alone commits once at start and takes that
        // revision, so every start numbers its events under a term no
        // earlier start used and a resume from before a restart is told
        // `missed` instead of meeting the new start's numbers.
        let term = match settings.lease {
            Some(_) => settings.term,
            None => {
                loaded.revision = store.commit(loaded.revision, &Turn::default())?;
                loaded.revision
            }
        };
        settings.events.begin_term(term);
        let catalog_settings = CatalogSettings {
            coordinator: settings.coordinator.clone(),
            type_settings: settings.type_settings.clone(),
            limits: settings.limits,
            auto_rollback: settings.auto_rollback,
            default_strategy: settings.default_strategy.clone(),
            clocks: settings.clocks.clone(),
        };
        let catalog = TypeCatalog::new(engine, store.clone(), metrics.clone(), catalog_settings, loaded.components);
        // Placement writes are ordered after every one the store holds.
        let stamps = StampSequence::after(
            loaded.types.values().flat_map(|t| t.durable.placements.values()).map(|entry| entry.stamp.timestamp),
        );
        let mut driver = Driver {
            catalog,
            sessions: Sessions::default(),
            store,
            metrics,
            origin: settings.origin.clone(),
            declared: settings.types.keys().cloned().collect(),
            auto_create_types: settings.auto_create_types,
            retiring: BTreeMap::new(),
            readiness: None,
            revision: loaded.revision,
            lease: settings.lease.clone(),
            turn: Turn::default(),
            batches: BTreeMap::new(),
            released: Vec::new(),
            waiters: HashMap::new(),
            drains: HashMap::new(),
            freeze_waits: HashMap::new(),
            next_request: 1,
            decisions: Vec::new(),
            events: settings.events.clone(),
            term,
            now,
            next_tick: now,
            next_gauges: now,
            stamps,
            writes: Default::default(),
        };
        for (name, loaded_type) in loaded.types {
            let strategy = loaded_type.record.as_ref().map(|r| r.strategy.to_string()).unwrap_or_default();
            let commands = driver.catalog.open(&name, loaded_type, now).map_err(|reason| DriverError::Strategy {
                entity_type: name.clone(),
                strategy,
                reason,
            })?;
            driver.execute(&name, commands);
        }
        for (name, declaration) in settings.types {
            if driver.catalog.contains(&name) {
                continue;
            }
            let commands = driver
                .catalog
                .create(&name, &declaration.strategy, &declaration.config, now, &mut driver.turn)
                .map_err(|reason| DriverError::Strategy {
                    entity_type: name.clone(),
                    strategy: declaration.strategy.to_string(),
                    reason,
                })?;
            driver.execute(&name, commands);
            driver.inherit_cluster_freeze(&name);
        }
        driver.commit()?;
        driver.collect_orphan_blobs();
        tracing::info!(
            types = driver.catalog.iter().count(),
            read_ms = read.as_millis() as u64,
            recovered_ms = (started.elapsed() - read).as_millis() as u64,
            "the coordinators are loaded from the store"
        );
        Ok(driver)
    }

    /// Deletes blobs no component record refers to: left by a crash between
    /// a blob's write and its record, or between a record's removal and the
    /// blob's deletion. Only at start-up, before anything uploads.
    fn collect_orphan_blobs(&self) {
        let digests = match self.store.blob_digests() {
            Ok(digests) => digests,
            Err(error) => return tracing::warn!(%error, "cannot list the stored components"),
        };
        for digest in digests.iter().filter(|d| !self.catalog.components().contains_key(*d)) {
            match self.store.delete_blob(digest) {
                Ok(()) => tracing::info!(%digest, "deleted the bytes of a component no longer recorded"),
                Err(error) => tracing::warn!(%digest, %error, "cannot delete a component's bytes"),
            }
        }
    }
}
