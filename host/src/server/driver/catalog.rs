//! [`TypeCatalog`]: every entity type the node serves, with its coordinator,
//! its strategy slot and its activation history, and the uploaded
//! components. It declares, opens, activates and rolls back; every change of
//! a type's active strategy (an operator's activation, a rollback, an
//! automatic rollback) arrives as a slot event and is recorded in one place,
//! [`TypeCatalog::record_changes`], into the history and the turn.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

pub use super::entry::TypeEntry;
use super::request::{Candidate, Refusal};
use crate::clock::Clocks;
use crate::coordinator::{Command, Config, Coordinator, Durable, Millis, TypeSettings};
use crate::engine::Engine;
use crate::engine::component::Compiled;
use crate::engine::limits::Limits;
use crate::engine::slot::{Activation, ActivationChanged, AutoRollback, RollbackError, Slot};
use crate::engine::source::SourceLoadError;
use crate::server::metrics::{Metrics, RegionGauges, TypeGauges};
use crate::store::{ActivationRecord, ComponentRecord, LoadedType, Store, Turn, TypeRecord};
use crate::strategy::external::ExternalAllocation;
use crate::strategy::guarded::Guarded;
use crate::strategy::source::digest_of as digest;
use crate::strategy::{ActivationCause, StrategySource, builtin};

/// Most entity types.
pub const MAX_TYPES: usize = 1_024;

/// What every type's coordinator and slot are made with.
#[derive(Clone, Debug)]
pub struct CatalogSettings {
    /// Every coordinator's settings.
    pub coordinator: Config,
    /// A type's own settings over `coordinator`, by type.
    pub type_settings: BTreeMap<String, TypeSettings>,
    /// Sandbox limits of strategies.
    pub limits: Limits,
    /// Automatic rollback of a faulting new activation.
    pub auto_rollback: AutoRollback,
    /// The strategy of a type created by a region's registration (and of a
    /// stored type that was never declared).
    pub default_strategy: StrategySource,
    /// The driver's clocks, which every slot reads too (`crate::clock`).
    pub clocks: Arc<dyn Clocks>,
}

impl CatalogSettings {
    /// The coordinator settings of type `name`: the node's, with the type's own over them.
    pub fn config_of(&self, name: &str) -> Config {
        self.type_settings.get(name).map_or_else(|| self.coordinator.clone(), |own| own.over(&self.coordinator))
    }
}

/// Every entity type and uploaded component. See the module documentation.
pub struct TypeCatalog {
    types: BTreeMap<String, TypeEntry>,
    components: BTreeMap<String, ComponentRecord>,
    builtin_digests: BTreeMap<String, &'static str>,
    engine: Arc<Engine>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    settings: CatalogSettings,
    changes: Receiver<ActivationChanged>,
    report: Sender<ActivationChanged>,
}

