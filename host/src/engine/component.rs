//! Loading: classify the bytes, compile (or reuse an artifact), check the
//! world and its contract version, and describe the strategy.

use std::sync::Arc;

use wasmtime::component::Component;

use super::cache::CacheOutcome;
use crate::strategy::Info;

/// The contract's WIT package.
pub const CONTRACT_PACKAGE: &str = "shardalloc:strategy";

/// A version of the strategy contract this host speaks. Which one a
/// component speaks is decided from its exports before it is
/// instantiated ([`check_world`]); [`Contract::ACCEPTED`] is every one
/// this host loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Contract {
    /// `shardalloc:strategy@0.1.0` (`wit/0.1/strategy.wit`).
    V0_1,
    /// `shardalloc:strategy@0.2.0` (`wit/0.2/strategy.wit`).
    V0_2,
    /// `shardalloc:strategy@0.3.0` (`wit/0.3/strategy.wit`).
    V0_3,
}

impl Contract {
    /// Every contract this host loads, oldest first.
    pub const ACCEPTED: &[Contract] = &[Contract::V0_1, Contract::V0_2, Contract::V0_3];

    /// Its version, e.g. `0.1.0`.
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
            Contract::V0_3 => "0.3.0",
        }
    }

    /// Its name, e.g. `shardalloc:strategy@0.1.0`.
    pub fn name(self) -> String {
        format!("{CONTRACT_PACKAGE}@{}", self.version())
    }

    /// The export a component of this contract has, e.g.
    /// `shardalloc:strategy/allocator@0.1.0`.
    pub fn export(self) -> String {
        format!("{CONTRACT_PACKAGE}/allocator@{}", self.version())
    }
}

/// The exports of the contracts this host accepts, for messages.
fn accepted_exports() -> String {
    Contract::ACCEPTED.iter().map(|c| c.export()).collect::<Vec<_>>().join(" or ")
}

/// Why a component could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// Larger than the engine accepts.
    #[error("the component is {size} bytes; the limit is {limit}")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (it does not start with the \\0asm magic)")]
    NotWasm,
    /// A core module, not a component.
    #[error(
        "this is a core WebAssembly module, not a component: wrap it with `shardalloc strategy wrap` (see docs/writing-a-strategy.md)"
    )]
    CoreModule,
    /// The component does not compile.
    #[error("the component is not valid: {0}")]
    Invalid(String),
    /// Built for another version of the contract.
    #[error("the component implements {found}, but this host accepts {}", accepted_exports())]
    WrongVersion {
        /// The export it has.
        found: String,
    },
    /// It does not implement the strategy world.
    #[error(
        "the component does not implement a strategy contract this host accepts ({accepted}): {0}",
        accepted = accepted_exports()
    )]
    WrongWorld(String),
    /// Imports this host does not provide.
    #[error(
        "the component imports {}, which this host does not provide: a strategy may import only shardalloc:strategy/host and WASI; build it without them (docs/writing-a-strategy.md, \"Imports\")",
        .0.join(", ")
    )]
    UnsupportedImports(Vec<String>),
    /// `configure` refused the configuration.
    #[error("the strategy rejected its configuration: {0}")]
    Config(String),
    /// A call trapped or ran out of time or memory while loading.
    #[error("the strategy faulted {during}: {detail}")]
    Fault {
        /// What the host was doing: "while instantiating", "in describe", "in configure", …
        during: &'static str,
        /// The trap, deadline or memory exhaustion.
        detail: String,
    },
    /// The artifact cache failed.
    #[error("artifact cache: {0}")]
    Cache(String),
}

/// Classifies bytes before compiling, so each kind of wrong file gets its own
/// message.
pub fn sniff(bytes: &[u8], limit: usize) -> Result<(), LoadError> {
    if bytes.is_empty() {
        return Err(LoadError::Empty);
    }
    if bytes.len() > limit {
        return Err(LoadError::TooLarge { size: bytes.len(), limit });
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm);
    }
    // Core modules have version 1, layer 0; components have layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

/// The contract a component's bytes speak, read from its top-level exports
/// without compiling it (what a listing of stored components shows);
/// `None` for bytes that are not a component exporting an accepted
/// allocator interface. Loading decides with [`check_world`].
pub fn contract_of(bytes: &[u8]) -> Option<Contract> {
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            wasmparser::Payload::ModuleSection { .. } | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    let name = export.ok()?.name.name;
                    if let Some(contract) = Contract::ACCEPTED.iter().find(|c| c.export() == name) {
                        return Some(*contract);
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// The contract a component speaks, from its exports: the allocator
/// interface at a version this host accepts; what is there otherwise.
pub fn check_world(engine: &wasmtime::Engine, component: &Component) -> Result<Contract, LoadError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(name, _)| name.to_owned()).collect();
    if let Some(contract) = Contract::ACCEPTED.iter().find(|c| exports.contains(&c.export())) {
        return Ok(*contract);
    }
    let prefix = format!("{CONTRACT_PACKAGE}/allocator");
    if let Some(found) = exports.iter().find(|e| e.starts_with(&prefix)) {
        return Err(LoadError::WrongVersion { found: found.clone() });
    }
    let listed =
        if exports.is_empty() { "it exports nothing".to_owned() } else { format!("it exports {}", exports.join(", ")) };
    Err(LoadError::WrongWorld(listed))
}

/// A compiled, checked strategy component, ready to instantiate.
pub struct Compiled {
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    /// Its size in bytes.
    pub size: usize,
    /// The contract it speaks.
    pub contract: Contract,
    /// What it said about itself (before any configuration).
    pub info: Info,
    /// Whether the artifact came from the cache.
    pub cache: CacheOutcome,
    pub(super) pre: Pre,
}

/// A component pre-instantiated through the bindings of its contract.
pub(super) enum Pre {
    /// Contract 0.1.
    V0_1(super::bindings::v0_1::WorldPre<super::host::HostState>),
    /// Contract 0.2.
    V0_2(super::bindings::v0_2::WorldPre<super::host::HostState>),
    /// Contract 0.3.
    V0_3(super::bindings::v0_3::WorldPre<super::host::HostState>),
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled").field("digest", &self.digest).field("info", &self.info).finish_non_exhaustive()
    }
}

/// A shared compiled strategy.
pub type CompiledStrategy = Arc<Compiled>;
