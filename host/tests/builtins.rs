//! Every built-in passes the conformance suite natively and as a
//! component, and both forms give identical answers on the same inputs.

use crate::common;

use common::{HostSubject, component, current_configurations, native};
use proptest::prelude::*;
use shardalloc_guest::conformance::{self, Subject};
use shardalloc_guest::testing::{Shape, generate};
use shardalloc_guest::{Snapshot, Strategy};

#[test]
fn components_pass_the_conformance_suite() {
    for (name, config) in current_configurations() {
        let problems = conformance::run(&mut HostSubject(component(name, config)));
        assert!(
            problems.is_empty(),
            "{name} {config}: {}",
            problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}

#[test]
fn native_builtins_pass_the_conformance_suite() {
    for (name, config) in current_configurations() {
        let problems = conformance::run(&mut HostSubject(native(name, config)));
        assert!(
            problems.is_empty(),
            "{name} {config}: {}",
            problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}

fn same_answers(
    name: &str,
    config: &str,
    wasm: &mut impl Subject,
    host: &mut impl Subject,
    scenario: &str,
    snapshot: &Snapshot,
) -> Result<(), String> {
    let probes = ["new", "s1", "s17", "tenant/9", "3"];
    let requesters: Vec<Option<&str>> =
        std::iter::once(None).chain(snapshot.regions.last().map(|r| Some(r.address.as_str()))).collect();
    for shard in probes {
        for requester in &requesters {
            let (a, b) = (wasm.allocate(snapshot, shard, *requester), host.allocate(snapshot, shard, *requester));
            if a != b {
                return Err(format!("{name} {config} {scenario}: allocate({shard}) component {a:?} native {b:?}"));
            }
        }
    }
    let (a, b) = (wasm.rebalance(snapshot), host.rebalance(snapshot));
    if a != b {
        return Err(format!("{name} {config} {scenario}: rebalance component {a:?} native {b:?}"));
    }
    Ok(())
}

#[test]
fn component_and_native_answer_identically_on_the_suite() {
    for (name, config) in current_configurations() {
        let (mut wasm, mut host) = (HostSubject(component(name, config)), HostSubject(native(name, config)));
        for (scenario, snapshot) in conformance::scenarios() {
            same_answers(name, config, &mut wasm, &mut host, &scenario, &snapshot).unwrap();
        }
    }
}

#[test]
fn inspect_matches_the_native_description() {
    for (name, _) in current_configurations() {
        let wasm = component(name, "");
        let info = shardalloc::strategy::AllocationStrategy::info(&wasm).clone();
        // A 0.3 component says whether it needs every id, as natively.
        let expected = native(name, "").info().clone();
        assert_eq!(info, expected, "{name}");
        assert_eq!(info.name, *name);
        let schema: serde_json::Value = serde_json::from_str(&info.config_schema).expect("schema is JSON");
        assert!(schema.is_object(), "{name}");
    }
    // The SDK's strategy types agree too.
    assert_eq!(shardalloc_strategy_least_shard::LeastShard::default().info().name, "least-shard");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn identical_answers_on_random_clusters(seed in any::<u64>(), regions in 1usize..40, shards in 0usize..400, messy in any::<bool>(), which in 0usize..current_configurations().len()) {
        let (name, config) = current_configurations()[which];
        let shape = if messy { Shape::messy(regions, shards) } else { Shape::healthy(regions, shards) };
        let snapshot = generate(seed, &shape).snapshot;
        let (mut wasm, mut host) = (HostSubject(component(name, config)), HostSubject(native(name, config)));
        let scenario = format!("seed {seed} {regions}x{shards} messy={messy}");
        prop_assert_eq!(same_answers(name, config, &mut wasm, &mut host, &scenario, &snapshot), Ok(()));
        let problems = conformance::check_scenario(&mut wasm, &scenario, &snapshot);
        prop_assert!(problems.is_empty(), "{}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"));
    }
}
