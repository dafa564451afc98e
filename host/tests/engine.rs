//! The engine against bad input: every misbehaving component gives a clear
//! error at load or a fallback decision at call, leaves the engine healthy,
//! and shows in the counters. Plus the artifact cache, hot swap, rollback,
//! shadow and dry run. Timing bounds are generous; the deadline itself is
//! what is tested.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{engine, generous, misbehaving_bytes};
use shardalloc::clock::ManualClocks;
use shardalloc::engine::cache::CacheOutcome;
use shardalloc::engine::component::LoadError;
use shardalloc::engine::limits::Limits;
use shardalloc::engine::slot::{ActivationCause, AutoRollback, RollbackError, Slot};
use shardalloc::engine::{Engine, EngineConfig};
use shardalloc::strategy::churn::{ChurnLimits, Paced};
use shardalloc::strategy::dry_run::{DryRunError, dry_run};
use shardalloc::strategy::external::{AllocationReason, ExternalAllocation};
use shardalloc::strategy::guarded::Guarded;
use shardalloc::strategy::{AllocationStrategy, ClusterView, FaultKind, StrategyError, StrategySource, builtin};
use shardalloc_guest::testing::Scenario;

fn view() -> ClusterView {
    ClusterView::from_snapshot(&Scenario::parse("a=1,2,3,4 b=5 c=").in_progress(&["5"]).snapshot)
}

fn misbehaving(config: &str, limits: Limits) -> shardalloc::engine::instance::Sandboxed {
    engine().load(misbehaving_bytes(), config, limits).unwrap()
}

