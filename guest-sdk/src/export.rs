//! The component glue (wasm32 only): contract 0.3's bindings, the kept view
//! the host's batches update, and the per-instance state that
//! [`crate::export_strategy!`] wires to a strategy type.
//!
//! A batch the kept view refuses, or one that leaves its checksum off the
//! host's, is a bug on one side: the glue panics, the call traps, and the
//! host drops the instance and loads a fresh one whole.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::thread::LocalKey;

use crate::host::Level;
use crate::kept::{Attributed, Changes, FullView, Homed, KeptView, ShardLoads, ShardNames};
use crate::strategy::Strategy;
use crate::view::{AllocationCause, Region, RegionId, RegionStatus, ShardKey, Topology};

/// The generated bindings, re-exported for [`crate::export_strategy!`].
pub use crate::bindings;

use bindings::shardalloc::strategy::types as wit;

/// The per-instance state of the exported strategy.
pub type State<S> = LocalKey<RefCell<Option<S>>>;

thread_local! {
    static KEPT: RefCell<Option<KeptView>> = const { RefCell::new(None) };
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
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
        needs_shard_ids: info.needs_shard_names,
        needs_shard_attributes: info.needs_shard_attributes,
    }
}

/// `configure`.
pub fn configure<S: Strategy + Default>(state: &'static State<S>, config: String) -> Result<(), String> {
    with_strategy(state, |s| s.configure(&config))
}

fn topology(topology: wit::Topology, generation: u64) -> Topology {
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
            capacity: r.capacity,
            quantities: r.quantities.into_iter().map(|q| (q.name, q.amount)).collect::<BTreeMap<_, _>>(),
        })
        .collect();
    Topology::with_generation(generation, regions, topology.metric_names, topology.signal)
}

fn homed(homed: wit::Homed) -> Homed {
    Homed { shards: homed.shards, hashes: homed.hashes, regions: homed.regions, since: homed.since }
}

/// Takes `shard-ids` as they come: one text and its ends (checked where
/// they are used, [`ShardNames::check`]).
fn names(ids: wit::ShardIds) -> ShardNames {
    ShardNames { shards: ids.shards, text: ids.text, ends: ids.ends }
}

/// Takes `attributed` as it comes (checked where it is applied,
/// [`Attributed::check`]).
fn attributed(a: wit::Attributed) -> Attributed {
    Attributed { shards: a.shards, counts: a.counts, text: a.text, ends: a.ends }
}

fn loads(loads: wit::ShardLoads) -> ShardLoads {
    ShardLoads { shards: loads.shards, loads: loads.loads }
}

/// `load-view`: the ids come with the view when the strategy asked for
/// them (`needs_shard_names`), and its table knows them from then on;
/// otherwise each id read is a host call.
pub fn load_view<S: Strategy + Default>(state: &'static State<S>, view: wit::View) -> u64 {
    install_panic_hook();
    let (named, attributes) = with_strategy(state, |s| {
        let info = s.info();
        (info.needs_shard_names, info.needs_shard_attributes)
    });
    let full = FullView {
        generation: view.generation,
        topology: topology(view.topology, view.generation),
        metrics: view.metrics,
        smoothed_metrics: Some(view.smoothed_metrics),
        homed: homed(view.homed),
        homeless: view.homeless,
        homeless_hashes: view.homeless_hashes,
        moving: view.moving,
        pinned: view.pinned,
        loads: loads(view.loads),
        ids: names(view.ids),
        attributes: attributed(view.attributes),
    };
    let kept = if named { KeptView::load_named(full) } else { KeptView::load(full) };
    let mut kept = kept.unwrap_or_else(|e| panic!("the host's view does not load: {e}"));
    if !attributes {
        kept.attributes_from_host();
    }
    let checksum = kept.checksum();
    KEPT.with(|k| *k.borrow_mut() = Some(kept));
    checksum
}

/// `apply`.
pub fn apply(changes: wit::Changes) -> u64 {
    install_panic_hook();
    let generation = changes.generation;
    let changes = Changes {
        generation,
        retired: changes.retired,
        unhomed: changes.unhomed,
        arrived_homeless: changes.arrived_homeless,
        arrived_hashes: changes.arrived_hashes,
        topology: changes.topology.map(|t| topology(t, generation)),
        metrics: changes.metrics,
        smoothed_metrics: changes.smoothed_metrics,
        homed: homed(changes.homed),
        moving: changes.moving,
        settled: changes.settled,
        pinned: changes.pinned,
        unpinned: changes.unpinned,
        loads: loads(changes.loads),
        named: names(changes.named),
        attributes: attributed(changes.attributes),
    };
    KEPT.with(|k| match k.borrow_mut().as_mut() {
        Some(kept) => kept.apply(changes).unwrap_or_else(|e| panic!("the host's batch does not apply: {e}")),
        None => panic!("a batch came before any view was loaded"),
    })
}

fn cause(cause: wit::AllocationCause) -> AllocationCause {
    match cause {
        wit::AllocationCause::NewShard => AllocationCause::NewShard,
        wit::AllocationCause::RegionRemoved => AllocationCause::RegionRemoved,
        wit::AllocationCause::Drained => AllocationCause::Drained,
        wit::AllocationCause::PlacementLifted => AllocationCause::PlacementLifted,
        wit::AllocationCause::Rebalance => AllocationCause::Rebalance,
        wit::AllocationCause::Operator => AllocationCause::Operator,
    }
}

/// `allocate`: the region's index, or -1 with the reason kept for `last-error`.
pub fn allocate<S: Strategy + Default>(
    state: &'static State<S>,
    shard: u32,
    hash: u64,
    requester: Option<u32>,
    why: wit::AllocationCause,
    now: u64,
) -> i64 {
    let key = ShardKey::from_host(shard, hash, cause(why));
    let answer = KEPT.with(|k| match k.borrow_mut().as_mut() {
        Some(kept) => {
            kept.set_now(now);
            with_strategy(state, |s| s.allocate(kept.view(), &key, requester.map(RegionId)))
        }
        None => Err("no view was loaded before the call".to_owned()),
    });
    match answer {
        Ok(region) => i64::from(region.0),
        Err(message) => {
            LAST_ERROR.with(|e| *e.borrow_mut() = message);
            -1
        }
    }
}

/// `last-error`.
pub fn last_error() -> String {
    LAST_ERROR.with(|e| std::mem::take(&mut *e.borrow_mut()))
}

/// `rebalance`.
pub fn rebalance<S: Strategy + Default>(state: &'static State<S>, now: u64) -> Result<Vec<wit::Move>, String> {
    KEPT.with(|k| match k.borrow_mut().as_mut() {
        Some(kept) => {
            kept.set_now(now);
            with_strategy(state, |s| s.rebalance(kept.view(), kept.allocations())).map(|moves| {
                moves.into_iter().map(|m| wit::Move { shard: m.shard.handle, to: m.to.map(|r| r.0) }).collect()
            })
        }
        None => Err("no view was loaded before the call".to_owned()),
    })
}
