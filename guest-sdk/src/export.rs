//! The component glue (wasm32 only): the contract's bindings, the conversion
//! from its flat types to the plain view types, and the per-instance state
//! that [`crate::export_strategy!`] wires to a strategy type.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::LocalKey;

use crate::allocations::ShardIds;
use crate::host::Level;
use crate::strategy::Strategy;
use crate::view::{Allocations, Region, RegionId, RegionStatus, ShardKey, Topology, View};

/// The generated bindings, re-exported for [`crate::export_strategy!`].
pub use crate::bindings;

use bindings::shardalloc::strategy::types as wit;

/// The per-instance state of the exported strategy.
pub type State<S> = LocalKey<RefCell<Option<S>>>;

thread_local! {
    static TOPOLOGY: RefCell<Option<Arc<Topology>>> = const { RefCell::new(None) };
}

/// Sends a panic's message to the host log before the panic traps, so the
/// node's log says what went wrong instead of a bare `unreachable`.
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            crate::host::log(Level::Error, &format!("strategy panicked: {info}"), &[])
        }));
    });
}

fn with_strategy<S: Strategy + Default, R>(state: &'static State<S>, f: impl FnOnce(&mut S) -> R) -> R {
    install_panic_hook();
    state.with(|cell| {
        let mut slot = cell.borrow_mut();
        f(slot.get_or_insert_with(S::default))
    })
}

/// `describe`.
pub fn describe<S: Strategy + Default>(state: &'static State<S>) -> wit::Info {
    let info = with_strategy(state, |s| s.info());
    wit::Info {
        name: info.name,
        version: info.version,
        description: info.description,
        config_schema: info.config_schema,
        needs_shard_names: info.needs_shard_names,
    }
}

/// `configure`.
pub fn configure<S: Strategy + Default>(state: &'static State<S>, config: String) -> Result<(), String> {
    with_strategy(state, |s| s.configure(&config))
}

/// `set-topology`.
pub fn set_topology(topology: wit::Topology) {
    let regions = topology
        .regions
        .into_iter()
        .map(|r| Region {
            address: r.address,
            status: match r.status {
                wit::RegionStatus::Up => RegionStatus::Up,
                wit::RegionStatus::Joining => RegionStatus::Joining,
                wit::RegionStatus::Leaving => RegionStatus::Leaving,
                wit::RegionStatus::Unreachable => RegionStatus::Unreachable,
            },
            app_version: r.app_version,
            join_order: r.join_order,
            labels: r.labels.into_iter().map(|l| (l.key, l.value)).collect::<BTreeMap<_, _>>(),
            proxy_only: r.proxy_only,
            draining: r.draining,
            capacity: None,
        })
        .collect();
    let topology = Topology::with_generation(topology.generation, regions, topology.metric_names, topology.signal);
    TOPOLOGY.with(|t| *t.borrow_mut() = Some(Arc::new(topology)));
}

fn view(loads: wit::Loads) -> Result<View, String> {
    let topology = TOPOLOGY.with(|t| t.borrow().clone());
    let topology = match topology {
        Some(t) if t.generation() == loads.generation => t,
        Some(t) => {
            return Err(format!(
                "loads are for topology generation {} but the strategy holds generation {}",
                loads.generation,
                t.generation()
            ));
        }
        None => return Err("no topology was set before the call".to_owned()),
    };
    View::new(topology, loads.shard_counts, loads.metrics)
}

/// `allocate`.
pub fn allocate<S: Strategy + Default>(
    state: &'static State<S>,
    shard: wit::ShardKey,
    requester: Option<u32>,
    loads: wit::Loads,
) -> Result<u32, String> {
    let view = view(loads)?;
    let key = ShardKey::with_hash(shard.id, shard.hash);
    with_strategy(state, |s| s.allocate(&view, &key, requester.map(RegionId))).map(|r| r.0)
}

/// `rebalance`.
pub fn rebalance<S: Strategy + Default>(
    state: &'static State<S>,
    loads: wit::Loads,
    allocations: wit::Allocations,
) -> Result<Vec<u32>, String> {
    let ids = match allocations.ids {
        Some(ids) => ShardIds::Known(ids),
        None => ShardIds::FromHost,
    };
    let table = Allocations::from_parts(allocations.hashes, &loads.shard_counts, &allocations.in_progress, ids)?;
    let view = view(loads)?;
    let shards = with_strategy(state, |s| s.rebalance(&view, &table))?;
    Ok(shards.into_iter().map(|s| s.handle).collect())
}
