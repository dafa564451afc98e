//! Contract 0.1 and 0.2 side by side in one engine: a 0.2 component's copy
//! of the view, kept from the shard table's batches, gives the answers the
//! native strategy gives on the same views, without a rebuild; a copy that
//! goes wrong is caught by its checksum; and the 0.1 builds of the built-ins
//! (the fixtures) and their 0.2 builds swap into and shadow each other.

use crate::common;

use std::sync::Arc;

use common::{engine, generous, native};
use shardalloc::engine::component::Contract;
use shardalloc::engine::instance::Sandboxed;
use shardalloc::engine::slot::{ActivationCause, AutoRollback, Slot};
use shardalloc::strategy::table::ShardTable;
use shardalloc::strategy::{AllocationStrategy, ClusterView, StrategySource};
use shardalloc_guest::testing::Scenario;
use shardalloc_guest::{Region, Topology};

/// A built-in as an older contract built it (`version`: "0.1" or "0.2").
fn fixture_of(version: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/../contracts/strategy-{version}/{name}.wasm", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture(name: &str) -> Vec<u8> {
    fixture_of("0.1", name)
}

fn topology(regions: usize) -> Arc<Topology> {
    let regions =
        (0..regions).map(|i| Region { address: format!("r{i}"), join_order: i as u64, ..Region::default() }).collect();
    Arc::new(Topology::new(regions, Vec::new(), None))
}

/// The coordinator's two views over a table: counts only, and with homes.
fn views(table: &Arc<ShardTable>, homes: &[Vec<String>]) -> (ClusterView, ClusterView) {
    let topology = table.view().topology().clone();
    let counts = homes.iter().map(|h| h.len() as u32).collect();
    let allocation =
        ClusterView::for_allocation(topology.clone(), Vec::new(), counts).unwrap().with_table(table.clone());
    let full =
        ClusterView::new(topology, Vec::new(), homes.to_vec(), Default::default()).unwrap().with_table(table.clone());
    (allocation, full)
}