fn fault_kind(result: Result<impl std::fmt::Debug, StrategyError>) -> FaultKind {
    match result {
        Err(StrategyError::Fault { kind, .. }) => kind,
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn endless_allocate_is_interrupted_at_its_deadline_and_the_instance_recovers() {
    // Long enough that a descheduled test thread never trips it by accident.
    let limits = Limits { deadline: Duration::from_millis(500), ..Limits::default() };
    let mut strategy = misbehaving(r#"{"allocate":"loop"}"#, limits);
    let started = Instant::now();
    assert_eq!(fault_kind(strategy.allocate(&view(), "9", None)), FaultKind::Deadline);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(500), "interrupted early: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "deadline not enforced: {elapsed:?}");
    // The store was dropped; the next call gets a fresh instance.
    assert!(strategy.rebalance(&view()).is_ok());
    assert_eq!(strategy.instantiations(), 2);
}

#[test]
fn endless_rebalance_is_interrupted_and_falls_back() {
    let limits = Limits { deadline: Duration::from_millis(500), ..Limits::default() };
    let mut guarded = Guarded::new(Box::new(misbehaving(r#"{"rebalance":"loop"}"#, limits)));
    let started = Instant::now();
    let decision = guarded.rebalance(&view());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(decision.fallback, Some(StrategyError::Fault { kind: FaultKind::Deadline, .. })));
    // Allocation still works on the same guarded strategy.
    assert_eq!(guarded.allocate(&view(), "9", None).unwrap().value, "c");
}

#[test]
fn unbounded_memory_hits_the_cap() {
    let limits = Limits { memory: 16 << 20, ..generous() };
    let mut strategy = misbehaving(r#"{"allocate":"grow-memory"}"#, limits);
    assert_eq!(fault_kind(strategy.allocate(&view(), "9", None)), FaultKind::Memory);
    assert!(strategy.rebalance(&view()).is_ok(), "a fresh store after the fault");
}

#[test]
fn a_panic_is_a_trap() {
    let mut strategy = misbehaving(r#"{"allocate":"panic","rebalance":"panic"}"#, generous());
    assert_eq!(fault_kind(strategy.allocate(&view(), "9", None)), FaultKind::Trap);
    assert_eq!(fault_kind(strategy.rebalance(&view())), FaultKind::Trap);
}

#[test]
fn invalid_answers_are_refused_and_replaced() {
    let cases = [
        (r#"{"allocate":"out-of-range"}"#, "region index 10 out of range (3 regions)"),
        (r#"{"rebalance":"out-of-range"}"#, "shard handle 8 names no shard in the view"),
        (r#"{"rebalance":"duplicate"}"#, "shard 1 is listed twice"),
        (r#"{"rebalance":"moving"}"#, "shard 5 is already moving"),
        (r#"{"allocate":"error"}"#, "misbehaving on purpose"),
    ];
    for (config, reason) in cases {
        let mut guarded = Guarded::new(Box::new(misbehaving(config, generous())));
        let fallback = if config.contains("allocate") {
            let decision = guarded.allocate(&view(), "9", None).unwrap();
            assert_eq!(decision.value, "c", "{config}");
            decision.fallback
        } else {
            guarded.rebalance(&view()).fallback
        };
        let fallback = fallback.unwrap_or_else(|| panic!("{config}: no fallback"));
        assert!(fallback.to_string().contains(reason), "{config}: {fallback}");
    }
}

fn dummy_component(wit: &str, world: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("test.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some(world)).unwrap();
    let mut module = wit_component::dummy_module(
        &resolve,
        world,
        wit_parser::ManglingAndAbi::Legacy(wit_parser::LiftLowerAbi::Sync),
    );
    wit_component::embed_component_metadata(&mut module, &resolve, world, wit_component::StringEncoding::UTF8, false)
        .unwrap();
    wit_component::ComponentEncoder::default().module(&module).unwrap().validate(true).encode().unwrap()
}

fn contract(version: &str) -> String {
    include_str!("../../wit/0.1/strategy.wit").replace("@0.1.0", &format!("@{version}"))
}

#[test]
fn bad_files_and_wrong_worlds_are_clear_load_errors() {
    let engine = engine();
    let cases: Vec<(&str, Vec<u8>, LoadError)> = vec![
        ("empty", Vec::new(), LoadError::Empty),
        ("text", b"definitely not wasm".to_vec(), LoadError::NotWasm),
        ("core module", b"\0asm\x01\0\0\0".to_vec(), LoadError::CoreModule),
        (
            "newer contract",
            dummy_component(&contract("0.4.0"), "shardalloc:strategy/strategy@0.4.0"),
            LoadError::WrongVersion { found: "shardalloc:strategy/allocator@0.4.0".into() },
        ),
        (
            "older contract",
            dummy_component(&contract("0.0.9"), "shardalloc:strategy/strategy@0.0.9"),
            LoadError::WrongVersion { found: "shardalloc:strategy/allocator@0.0.9".into() },
        ),
        (
            "other world",
            dummy_component("package other:thing; world w { export run: func(); }", "other:thing/w"),
            LoadError::WrongWorld("it exports run".into()),
        ),
    ];
    for (name, bytes, expected) in cases {
        let error = engine.compile(&bytes).unwrap_err();
        assert_eq!(error, expected, "{name}");
        // A component of another contract or world is told the contracts
        // this host accepts.
        if matches!(error, LoadError::WrongVersion { .. } | LoadError::WrongWorld(_)) {
            assert!(error.to_string().contains("accept"), "{name}: {error}");
            assert!(error.to_string().contains("shardalloc:strategy/allocator@0.1.0"), "{name}: {error}");
            assert!(error.to_string().contains("shardalloc:strategy/allocator@0.2.0"), "{name}: {error}");
            assert!(error.to_string().contains("shardalloc:strategy/allocator@0.3.0"), "{name}: {error}");
        }
    }
    // A component of an accepted contract says which: the built-ins speak
    // 0.3, their 0.1 and 0.2 builds (the fixtures) 0.1 and 0.2.
    let compiled = engine.compile(shardalloc::strategy::builtin::component_bytes("hash").unwrap()).unwrap();
    assert_eq!(compiled.contract, shardalloc::engine::component::Contract::V0_3);
    assert_eq!(compiled.contract.name(), "shardalloc:strategy@0.3.0");
    let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.2/hash.wasm")).unwrap();
    assert_eq!(engine.compile(&fixture).unwrap().contract, shardalloc::engine::component::Contract::V0_2);
    let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.1/hash.wasm")).unwrap();
    assert_eq!(engine.compile(&fixture).unwrap().contract, shardalloc::engine::component::Contract::V0_1);
    // Imports outside the contract and WASI are named, with the fix.
    let foreign = contract("0.1.0")
        .replace("world strategy {", "interface metrics { push: func(); }\nworld strategy {\n    import metrics;");
    let error = engine.compile(&dummy_component(&foreign, "shardalloc:strategy/strategy@0.1.0")).unwrap_err();
    assert_eq!(error, LoadError::UnsupportedImports(vec!["shardalloc:strategy/metrics@0.1.0".into()]));
    assert!(error.to_string().contains("build it without them"), "{error}");
    // WASI imports link: WASI from the host, the rest (wasi:http) as stubs;
    // the dummy's `describe` then traps, and the error says where.
    let wasi = contract("0.1.0").replace(
        "world strategy {",
        "world strategy {\n    import wasi:random/random@0.2.0;\n    import wasi:http/outgoing-handler@0.2.0;",
    ) + "\npackage wasi:random@0.2.0 { interface random { get-random-u64: func() -> u64; } }\n\
           package wasi:http@0.2.0 { interface outgoing-handler { handle: func(); } }\n";
    let error = engine.compile(&dummy_component(&wasi, "shardalloc:strategy/strategy@0.1.0")).unwrap_err();
    assert!(matches!(&error, LoadError::Fault { during: "in describe", .. }), "{error}");
    let garbage_component = [b"\0asm\x0d\0\x01\0".as_slice(), &[0xff; 16]].concat();
    assert!(matches!(engine.compile(&garbage_component), Err(LoadError::Invalid(_))));
    // The right world whose every function traps: a fault while loading.
    let trapping = dummy_component(&contract("0.1.0"), "shardalloc:strategy/strategy@0.1.0");
    assert!(matches!(engine.compile(&trapping), Err(LoadError::Fault { .. })), "trapping describe");
    // A configuration the strategy rejects.
    let compiled = engine.compile(misbehaving_bytes()).unwrap();
    let error = engine.instantiate(&compiled, r#"{"nope":1}"#, generous()).unwrap_err();
    assert!(matches!(&error, LoadError::Config(m) if m.contains("nope")), "{error}");
    // And the engine is healthy after all of that.
    assert!(engine.load_source(&StrategySource::Builtin("least-shard".into()), "", generous(), None).is_ok());
}

#[test]
fn artifacts_are_cached_by_digest_and_a_corrupt_one_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = || EngineConfig { cache_dir: Some(dir.path().to_owned()), max_instances: 0 };
    let bytes = builtin::component_bytes("hash").unwrap();
    let first = Engine::new(config()).unwrap().compile(bytes).unwrap();
    assert_eq!(first.cache, CacheOutcome::Compiled);
    assert!(first.digest.starts_with("sha256:") && first.digest.len() == 71);
    let again = Engine::new(config()).unwrap().compile(bytes).unwrap();
    assert_eq!(again.cache, CacheOutcome::Hit);
    assert_eq!(again.digest, first.digest);
    // Artifacts are mapped into memory: replace (never truncate) them, as the
    // cache itself does, and only once nothing maps them.
    drop((first, again));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let replacement = path.with_extension("replacement");
        std::fs::write(&replacement, b"corrupt").unwrap();
        std::fs::rename(&replacement, &path).unwrap();
    }
    let engine = Engine::new(config()).unwrap();
    let rebuilt = engine.compile(bytes).unwrap();
    assert_eq!(rebuilt.cache, CacheOutcome::Compiled);
    let mut strategy = engine.instantiate(&rebuilt, "", generous()).unwrap();
    assert!(strategy.allocate(&view(), "9", None).is_ok());
}

fn slot(initial: &str, policy: AutoRollback) -> Arc<Slot> {
    let engine = engine();
    let compiled = engine.compile_source(&StrategySource::Builtin(initial.into()), None).unwrap();
    Slot::new("Counter", engine, policy, compiled, "", generous()).unwrap()
}

#[test]
fn swapping_under_a_calling_thread_fails_no_call() {
    let slot = slot("least-shard", AutoRollback::default());
    let engine = engine();
    let hash = engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap();
    let least = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let (slot, stop) = (slot.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut external = ExternalAllocation::new(Guarded::new(Box::new(slot.handle())));
            let view = view();
            let (mut calls, mut failed, mut names) = (0u64, 0u64, std::collections::BTreeSet::new());
            while !stop.load(Ordering::Relaxed) || calls < 100 {
                match external.allocate(&view, &format!("s{calls}"), None) {
                    Ok(a) => match a.reason {
                        AllocationReason::Strategy { name, .. } => {
                            names.insert(name);
                        }
                        _ => failed += 1,
                    },
                    Err(_) => failed += 1,
                }
                calls += 1;
            }
            (calls, failed, names)
        })
    };
    let swaps = 200;
    for i in 0..swaps {
        let next = if i % 2 == 0 { &hash } else { &least };
        slot.activate(next.clone(), "", generous()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let (calls, failed, names) = caller.join().unwrap();
    assert_eq!(failed, 0, "{failed} of {calls} calls failed or fell back");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["hash", "least-shard"]);
    assert_eq!(slot.stats().activations, swaps + 1);
    assert_eq!(slot.history().len(), shardalloc::engine::slot::HISTORY_LIMIT);
}

#[test]
fn an_activation_is_warmed_on_the_latest_view_before_it_takes_calls() {
    let slot = slot("least-shard", AutoRollback::default());
    let engine = engine();
    let hash = engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap();
    let view = view();
    let mut handle = slot.handle();
    handle.allocate(&view, "s1", None).unwrap();
    assert_eq!(slot.stats().cold_instances, 0, "the first handle takes the initial instance");

    let activation = slot.activate(hash.clone(), "", generous()).unwrap();
    assert_eq!(activation.warmed_on(), Some(view.topology().generation()), "warmed on the view in use");
    assert_eq!(handle.allocate(&view, "s2", None).unwrap(), hash_answer(&view, "s2"));
    assert_eq!(activation.warmed_on(), None, "the caller took the warm instance");
    assert_eq!(slot.stats().cold_instances, 0);

    // A second caller of the same activation makes its own instance.
    slot.handle().allocate(&view, "s3", None).unwrap();
    assert_eq!(slot.stats().cold_instances, 1);

    // Superseded before any call: its instance is released, not kept in the history.
    let skipped = slot.activate(hash.clone(), "", generous()).unwrap();
    slot.activate(hash, "", generous()).unwrap();
    assert_eq!(skipped.warmed_on(), None);
}

/// What the hash built-in answers natively.
fn hash_answer(view: &ClusterView, shard: &str) -> String {
    shardalloc::strategy::builtin::native("hash", "").unwrap().unwrap().allocate(view, shard, None).unwrap()
}

#[test]
fn rollback_returns_to_the_previous_strategy() {
    let slot = slot("least-shard", AutoRollback::default());
    assert_eq!(slot.rollback().unwrap_err(), RollbackError::NoPrevious);
    let engine = engine();
    slot.activate(
        engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap(),
        r#"{"rebalance_limit":3}"#,
        generous(),
    )
    .unwrap();
    slot.activate(engine.compile_source(&StrategySource::Builtin("zone".into()), None).unwrap(), "", generous())
        .unwrap();
    let back = slot.rollback().unwrap();
    assert_eq!(back.compiled.info.name, "hash");
    assert_eq!(back.config, r#"{"rebalance_limit":3}"#);
    assert_eq!(back.cause, ActivationCause::Rollback);
    assert_eq!(slot.active().id, back.id);
    let back = slot.rollback().unwrap();
    assert_eq!(back.compiled.info.name, "zone", "rolling back a rollback undoes it");
    let causes: Vec<_> = slot.history().iter().map(|a| a.cause).collect();
    assert_eq!(
        causes,
        [
            ActivationCause::Initial,
            ActivationCause::Operator,
            ActivationCause::Operator,
            ActivationCause::Rollback,
            ActivationCause::Rollback
        ]
    );
    // A failed activation leaves the active strategy in place.
    let bad = engine.compile(misbehaving_bytes()).unwrap();
    assert!(slot.activate(bad, r#"{"allocate":"sometimes"}"#, generous()).is_err());
    assert_eq!(slot.active().compiled.info.name, "zone");
}

#[test]
fn a_new_strategy_that_keeps_failing_is_rolled_back_automatically() {
    let slot = slot("least-shard", AutoRollback { max_faults: 3, window: Duration::from_secs(600) });
    let faulty = engine().compile(misbehaving_bytes()).unwrap();
    slot.activate(faulty, r#"{"allocate":"error"}"#, generous()).unwrap();
    let mut guarded = Guarded::new(Box::new(slot.handle()));
    for i in 0..6 {
        let decision = guarded.allocate(&view(), &format!("s{i}"), None).unwrap();
        assert_eq!(decision.value, "c");
        assert_eq!(decision.fallback.is_some(), i < 4, "call {i}");
    }
    let active = slot.active();
    assert_eq!(active.compiled.info.name, "least-shard");
    assert_eq!(active.cause, ActivationCause::AutoRollback);
    let stats = slot.stats();
    assert_eq!(stats.auto_rollbacks, 1);
    assert_eq!(stats.fallbacks["misbehaving@0.1.0"]["error"], 4);
}

/// The window is measured on the node's monotonic clock, the one the leases
/// use: faults spread wider than the window never roll back, however close
/// they are in real time, and the same faults within it do. Activation
/// times come from the same clocks' wall clock.
#[test]
fn the_auto_rollback_window_runs_on_the_slots_clocks() {
    let clocks = Arc::new(ManualClocks::anchored_at(10_000_000));
    let engine = engine();
    let least = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let policy = AutoRollback { max_faults: 2, window: Duration::from_secs(60) };
    let slot = Slot::clocked("Counter", engine.clone(), policy, least, "", generous(), clocks.clone()).unwrap();
    let faulty = engine.compile(misbehaving_bytes()).unwrap();
    clocks.step_wall(-3_600_000);
    slot.activate(faulty, r#"{"allocate":"error"}"#, generous()).unwrap();
    assert_eq!(slot.active().at, 10_000_000 - 3_600_000, "activation time from the slot's wall clock");
    let mut guarded = Guarded::new(Box::new(slot.handle()));
    for i in 0..6 {
        guarded.allocate(&view(), &format!("spread-{i}"), None).unwrap();
        clocks.advance(61_000);
    }
    assert_eq!(slot.active().compiled.info.name, "misbehaving", "faults a window apart rolled back");
    for i in 0..3 {
        guarded.allocate(&view(), &format!("close-{i}"), None).unwrap();
        clocks.advance(1_000);
    }
    assert_eq!(slot.active().compiled.info.name, "least-shard");
    assert_eq!(slot.active().cause, ActivationCause::AutoRollback);
}

#[test]
fn a_shadow_runs_beside_the_active_strategy_and_is_never_applied() {
    let slot = slot("least-shard", AutoRollback::default());
    let engine = engine();
    slot.set_shadow(Some((
        engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap(),
        "",
        generous(),
    )))
    .unwrap();
    let mut handle = slot.handle();
    let view = ClusterView::from_snapshot(&Scenario::parse("a=1,2,3 b=4 c=5,6 d=").snapshot);
    let mut answers = Vec::new();
    for i in 0..20 {
        answers.push(handle.allocate(&view, &format!("shard-{i}"), None).unwrap());
    }
    assert!(answers.iter().all(|a| a == "d"), "least-shard's answers are applied: {answers:?}");
    let stats = slot.stats();
    assert_eq!(stats.shadow_calls, 20);
    assert!(stats.shadow_disagreements > 0 && stats.shadow_disagreements < 20, "{stats:?}");
    let disagreements = stats.shadow_disagreements;
    slot.set_shadow(None).unwrap();
    handle.allocate(&view, "x", None).unwrap();
    // Cleared: no more calls, and its counts kept in the history.
    let stats = slot.stats();
    assert_eq!(stats.shadow_calls, 0);
    let past = stats.shadow_history.back().expect("the cleared candidate's counts");
    assert!(past.candidate.starts_with("hash@"), "{past:?}");
    assert_eq!((past.calls, past.disagreements), (20, disagreements));
}

#[test]
fn dry_run_reports_without_applying() {
    let snapshot = Scenario::parse("a=1,2,3,4,5,6 b= c=").snapshot;
    let candidate = Box::new(
        engine()
            .load_source(&StrategySource::Builtin("least-shard".into()), r#"{"relative_limit":1.0}"#, generous(), None)
            .unwrap(),
    );
    let result = dry_run(candidate, &snapshot, &["new".to_owned()], 3, far(), Paced::default()).unwrap();
    assert_eq!(result.allocations[0].1.as_ref().unwrap().region, "b");
    // Optimal is 2 per region; with the relative limit at 1.0 all four extra shards move at once.
    assert_eq!(result.rebalance.shards, ["1", "2", "3", "4"]);
    assert_eq!(result.rounds.len(), 3);
    assert_eq!(result.rounds[0].moved, ["1", "2", "3", "4"]);
    assert_eq!(result.rounds[0].counts.values().copied().collect::<Vec<_>>(), [2, 2, 2]);
    assert!(result.rounds[2].moved.is_empty());
    // Nothing was applied: the snapshot is as it was.
    assert_eq!(snapshot.regions[0].shards.len(), 6);

    // With the type's churn limits, a dry run shows what they would clip.
    let candidate = Box::new(
        engine()
            .load_source(&StrategySource::Builtin("least-shard".into()), r#"{"relative_limit":1.0}"#, generous(), None)
            .unwrap(),
    );
    let limits = ChurnLimits { max_moves_per_round: Some(3), move_cooldown_ms: 15_000, ..ChurnLimits::default() };
    let paced = Paced { limits, round_ms: 10_000, start: 1_000, ..Paced::default() };
    let result = dry_run(candidate, &snapshot, &[], 3, far(), paced).unwrap();
    let clipped = |round: usize| -> Vec<(String, &str)> {
        result.rounds[round].clipped.iter().map(|c| (c.shard.clone(), c.limit)).collect()
    };
    assert_eq!(result.rounds[0].moved, ["1", "2", "3"]);
    assert_eq!(clipped(0), [("4".to_owned(), "max-moves-per-round")]);
    assert_eq!(result.rounds[1].moved, ["4"], "the three moved last round are cooling down, and not asked for");
    let candidate =
        Box::new(engine().load_source(&StrategySource::Builtin("hash".into()), "", generous(), None).unwrap());
    assert_eq!(
        dry_run(candidate, &snapshot, &[], 1000, far(), Paced::default()).unwrap_err(),
        DryRunError::TooManyRounds(1000)
    );
}

/// A deadline no test reaches.
fn far() -> std::time::Instant {
    std::time::Instant::now() + Duration::from_secs(600)
}

#[test]
fn a_dry_run_fails_at_the_first_fault_and_stops_at_its_deadline() {
    let snapshot = Scenario::parse("a=1,2,3,4,5,6 b= c=").snapshot;
    // A candidate that traps on every allocate fails, naming the fault.
    let candidate = Box::new(misbehaving(r#"{"allocate":"panic"}"#, generous()));
    let error = dry_run(candidate, &snapshot, &["new".to_owned()], 3, far(), Paced::default()).unwrap_err();
    let DryRunError::Failed(what) = &error else { panic!("{error:?}") };
    assert!(what.starts_with("allocate new") && what.contains("trap"), "{what}");
    // One whose rebalance answers wrongly fails before any round.
    let candidate = Box::new(misbehaving(r#"{"rebalance":"duplicate"}"#, generous()));
    let error = dry_run(candidate, &snapshot, &[], 3, far(), Paced::default()).unwrap_err();
    assert!(matches!(&error, DryRunError::Failed(what) if what.starts_with("rebalance")), "{error:?}");
    // One that loops meets the dry run's deadline, not 100 rounds of call deadlines.
    let looping = Limits { deadline: Duration::from_millis(200), ..generous() };
    let candidate = Box::new(misbehaving(r#"{"allocate":"loop","rebalance":"all"}"#, looping));
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_millis(300);
    let many: Vec<String> = (0..50).map(|i| format!("s{i}")).collect();
    let error = dry_run(candidate, &snapshot, &many, 100, deadline, Paced::default()).unwrap_err();
    assert!(matches!(error, DryRunError::TimedOut(0) | DryRunError::Failed(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "the dry run ran {:?}", started.elapsed());
}

#[test]
fn every_kind_of_rejection_shows_in_the_slot_counters() {
    // Only the endless call should meet the deadline; the others get room.
    let tight = Limits { deadline: Duration::from_millis(500), memory: 16 << 20, ..Limits::default() };
    let roomy = Limits { memory: 16 << 20, ..generous() };
    let cases = [
        (r#"{"allocate":"loop"}"#, "deadline"),
        (r#"{"allocate":"grow-memory"}"#, "memory"),
        (r#"{"allocate":"panic"}"#, "trap"),
        (r#"{"allocate":"error"}"#, "error"),
        (r#"{"allocate":"out-of-range"}"#, "invalid-answer"),
        (r#"{"allocate":"not-allocatable"}"#, "invalid-answer"),
    ];
    let view = ClusterView::from_snapshot(&Scenario::parse("a=1 b= d=").draining("d").snapshot);
    for (config, reason) in cases {
        let compiled = engine().compile(misbehaving_bytes()).unwrap();
        let limits = if reason == "deadline" { tight } else { roomy };
        let slot = Slot::new(
            "Counter",
            engine(),
            AutoRollback { max_faults: 0, ..Default::default() },
            compiled,
            config,
            limits,
        )
        .unwrap();
        let mut guarded = Guarded::new(Box::new(slot.handle()));
        let decision = guarded.allocate(&view, "9", None).unwrap();
        assert_eq!(decision.value, "b", "{config}");
        assert_eq!(decision.fallback.as_ref().map(StrategyError::kind), Some(reason), "{config}");
        let stats = slot.stats();
        assert_eq!(stats.fallbacks["misbehaving@0.1.0"][reason], 1, "{config}: {stats:?}");
        // The engine stays healthy: the next call is answered too.
        assert_eq!(guarded.allocate(&view, "10", None).unwrap().value, "b");
    }
}

#[test]
fn concurrent_compiles_of_one_component_share_the_cache_safely() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig { cache_dir: Some(dir.path().to_owned()), max_instances: 0 }).unwrap();
    let bytes = builtin::component_bytes("least-shard").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            std::thread::spawn(move || engine.compile(bytes).map(|c| c.digest.clone()))
        })
        .collect();
    let digests: Vec<String> = threads.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]));
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 1, "one artifact, no partial files left: {files:?}");
}

#[test]
fn a_component_loaded_twice_is_shared_while_held() {
    // Swapping between two strategies many times must not keep a copy of
    // their code (and an open artifact file) per activation: the soak found
    // 43 open artifacts after eight minutes of swaps.
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig { cache_dir: Some(dir.path().to_owned()), max_instances: 0 }).unwrap();
    let bytes = builtin::component_bytes("hash").unwrap();
    let first = engine.compile(bytes).unwrap();
    let again = engine.compile(bytes).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "the same bytes loaded twice");
    let other = engine.compile(builtin::component_bytes("least-shard").unwrap()).unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    drop((first, again));
    let reloaded = engine.compile(bytes).unwrap();
    let mut strategy = engine.instantiate(&reloaded, "", generous()).unwrap();
    assert!(strategy.allocate(&view(), "9", None).is_ok(), "a component loaded again after all were dropped works");
}

/// Issue 23: the node's instance pool, sized as `shardalloc serve` sizes it,
/// holds every type the node may serve with its strategy and what its slot
/// keeps at once. Before, the 171st type overflowed the pool (512 core
/// instances, 3 per instance of a built-in) and a node with 171 declared
/// types did not start. Here 1,024 slots of the four built-ins are opened
/// and called, then each is swapped to another built-in, given a third as
/// its shadow and called again: three instances per type, every answer the
/// strategy's own.
#[test]
fn the_node_pool_serves_every_type_with_a_swap_and_a_shadow() {
    use shardalloc::engine::limits::{DEFAULT_MAX_INSTANCES, POOL_TYPES, instances_for_types};
    use shardalloc::server::driver::catalog::MAX_TYPES;

    assert_eq!(POOL_TYPES, MAX_TYPES, "the default pool is sized for the node's type limit");
    assert_eq!(DEFAULT_MAX_INSTANCES, instances_for_types(MAX_TYPES));
    let started = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifact-cache");
    let config = EngineConfig { cache_dir: Some(dir), max_instances: instances_for_types(MAX_TYPES) };
    let engine = Engine::new(config).unwrap();
    let builtins: Vec<_> = builtin::names()
        .map(|name| engine.compile_source(&StrategySource::Builtin(name.into()), None).unwrap())
        .collect();
    let strategy = |i: usize| builtins[i % builtins.len()].clone();
    let view = view();

    let mut handles: Vec<_> = (0..MAX_TYPES)
        .map(|i| {
            let slot =
                Slot::new(format!("type-{i}"), engine.clone(), AutoRollback::default(), strategy(i), "", generous())
                    .unwrap_or_else(|e| panic!("type {i} of {MAX_TYPES}: {e}"));
            slot.handle()
        })
        .collect();
    let opened = started.elapsed();
    for (i, handle) in handles.iter_mut().enumerate() {
        handle.allocate(&view, "9", None).unwrap_or_else(|e| panic!("type {i}: {e}"));
        assert_eq!(handle.info().name, strategy(i).info.name);
    }
    let called = started.elapsed();

    for (i, handle) in handles.iter().enumerate() {
        let slot = handle.slot();
        slot.activate(strategy(i + 1), "", generous()).unwrap_or_else(|e| panic!("activating on type {i}: {e}"));
        slot.set_shadow(Some((strategy(i + 2), "", generous())))
            .unwrap_or_else(|e| panic!("a shadow on type {i}: {e}"));
    }
    for (i, handle) in handles.iter_mut().enumerate() {
        handle.allocate(&view, "9", None).unwrap_or_else(|e| panic!("type {i} after its swap: {e}"));
        assert_eq!(handle.info().name, strategy(i + 1).info.name);
        let stats = handle.slot().stats();
        assert_eq!((stats.activations, stats.shadow_calls, stats.cold_instances), (2, 1, 0), "type {i}: {stats:?}");
    }
    eprintln!(
        "{MAX_TYPES} types: opened in {opened:?}, each called by {called:?}, swapped, shadowed and called again by {:?}",
        started.elapsed()
    );
}

#[test]
fn the_first_decision_after_a_whole_view_load_has_the_view_load_budget_and_a_fault_names_it() {
    // A call deadline of 100 ms, a view-load budget of 1 s.
    let limits = Limits { deadline: Duration::from_millis(100), view_load: Duration::from_secs(1), ..generous() };
    let mut strategy = misbehaving(r#"{"allocate":"loop"}"#, limits);
    let started = Instant::now();
    let fault = strategy.allocate(&view(), "9", None).unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_secs(1), "the first decision had only the call deadline: {elapsed:?}");
    let StrategyError::Fault { kind: FaultKind::Deadline, detail } = fault else { panic!("{fault:?}") };
    assert!(detail.contains("view-load-ms") && detail.contains("1s"), "{detail}");
    // A rebuilt instance loads the view whole again: the same budget.
    let started = Instant::now();
    assert!(strategy.allocate(&view(), "9", None).is_err());
    assert!(started.elapsed() >= Duration::from_secs(1));
}