impl TypeCatalog {
    /// An empty catalog knowing `components`.
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: CatalogSettings,
        components: BTreeMap<String, ComponentRecord>,
    ) -> Self {
        let builtin_digests =
            builtin::names().map(|name| (digest(builtin::component_bytes(name).expect("listed")), name)).collect();
        let (report, changes) = channel();
        TypeCatalog {
            types: BTreeMap::new(),
            components,
            builtin_digests,
            engine,
            store,
            metrics,
            settings,
            changes,
            report,
        }
    }

    /// A type by name.
    pub fn get(&self, name: &str) -> Result<&TypeEntry, Refusal> {
        self.types.get(name).ok_or_else(|| Refusal::UnknownType(name.to_owned()))
    }

    /// A type by name, to change.
    pub fn get_mut(&mut self, name: &str) -> Result<&mut TypeEntry, Refusal> {
        self.types.get_mut(name).ok_or_else(|| Refusal::UnknownType(name.to_owned()))
    }

    /// True when the type exists.
    pub fn contains(&self, name: &str) -> bool {
        self.types.contains_key(name)
    }

    /// Every type, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &TypeEntry)> {
        self.types.iter()
    }

    /// Every type's figures for the gauges.
    pub fn gauges(&self) -> impl Iterator<Item = TypeGauges<'_>> {
        self.types.iter().map(|(name, entry)| TypeGauges {
            name,
            regions: (entry.coordinator.durable().regions.values())
                .map(|region| RegionGauges {
                    address: &region.address,
                    status: entry.region_status(&region.address),
                    draining: region.draining,
                    shards: region.shards.len(),
                    load: entry.coordinator.region_load(&region.address),
                })
                .collect(),
            placements: entry.coordinator.live_placement_count(),
            frozen: match entry.coordinator.freezes() {
                f if f.strict() => 2,
                f if f.frozen() => 1,
                _ => 0,
            },
        })
    }

    /// Every type's name.
    pub fn names(&self) -> Vec<String> {
        self.types.keys().cloned().collect()
    }

    /// The uploaded components, by digest.
    pub fn components(&self) -> &BTreeMap<String, ComponentRecord> {
        &self.components
    }

    /// Compiles a built-in, or an uploaded component read from the store.
    pub fn compile(&self, source: &StrategySource) -> Result<Arc<Compiled>, SourceLoadError> {
        let uploaded = |digest: &str| match self.components.contains_key(digest) {
            true => self.store.blob(digest).map_err(|e| e.to_string()),
            false => Ok(None),
        };
        self.engine.compile_source(source, Some(&uploaded))
    }

    /// The name operators use for a compiled strategy: an uploaded
    /// component's digest (even when its bytes are a built-in's, so it cannot
    /// be deleted while active), else the built-in's name.
    pub fn source_of(&self, compiled: &Compiled) -> StrategySource {
        if !self.components.contains_key(&compiled.digest)
            && let Some(name) = self.builtin_digests.get(&compiled.digest)
        {
            return StrategySource::Builtin((*name).to_owned());
        }
        StrategySource::Digest(compiled.digest.clone())
    }

    /// Opens a stored type: its coordinator recovered from the store, its
    /// slot loaded with its declared strategy. Returns recovery's commands.
    pub fn open(&mut self, name: &str, loaded: LoadedType, now: Millis) -> Result<Vec<Command>, String> {
        let record = loaded
            .record
            .clone()
            .unwrap_or_else(|| TypeRecord { strategy: self.settings.default_strategy.clone(), config: String::new() });
        let compiled = self.compile(&record.strategy).map_err(|e| e.to_string())?;
        self.install(name, record, compiled, loaded.durable, loaded.activations, now)
    }

    /// Creates a type with a strategy, recording it in `turn`. A file
    /// source (from the command line) is uploaded first and named by digest.
    pub fn create(
        &mut self,
        name: &str,
        source: &StrategySource,
        config: &str,
        now: Millis,
        turn: &mut Turn,
    ) -> Result<Vec<Command>, String> {
        shardalloc_client::protocol::check_type_name(name)?;
        if self.types.len() >= MAX_TYPES {
            return Err(format!("{MAX_TYPES} entity types exist, the most allowed"));
        }
        let (source, compiled) = match source {
            StrategySource::File(_) => {
                let bytes = crate::engine::source::read(source, None).map_err(|e| e.to_string())?;
                let compiled = self.engine.compile(&bytes).map_err(|e| format!("{source}: {e}"))?;
                self.store.put_blob(&compiled.digest, &bytes).map_err(|e| e.to_string())?;
                let record = ComponentRecord {
                    digest: compiled.digest.clone(),
                    name: compiled.info.name.clone(),
                    version: compiled.info.version.clone(),
                    size: bytes.len() as u64,
                    uploaded_at_ms: self.settings.clocks.wall(),
                };
                self.add_component(record, turn);
                (StrategySource::Digest(compiled.digest.clone()), compiled)
            }
            other => (other.clone(), self.compile(other).map_err(|e| e.to_string())?),
        };
        let record = TypeRecord { strategy: source, config: config.to_owned() };
        let commands = self.install(name, record.clone(), compiled, Durable::default(), Vec::new(), now)?;
        let entry = self.types.get(name).expect("installed");
        let activation = activation_record(&entry.slot.active(), &record.strategy);
        self.record(name, record, activation, turn);
        tracing::info!(r#type = name, strategy = %self.types[name].record.strategy, "entity type created");
        Ok(commands)
    }

    fn install(
        &mut self,
        name: &str,
        record: TypeRecord,
        compiled: Arc<Compiled>,
        durable: Durable,
        activations: Vec<ActivationRecord>,
        now: Millis,
    ) -> Result<Vec<Command>, String> {
        let settings = &self.settings;
        let (engine, clocks, policy) = (self.engine.clone(), settings.clocks.clone(), settings.auto_rollback);
        let slot = Slot::clocked(name, engine, policy, compiled, &record.config, settings.limits, clocks)
            .map_err(|e| e.to_string())?;
        slot.report_changes(self.report.clone());
        let strategy = ExternalAllocation::new(Guarded::new(Box::new(self.metrics.timed(name, slot.handle()))));
        let (coordinator, commands) = Coordinator::recover(settings.config_of(name), strategy, durable, now)
            .expect("the coordinator settings were validated at start-up");
        self.types.insert(name.to_owned(), TypeEntry { coordinator, slot, record, activations });
        Ok(commands)
    }

    /// The settings types are made with.
    pub fn settings(&self) -> &CatalogSettings {
        &self.settings
    }

    /// Refuses a candidate that is neither a built-in nor a recorded upload
    /// (its record was deleted while it was being compiled).
    fn known(&self, candidate: &Candidate) -> Result<(), Refusal> {
        let digest = &candidate.compiled.digest;
        if self.components.contains_key(digest) || self.builtin_digests.contains_key(digest) {
            Ok(())
        } else {
            Err(Refusal::UnknownComponent(digest.clone()))
        }
    }

    /// Activates a strategy for a type; recorded by [`TypeCatalog::record_changes`].
    pub fn activate(&mut self, name: &str, candidate: Candidate) -> Result<(), Refusal> {
        self.known(&candidate)?;
        let limits = self.settings.limits;
        self.get_mut(name)?.activate(candidate.compiled, &candidate.config, limits, ActivationCause::Operator)
    }

    /// Rolls a type back to the strategy active before the current one:
    /// from the slot's memory, else (after a restart) from the persisted
    /// history, compiling the older strategy on this thread.
    pub fn rollback(&mut self, name: &str) -> Result<(), Refusal> {
        let entry = self.get_mut(name)?;
        // Each view is dropped before the next is made: one still lending
        // the table would make the coordinator copy it.
        let rolled_back = {
            let view = entry.coordinator.allocation_view();
            entry.slot.rollback_on(Some(&view))
        };
        match rolled_back {
            Ok(_) => return Ok(()),
            Err(RollbackError::NoPrevious) => {}
            Err(error @ RollbackError::Load(_)) => return Err(Refusal::StrategyRefused(error.to_string())),
        }
        let current = (&entry.record.strategy, &entry.record.config);
        let previous = entry
            .activations
            .iter()
            .rev()
            .find(|a| (&a.strategy, &a.config) != current)
            .cloned()
            .ok_or(Refusal::NoPreviousStrategy)?;
        let compiled = self.compile(&previous.strategy).map_err(|e| Refusal::StrategyRefused(e.to_string()))?;
        let limits = self.settings.limits;
        self.get_mut(name)?.activate(compiled, &previous.config, limits, ActivationCause::Rollback)
    }

    /// Sets (or clears) a type's shadow candidate.
    pub fn set_shadow(&mut self, name: &str, candidate: Option<Candidate>) -> Result<(), Refusal> {
        if let Some(candidate) = &candidate {
            self.known(candidate)?;
        }
        let limits = self.settings.limits;
        let entry = self.get_mut(name)?;
        let candidate = candidate.as_ref().map(|c| (c.compiled.clone(), c.config.as_str(), limits));
        let view = entry.coordinator.allocation_view();
        entry.slot.set_shadow_on(candidate, Some(&view)).map_err(|e| Refusal::StrategyRefused(e.to_string()))
    }

    /// Records every change of an active strategy reported since the last
    /// call: in the type's record and history, and in `turn`.
    pub fn record_changes(&mut self, turn: &mut Turn) {
        while let Ok(ActivationChanged { entity_type, activation }) = self.changes.try_recv() {
            if !self.types.contains_key(&entity_type) {
                continue;
            }
            let source = self.source_of(&activation.compiled);
            let record = TypeRecord { strategy: source.clone(), config: activation.config.clone() };
            self.record(&entity_type, record, activation_record(&activation, &source), turn);
        }
    }

    fn record(&mut self, name: &str, record: TypeRecord, activation: ActivationRecord, turn: &mut Turn) {
        let entry = self.types.get_mut(name).expect("recorded types exist");
        entry.record = record.clone();
        entry.activations.push(activation.clone());
        let excess = entry.activations.len().saturating_sub(crate::store::ACTIVATION_HISTORY);
        entry.activations.drain(..excess);
        turn.types.insert(name.to_owned(), record);
        turn.activations.push((name.to_owned(), activation));
    }

    /// Records an uploaded component (its blob is stored) in `turn`.
    pub fn add_component(&mut self, record: ComponentRecord, turn: &mut Turn) {
        self.components.insert(record.digest.clone(), record.clone());
        turn.components.push(record);
    }

    /// Deletes a type and all its state in `turn`.
    pub fn remove(&mut self, name: &str, turn: &mut Turn) {
        if let Some(entry) = self.types.remove(name) {
            // A type's state can be large: free it away from the driver thread.
            std::thread::spawn(move || drop(entry));
            turn.changes.remove(name);
            turn.types.remove(name);
            turn.activations.retain(|(t, _)| t != name);
            turn.removed_types.push(name.to_owned());
            tracing::info!(r#type = name, "entity type deleted");
        }
    }

    /// Forgets an uploaded component in `turn`, unless it is built in,
    /// unknown or in use.
    pub fn remove_component(&mut self, digest: &str, turn: &mut Turn) -> Result<(), Refusal> {
        if builtin::component_bytes(digest).is_some() {
            return Err(Refusal::Builtin(digest.to_owned()));
        }
        if !self.components.contains_key(digest) {
            return Err(Refusal::UnknownComponent(digest.to_owned()));
        }
        let types = self.active_in(&StrategySource::Digest(digest.to_owned()));
        if !types.is_empty() {
            return Err(Refusal::StrategyInUse { digest: digest.to_owned(), types });
        }
        self.components.remove(digest);
        turn.removed_components.push(digest.to_owned());
        Ok(())
    }

    /// The types where `source` is active or shadowing.
    pub fn active_in(&self, source: &StrategySource) -> Vec<String> {
        self.types
            .iter()
            .filter(|(_, e)| {
                e.record.strategy == *source || e.slot.shadow().is_some_and(|s| self.source_of(&s.compiled) == *source)
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// The persisted form of an activation of `source`.
pub fn activation_record(activation: &Activation, source: &StrategySource) -> ActivationRecord {
    ActivationRecord {
        strategy: source.clone(),
        name: activation.compiled.info.name.clone(),
        version: activation.compiled.info.version.clone(),
        config: activation.config.clone(),
        cause: activation.cause,
        at_ms: activation.at,
    }
}
