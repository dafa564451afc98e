//! The component loader: arbitrary bytes must load or be refused with a
//! `LoadError`; and components of the strategy world whose function bodies
//! are random (wasm-smith, shaped by the world's own dummy module) must be
//! refused, or run in the sandbox and answer, trap or time out as domain
//! errors — never panic the host. The first byte's low bit chooses.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use shardalloc::engine::limits::Limits;
use shardalloc::engine::{Engine, EngineConfig};
use shardalloc::strategy::{AllocationStrategy, ClusterView};
use shardalloc_guest::Snapshot;

/// The sandbox a random component runs in: short, so loops cost little.
const LIMITS: Limits =
    Limits { deadline: Duration::from_millis(50), memory: 16 << 20, view_load: Duration::from_millis(50) };

fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::new(EngineConfig { cache_dir: None, max_instances: 0 }).expect("an engine"))
}

/// The world's dummy module and what embedding needs, made once.
struct World {
    resolve: wit_parser::Resolve,
    world: wit_parser::WorldId,
    dummy: Vec<u8>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let mut resolve = wit_parser::Resolve::default();
        let package =
            resolve.push_str("strategy.wit", include_str!("../../wit/0.1/strategy.wit")).expect("the contract parses");
        let world = resolve.select_world(&[package], Some("strategy")).expect("the strategy world");
        let dummy = wit_component::dummy_module(
            &resolve,
            world,
            wit_parser::ManglingAndAbi::Legacy(wit_parser::LiftLowerAbi::Sync),
        );
        World { resolve, world, dummy }
    })
}

/// A component of the strategy world with random bodies, when the bytes
/// make one.
pub fn random_component(data: &[u8]) -> Option<Vec<u8>> {
    let world = world();
    let mut config = wasm_smith::Config {
        exports: Some(world.dummy.clone()),
        available_imports: Some(world.dummy.clone()),
        max_memory32_bytes: 16 << 20,
        max_funcs: 40,
        max_instructions: 400,
        // The proposals the node's engine does not turn on.
        gc_enabled: false,
        reference_types_enabled: false,
        custom_descriptors_enabled: false,
        exceptions_enabled: false,
        compact_imports_enabled: false,
        memory64_enabled: false,
        relaxed_simd_enabled: false,
        simd_enabled: false,
        tail_call_enabled: false,
        threads_enabled: false,
        wide_arithmetic_enabled: false,
        ..wasm_smith::Config::default()
    };
    config.max_memories = 1;
    let module = wasm_smith::Module::new(config, &mut arbitrary::Unstructured::new(data)).ok()?;
    let mut module = module.to_bytes();
    wit_component::embed_component_metadata(
        &mut module,
        &world.resolve,
        world.world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .ok()?;
    wit_component::ComponentEncoder::default().module(&module).ok()?.validate(true).encode().ok()
}

fn view() -> ClusterView {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    let snapshot = SNAPSHOT.get_or_init(|| {
        Snapshot::from_json(
            r#"{"regions":[{"address":"a","shards":["1","2"]},{"address":"b","shards":["3"]}],"placements":{}}"#,
        )
        .expect("the snapshot parses")
    });
    ClusterView::from_snapshot(snapshot)
}

/// Bytes for the loader, or for a random component of the world.
pub fn component(data: &[u8]) {
    let Some((choice, rest)) = data.split_first() else { return };
    if choice & 1 == 0 {
        let _ = engine().compile(rest);
        return;
    }
    let Some(bytes) = random_component(rest) else { return };
    let Ok(mut sandboxed) = engine().load(&bytes, "", LIMITS) else { return };
    let view = view();
    let _ = sandboxed.allocate(&view, "4", Some("a"));
    let _ = sandboxed.rebalance(&view);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn noise_makes_components_of_the_world_whose_code_the_sandbox_runs() {
        let made: Vec<Vec<u8>> = (0..30).filter_map(|seed| random_component(&noise(seed, 4096))).collect();
        assert!(made.len() > 10, "only {} of 30 inputs made a component", made.len());
        // They pass validation and the world check, and their random code
        // runs: `describe` answers, or faults as a domain error.
        for bytes in made.iter().take(3) {
            match engine().compile(bytes) {
                Ok(_) | Err(shardalloc::engine::component::LoadError::Fault { .. }) => {}
                Err(other) => panic!("a random component of the world was refused before it ran: {other}"),
            }
        }
    }
}