#[test]
fn a_0_2_or_0_3_component_follows_the_table_batch_by_batch_and_answers_as_native() {
    // least-shard's classic algorithm reads ids: a 0.3 build has them
    // with its view and batches, a 0.2 one asks the host for each.
    let cases = [("least-shard", ""), ("hash", ""), ("least-shard", r#"{"algorithm":"classic"}"#)];
    for (contract, (name, config)) in [Contract::V0_3, Contract::V0_2].into_iter().flat_map(|c| cases.map(|n| (c, n))) {
        let mut component: Sandboxed = match contract {
            Contract::V0_2 => engine().load(&fixture_of("0.2", name), config, generous()).unwrap(),
            _ => common::component(name, config),
        };
        assert_eq!(component.compiled().contract, contract, "{name}");
        assert_eq!(
            component.info().needs_shard_names,
            contract == Contract::V0_3 && config.contains("classic"),
            "{name} {config}: asks for the ids in bulk"
        );
        let mut native = native(name, config);
        let topology = topology(4);
        let mut table = Arc::new(ShardTable::new(&topology, Vec::new()));
        let mut homes: Vec<Vec<String>> = vec![Vec::new(); 4];
        for i in 0..120 {
            let shard = format!("s{i}");
            let (allocation, full) = views(&table, &homes);
            let ours = component.allocate(&allocation, &shard, None).unwrap();
            assert_eq!(ours, native.allocate(&full, &shard, None).unwrap(), "{name} {config}: allocate {shard}");
            drop((allocation, full));
            let region = topology.regions().iter().position(|r| r.address == ours).unwrap();
            homes[region].push(shard.clone());
            Arc::make_mut(&mut table).home(&shard, &ours, 0).unwrap();
            if i % 10 == 9 {
                // A move, as a rebalance round makes: off the first region
                // with shards, onto the last.
                let from = homes.iter().position(|h| !h.is_empty()).unwrap();
                let moved = homes[from].remove(0);
                homes[3].push(moved.clone());
                Arc::make_mut(&mut table).home(&moved, "r3", 0).unwrap();
                let (_, full) = views(&table, &homes);
                let (ours, theirs) = (component.rebalance(&full).unwrap(), native.rebalance(&full).unwrap());
                if contract == Contract::V0_3 {
                    assert_eq!(ours, theirs, "{name} {config}: rebalance after {shard}");
                } else {
                    // 0.2 names no destinations; today's native does.
                    assert_eq!(
                        common::shards(ours),
                        common::shards(theirs),
                        "{name} {config}: rebalance after {shard}"
                    );
                }
            }
        }
        assert_eq!(component.instantiations(), 1, "{name} {config}: no rebuild: every checksum matched");
    }
}

#[test]
fn a_copy_from_another_table_is_loaded_whole_and_a_wrong_one_is_rebuilt() {
    let mut component = common::component("least-shard", "");
    let topology = topology(2);
    let mut first = Arc::new(ShardTable::new(&topology, Vec::new()));
    Arc::make_mut(&mut first).home("a", "r0", 0).unwrap();
    let (allocation, _) = views(&first, &[vec!["a".into()], vec![]]);
    assert_eq!(component.allocate(&allocation, "b", None).unwrap(), "r1");
    // Another table (a new coordinator after a failover, say): its own
    // history, so the component loads it whole and answers on it.
    let mut second = Arc::new(ShardTable::new(&topology, Vec::new()));
    for shard in ["x", "y", "z"] {
        Arc::make_mut(&mut second).home(shard, "r1", 0).unwrap();
    }
    let (allocation, _) = views(&second, &[vec![], vec!["x".into(), "y".into(), "z".into()]]);
    assert_eq!(component.allocate(&allocation, "w", None).unwrap(), "r0");
    assert_eq!(component.instantiations(), 1);
}

#[test]
fn the_0_1_and_0_2_fixtures_and_the_0_3_builtins_swap_and_shadow_each_other() {
    let engine = engine();
    let v1 = engine.compile(&fixture_of("0.1", "least-shard")).unwrap();
    assert_eq!(v1.contract, Contract::V0_1);
    let v2 = engine.compile(&fixture_of("0.2", "least-shard")).unwrap();
    assert_eq!(v2.contract, Contract::V0_2);
    let v3 = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    assert_eq!(v3.contract, Contract::V0_3);
    let view = ClusterView::from_snapshot(&Scenario::parse("a=1,2,3,4,5,6 b=7 c=").snapshot);
    let pairs = [(&v3, &v1), (&v1, &v3), (&v3, &v2), (&v2, &v3), (&v1, &v2), (&v2, &v1)];
    for (active, shadow) in pairs {
        let slot =
            Slot::new("Counter", engine.clone(), AutoRollback::default(), active.clone(), "", generous()).unwrap();
        slot.set_shadow(Some((shadow.clone(), "", generous()))).unwrap();
        let mut handle = slot.handle();
        for i in 0..10 {
            assert_eq!(handle.allocate(&view, &format!("n{i}"), None).unwrap(), "c");
        }
        assert_eq!(common::shards(handle.rebalance(&view).unwrap()), ["1"]);
        let stats = slot.stats();
        assert_eq!(
            (stats.shadow_calls, stats.shadow_disagreements),
            (11, 0),
            "{:?} shadowed by {:?}",
            active.contract,
            shadow.contract
        );
        // Hot swap to the other contract and back.
        slot.activate(shadow.clone(), "", generous()).unwrap();
        assert_eq!(handle.allocate(&view, "after-swap", None).unwrap(), "c");
        assert_eq!(slot.active().compiled.contract, shadow.contract);
        slot.rollback().unwrap();
        assert_eq!(common::shards(handle.rebalance(&view).unwrap()), ["1"]);
        assert_eq!(slot.active().compiled.contract, active.contract);
        assert!(slot.stats().fallbacks.is_empty(), "{:?}", slot.stats().fallbacks);
    }
}

#[test]
fn an_activation_warmed_on_the_callers_view_takes_its_first_call_without_loading_the_view_again() {
    let engine = engine();
    let compiled = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let topology = topology(3);
    let mut table = Arc::new(ShardTable::new(&topology, Vec::new()));
    let mut homes: Vec<Vec<String>> = vec![Vec::new(); 3];
    for i in 0..300 {
        let shard = format!("s{i}");
        Arc::make_mut(&mut table).home(&shard, &format!("r{}", i % 3), 0).unwrap();
        homes[i % 3].push(shard);
    }
    let slot = Slot::new("Counter", engine.clone(), AutoRollback::default(), compiled.clone(), "", generous()).unwrap();
    let mut handle = slot.handle();
    let (allocation, _) = views(&table, &homes);
    handle.allocate(&allocation, "first", None).unwrap();
    assert_eq!(handle.view_loads(), 1, "the first instance loads the view once");
    drop(allocation);
    // Warmed on the slot's recent view (no shards of its own): the first call
    // loads the whole view again.
    slot.activate(compiled.clone(), "", generous()).unwrap();
    Arc::make_mut(&mut table).home("between", "r0", 0).unwrap();
    let (allocation, _) = views(&table, &homes);
    handle.allocate(&allocation, "after-a-plain-activation", None).unwrap();
    assert_eq!(handle.view_loads(), 2, "warm-up on the recent view, then the caller's");
    // Warmed on the caller's view: the warm-up loads it, and the first call
    // is brought up to date by the table's batches since.
    slot.activate_on(compiled, "", generous(), ActivationCause::Operator, Some(&allocation)).unwrap();
    drop(allocation);
    Arc::make_mut(&mut table).home("meanwhile", "r1", 0).unwrap();
    let (allocation, _) = views(&table, &homes);
    assert_eq!(handle.allocate(&allocation, "after-a-warm-activation", None).unwrap(), "r2");
    assert_eq!(handle.view_loads(), 1, "loaded once, at warm-up");
    assert_eq!(slot.stats().cold_instances, 0);
}

#[test]
fn the_contract_is_read_from_a_components_exports_without_compiling_it() {
    use shardalloc::engine::component::contract_of;
    assert_eq!(contract_of(&fixture("least-shard")), Some(Contract::V0_1));
    assert_eq!(contract_of(&fixture_of("0.2", "least-shard")), Some(Contract::V0_2));
    let builtin = shardalloc::strategy::builtin::component_bytes("least-shard").unwrap();
    assert_eq!(contract_of(builtin), Some(Contract::V0_3));
    assert_eq!(contract_of(common::misbehaving_bytes()), Some(Contract::V0_3));
    assert_eq!(contract_of(b"not a component"), None);
    // A component that exports something else.
    let other = wat::parse_str(r#"(component (core module $m (func (export "f"))) (core instance $i (instantiate $m)) (func (export "f") (canon lift (core func $i "f"))))"#).unwrap();
    assert_eq!(contract_of(&other), None);
}
