//! `shardalloc strategy inspect|eval|simulate` as scripts use it: the real
//! binary, snapshot files, one JSON line per answer, one error line on
//! stderr and a non-zero exit for every bad input.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn shardalloc(args: &[&str]) -> Run {
    let Output { status, stdout, stderr } = Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(args)
        // Tests leave the user's cache alone.
        .env("SHARDALLOC_CACHE_DIR", "off")
        .output()
        .expect("run shardalloc");
    Run {
        status: status.code().unwrap_or(-1),
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

fn lines(run: &Run) -> Vec<Value> {
    assert_eq!(run.status, 0, "stderr: {}", run.stderr);
    run.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

fn write(dir: &Path, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

const SNAPSHOT: &str = r#"{"regions":[
  {"address":"127.0.0.1:2552","shards":["001","002","003","004","005","006","007","008","009","010"],"app_version":"1.0.0"},
  {"address":"127.0.0.2:2552","shards":[],"app_version":"1.0.0"},
  {"address":"127.0.0.3:2552","shards":["011"],"app_version":"1.0.0","status":"up","draining":false}
 ],
 "in_progress":[],
 "placements":{"042":"127.0.0.3:2552","001":"127.0.0.2:2552"},
 "signal":null}"#;

fn fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "snapshot.json", SNAPSHOT);
    (dir, path.to_str().unwrap().to_owned())
}

#[test]
fn inspect_prints_name_version_description_schema() {
    for name in ["least-shard", "hash", "capacity", "zone", "load-balance"] {
        let out = lines(&shardalloc(&["strategy", "inspect", name]));
        let info = &out[0];
        assert_eq!(info["name"], name);
        assert!(info["version"].as_str().is_some_and(|v| !v.is_empty()));
        assert!(info["description"].as_str().is_some_and(|v| !v.is_empty()));
        assert!(info["config_schema"].is_object());
        assert_eq!(info["contract"], "shardalloc:strategy@0.3.0", "{info}");
    }
}

#[test]
fn eval_allocate_answers_one_line_and_honours_placements() {
    let (_dir, snapshot) = fixture();
    let run = shardalloc(&["strategy", "eval", "--snapshot", &snapshot, "allocate", "--shard", "900"]);
    assert_eq!(lines(&run), [json!({"region":"127.0.0.2:2552"})]);
    let run = shardalloc(&["strategy", "eval", "--snapshot", &snapshot, "allocate", "--shard", "042"]);
    assert_eq!(lines(&run), [json!({"region":"127.0.0.3:2552"})]);
    let run = shardalloc(&[
        "strategy",
        "eval",
        "--snapshot",
        &snapshot,
        "allocate",
        "--shard",
        "900",
        "--requester",
        "127.0.0.3:2552",
    ]);
    assert_eq!(lines(&run), [json!({"region":"127.0.0.2:2552"})]);
}

#[test]
fn eval_rebalance_puts_placement_mismatches_first() {
    let (_dir, snapshot) = fixture();
    let run = shardalloc(&["strategy", "eval", "--snapshot", &snapshot, "rebalance"]);
    // 001 is pinned elsewhere; least-shard (limit 1 of 11 shards) adds the oldest of the busiest region.
    assert_eq!(lines(&run), [json!({"shards":["001"]})]);
    let run = shardalloc(&[
        "strategy",
        "eval",
        "--config",
        r#"{"absolute_limit":100,"relative_limit":1.0}"#,
        "--snapshot",
        &snapshot,
        "rebalance",
    ]);
    assert_eq!(lines(&run), [json!({"shards":["001","002","003","004","005","006"]})]);
}

#[test]
fn simulate_prints_one_line_per_round_with_every_region() {
    let (_dir, snapshot) = fixture();
    let run = shardalloc(&["strategy", "simulate", "--snapshot", &snapshot, "--rounds", "12"]);
    let rounds = lines(&run);
    assert_eq!(rounds.len(), 12);
    assert_eq!(rounds[0]["round"], 1);
    assert_eq!(rounds[0]["moved"], json!(["001"]));
    assert_eq!(rounds[0]["counts"], json!({"127.0.0.1:2552":9,"127.0.0.2:2552":1,"127.0.0.3:2552":1}));
    // Keys in the documented order.
    assert!(run.stdout.starts_with(r#"{"round":1,"moved":["#), "{}", run.stdout);
    let last = &rounds[11]["counts"];
    let counts: Vec<i64> = last.as_object().unwrap().values().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(counts.iter().sum::<i64>(), 11);
    assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{last}");
    assert_eq!(rounds[11]["moved"], json!([]), "balanced clusters stay put");
}

#[test]
fn in_progress_shards_count_as_moving_in_round_one_only() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = write(
        dir.path(),
        "s.json",
        r#"{"regions":[{"address":"a","shards":["1","2","3","4"]},{"address":"b","shards":[]}],"in_progress":["1"]}"#,
    );
    let snapshot = snapshot.to_str().unwrap();
    let config = r#"{"absolute_limit":100,"relative_limit":1.0}"#;
    let run = shardalloc(&["strategy", "simulate", "--config", config, "--snapshot", snapshot, "--rounds", "2"]);
    let rounds = lines(&run);
    // Round 1: the current algorithm holds while a hand-off is in progress.
    assert_eq!(rounds[0]["moved"], json!([]));
    assert_eq!(rounds[1]["moved"], json!(["1", "2"]));
    assert_eq!(rounds[1]["counts"], json!({"a":2,"b":2}));
}

#[test]
fn a_faulty_component_falls_back_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = write(dir.path(), "misbehaving.wasm", common::misbehaving_bytes());
    let snapshot = write(dir.path(), "snapshot.json", SNAPSHOT.replace(r#""draining":false"#, r#""draining":true"#));
    let snapshot = snapshot.to_str().unwrap().to_owned();
    let wasm = wasm.to_str().unwrap();
    let config = r#"{"allocate":"not-allocatable"}"#;
    let s = ["strategy", "eval", "--strategy", wasm, "--config", config, "--snapshot", &snapshot];
    let run = shardalloc(&[&s[..], &["allocate", "--shard", "900"]].concat());
    let out = lines(&run);
    assert_eq!(out[0]["region"], "127.0.0.2:2552");
    let reason = out[0]["fallback"].as_str().unwrap();
    assert!(reason.contains("127.0.0.3:2552 is draining"), "{reason}");
    assert!(run.stderr.contains(reason), "{}", run.stderr);

    let config = r#"{"rebalance":"duplicate"}"#;
    let s = ["strategy", "eval", "--strategy", wasm, "--config", config, "--snapshot", &snapshot, "rebalance"];
    let run = shardalloc(&s);
    let out = lines(&run);
    // The pinned 001 (a placement, not the strategy's answer) and nothing
    // else: a failed rebalance moves nothing of its own, where least-shard
    // would have emptied the draining region (011).
    assert_eq!(out[0]["shards"], json!(["001"]));
    assert!(out[0]["fallback"].as_str().unwrap().contains("listed twice"), "{}", out[0]);

    let config = r#"{"allocate":"panic"}"#;
    let s = ["strategy", "eval", "--strategy", wasm, "--config", config, "--snapshot", &snapshot];
    let out = lines(&shardalloc(&[&s[..], &["allocate", "--shard", "900"]].concat()));
    assert!(out[0]["fallback"].as_str().unwrap().contains("fault"), "{}", out[0]);
}

fn assert_fails(args: &[&str], needle: &str) {
    let run = shardalloc(args);
    assert_ne!(run.status, 0, "{args:?} should fail");
    assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    let stderr = run.stderr.trim();
    assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr:?} lacks {needle:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn every_bad_input_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str, content: &str| write(dir.path(), name, content).to_str().unwrap().to_owned();
    let good = d("good.json", SNAPSHOT);
    let bad_json = d("bad.json", "{not json");
    let twice = d("twice.json", r#"{"regions":[{"address":"a","shards":["1"]},{"address":"b","shards":["1"]}]}"#);
    let dup = d("dup.json", r#"{"regions":[{"address":"a","shards":[]},{"address":"a","shards":[]}]}"#);
    let text = d("text.wasm", "hello");
    let empty = d("empty.wasm", "");
    let core = write(dir.path(), "core.wasm", b"\0asm\x01\0\0\0").to_str().unwrap().to_owned();
    let missing = dir.path().join("missing.json").to_str().unwrap().to_owned();
    fn eval(snapshot: &str) -> Vec<&str> {
        vec!["strategy", "eval", "--snapshot", snapshot]
    }
    assert_fails(&[&eval(&missing)[..], &["rebalance"]].concat(), "cannot read snapshot");
    assert_fails(&[&eval(&bad_json)[..], &["rebalance"]].concat(), "not valid");
    assert_fails(&[&eval(&twice)[..], &["rebalance"]].concat(), "listed twice");
    assert_fails(&[&eval(&dup)[..], &["rebalance"]].concat(), "duplicate region address");
    assert_fails(&["strategy", "eval", "--strategy", "nope", "--snapshot", &good, "rebalance"], "unknown strategy");
    assert_fails(&["strategy", "inspect", &text], "not a WebAssembly file");
    assert_fails(&["strategy", "inspect", &empty], "empty");
    assert_fails(&["strategy", "inspect", &core], "core WebAssembly module, not a component");
    assert_fails(&["strategy", "inspect", &missing.replace(".json", ".wasm")], "cannot read");
    assert_fails(&["strategy", "eval", "--config", r#"{"bogus":1}"#, "--snapshot", &good, "rebalance"], "bogus");
    assert_fails(
        &["strategy", "eval", "--config", "{", "--snapshot", &good, "rebalance"],
        "--config is not valid JSON",
    );
    assert_fails(&["strategy", "eval", "--config", "[1]", "--snapshot", &good, "rebalance"], "JSON object");
    assert_fails(
        &[&eval(&good)[..], &["allocate", "--shard", "1", "--requester", "nowhere"]].concat(),
        "not a region of the snapshot",
    );
    let none_up = d("none.json", r#"{"regions":[{"address":"a","shards":[],"status":"leaving"}]}"#);
    assert_fails(&[&eval(&none_up)[..], &["allocate", "--shard", "1"]].concat(), "no allocatable region");
}

#[test]
fn wrap_turns_a_core_module_into_a_loadable_component() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wrapped.wasm");
    // A module without the contract's exports wraps into a component that is refused.
    let core = write(dir.path(), "core.wasm", b"\0asm\x01\0\0\0");
    assert_fails(
        &["strategy", "wrap", core.to_str().unwrap(), "--out", out.to_str().unwrap()],
        "does not implement a strategy contract this host accepts (shardalloc:strategy/allocator@0.1.0 or shardalloc:strategy/allocator@0.2.0 or shardalloc:strategy/allocator@0.3.0): it exports nothing",
    );
    assert!(!out.exists());
    // The host build leaves the guest core modules next to the components.
    let guest =
        Path::new(env!("OUT_DIR")).ancestors().find(|p| p.join("CACHEDIR.TAG").is_file()).unwrap().join("guest");
    let module = guest.join("wasm32-unknown-unknown/guest/shardalloc_strategy_hash.wasm");
    let run = shardalloc(&["strategy", "wrap", module.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let line = &lines(&run)[0];
    assert_eq!(line["name"], "hash");
    assert_eq!(lines(&shardalloc(&["strategy", "inspect", out.to_str().unwrap()]))[0]["name"], "hash");
}

#[test]
fn conform_checks_a_component_and_names_each_violation() {
    let out = lines(&shardalloc(&["strategy", "conform", "zone"]));
    assert_eq!(out.last().unwrap()["conformant"], true);
    assert_eq!(out.last().unwrap()["contract"], "shardalloc:strategy@0.3.0", "the contract it speaks");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.1/zone.wasm");
    let old = lines(&shardalloc(&["strategy", "conform", fixture]));
    assert_eq!(old.last().unwrap()["contract"], "shardalloc:strategy@0.1.0", "a 0.1 build says so");
    assert_eq!(old.last().unwrap()["conformant"], true);
    let dir = tempfile::tempdir().unwrap();
    let wasm = write(dir.path(), "misbehaving.wasm", common::misbehaving_bytes());
    let run = shardalloc(&["strategy", "conform", wasm.to_str().unwrap(), "--config", r#"{"rebalance":"duplicate"}"#]);
    assert_ne!(run.status, 0);
    assert!(run.stdout.contains("twice"), "{}", run.stdout);
    assert!(run.stderr.contains("conformance problems"), "{}", run.stderr);
    // Each kind of problem once, with its count; the verdict stays last.
    let out: Vec<Value> = run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (verdict, problems) = out.split_last().unwrap();
    assert_eq!(verdict["conformant"], false, "{verdict}");
    assert_eq!(verdict["contract"], "shardalloc:strategy@0.3.0", "{verdict}");
    assert_eq!(verdict["distinct"].as_u64().unwrap(), problems.len() as u64);
    let total: u64 = problems.iter().map(|p| p["count"].as_u64().unwrap()).sum();
    assert_eq!(verdict["problems"].as_u64().unwrap(), total);
    let kinds: std::collections::BTreeSet<&str> = problems.iter().map(|p| p["problem"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), problems.len(), "a kind printed twice: {}", run.stdout);
}

#[test]
fn offline_tools_cache_what_they_compile() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = write(dir.path(), "misbehaving.wasm", common::misbehaving_bytes());
    let cache = dir.path().join("cache");
    let inspect = || {
        Command::new(env!("CARGO_BIN_EXE_shardalloc"))
            .args(["strategy", "inspect", wasm.to_str().unwrap()])
            .env("SHARDALLOC_CACHE_DIR", &cache)
            .output()
            .unwrap()
    };
    assert!(inspect().status.success());
    let artifacts = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm"))
            .count()
    };
    assert_eq!(artifacts(), 1);
    assert!(inspect().status.success());
    assert_eq!(artifacts(), 1, "the second run used the artifact");
}

#[test]
fn inspect_applies_a_config_first() {
    // A 0.1 or 0.3 component's description can depend on its configuration
    // (`needs_shard_names`): least-shard's classic algorithm reads ids.
    let old = concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.1/least-shard.wasm");
    let plain = lines(&shardalloc(&["strategy", "inspect", old]));
    assert_eq!(plain[0]["needs_shard_names"], false);
    let classic = lines(&shardalloc(&["strategy", "inspect", old, "--config", r#"{"algorithm":"classic"}"#]));
    assert_eq!(classic[0]["needs_shard_names"], true);
    // A 0.2 component asks for ids one by one when it reads them: it never
    // says it needs them all.
    let older = concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.2/least-shard.wasm");
    let config = r#"{"algorithm":"classic"}"#;
    assert_eq!(lines(&shardalloc(&["strategy", "inspect", older, "--config", config]))[0]["needs_shard_names"], false);
    // 0.3 has them with its view when it asks.
    let new = lines(&shardalloc(&["strategy", "inspect", "least-shard", "--config", config]));
    assert_eq!(new[0]["needs_shard_names"], true);
    assert_eq!(lines(&shardalloc(&["strategy", "inspect", "least-shard"]))[0]["needs_shard_names"], false);
    // And the shards' attributes, when its settings read them.
    let zone = lines(&shardalloc(&["strategy", "inspect", "zone", "--config", r#"{"attribute":"region"}"#]));
    assert_eq!(zone[0]["needs_shard_attributes"], true);
    assert_eq!(lines(&shardalloc(&["strategy", "inspect", "zone"]))[0]["needs_shard_attributes"], false);
}

/// A settings file whose load or churn settings cannot work is refused at
/// start, naming the section and the rule, before anything listens.
#[test]
fn serve_refuses_load_and_churn_settings_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[types.cart]\nstrategy = \"least-shard\"\nmax-moves-fraction = 2.0\n", "[types.cart]: inconsistent settings"),
        ("[types.cart]\nstrategy = \"least-shard\"\nmax-moves-fraction = 2.0\n", "at most 1, not 2"),
        ("[coordinator]\nmax-moves-per-round = 0\n", "max-moves-per-round must be at least 1"),
        ("[coordinator]\nload-half-life-ms = 0\n", "load_half_life_ms must be greater than zero"),
        ("[types.cart]\nstrategy = \"least-shard\"\nmove-cooldown = 5\n", "unknown field `move-cooldown`"),
    ];
    for (index, (settings, says)) in cases.into_iter().enumerate() {
        let file = write(dir.path(), &format!("bad-{index}.toml"), settings);
        let data = dir.path().join(format!("data-{index}"));
        let run = shardalloc(&[
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_ne!(run.status, 0, "case {index} started");
        assert!(run.stderr.contains(says), "case {index}: {} should say {says:?}", run.stderr);
    }
}

/// `strategy trace` writes a deterministic trace, and `strategy simulate
/// --trace` replays it against strategies side by side: a line per round,
/// then each strategy's summary; a bad trace is refused by line.
#[test]
fn a_generated_trace_replays_against_two_strategies_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["strategy", "trace", "--regions", "3", "--shards", "60", "--minutes", "2", "--drift-every-m", "1"];
    let more = ["--joins", "2", "--joins-together", "--seed", "3"];
    let generated = shardalloc(&[&args[..], &more[..]].concat());
    assert_eq!(generated.status, 0, "{}", generated.stderr);
    assert_eq!(generated.stdout, shardalloc(&[&args[..], &more[..]].concat()).stdout, "the same seed, the same trace");
    assert!(generated.stdout.starts_with("t_ms,kind,subject,value\n0,join,"), "{}", generated.stdout);
    let trace = write(dir.path(), "trace.csv", &generated.stdout);
    let run = shardalloc(&[
        "strategy",
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--strategy",
        "least-shard",
        "--strategy",
        "load-balance",
        "--rounds-every-s",
        "10",
    ]);
    let out = lines(&run);
    let (rounds, summaries) = out.split_at(out.len() - 2);
    assert_eq!(rounds.len(), 13, "120 s of trace, a round every 10 s from 10 s: {}", run.stdout);
    assert!(rounds.iter().all(|r| r["strategies"]["least-shard"]["maxOverBound"].is_number()
        && r["strategies"]["load-balance"]["moves"].is_number()));
    for (summary, name) in summaries.iter().zip(["least-shard@", "load-balance@"]) {
        assert!(summary["strategy"].as_str().unwrap().starts_with(name), "{summary}");
        assert_eq!(summary["rounds"], 13);
        for key in ["p50", "p99", "max"] {
            assert!(summary["maxOverBound"][key].as_f64().unwrap() >= 1.0 - 1e-9, "{summary}");
        }
        assert!(summary["moves"].is_u64() && summary["movedLoadFraction"].is_f64(), "{summary}");
        // The two regions that joined, and the rounds they took to carry 0.9 × the mean.
        assert_eq!(summary["joins"]["regions"], 2, "{summary}");
        assert!(summary["joins"]["roundsToMean"]["max"].is_number(), "{summary}");
        assert!(
            summary["joins"]["reachedLevel"].as_u64().unwrap() >= summary["joins"]["reachedMean"].as_u64().unwrap()
        );
    }
    let joined: Vec<&str> = (generated.stdout.lines())
        .filter(|line| line.contains(",join,") && !line.starts_with("0,"))
        .map(|line| line.split(',').next().unwrap())
        .collect();
    assert_eq!(joined.len(), 2);
    assert_eq!(joined[0], joined[1], "--joins-together: one time for both");

    let bad = write(dir.path(), "bad.csv", "t_ms,kind,subject,value\n0,join,a:1,\n5,leave,b:1,\n");
    let run = shardalloc(&["strategy", "simulate", "--trace", bad.to_str().unwrap()]);
    assert_ne!(run.status, 0);
    assert!(run.stderr.contains("line 3: a leave of unknown region b:1"), "{}", run.stderr);
    assert!(!summaries[0].as_object().unwrap().contains_key("cutRatio"), "no edges, no cut ratio: {}", summaries[0]);
}

/// With `--communities` the trace carries edge lines, and the replay's
/// rounds and summaries their cut ratio; bad settings are refused by name.
#[test]
fn a_community_trace_replays_with_its_cut_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["strategy", "trace", "--regions", "5", "--shards", "200", "--minutes", "2", "--drift-every-m", "1"];
    let generated = shardalloc(&[&args[..], &["--communities", "20", "--inside", "0.9"][..]].concat());
    assert_eq!(generated.status, 0, "{}", generated.stderr);
    assert!(generated.stdout.contains(",edge,"), "no edge lines: {}", generated.stdout);
    let trace = write(dir.path(), "trace.csv", &generated.stdout);
    let run = shardalloc(&["strategy", "simulate", "--trace", trace.to_str().unwrap(), "--rounds-every-s", "60"]);
    let out = lines(&run);
    let (rounds, summary) = out.split_at(out.len() - 1);
    assert!(rounds.iter().all(|r| r["strategies"]["least-shard"]["cutRatio"].is_f64()), "{}", run.stdout);
    // Counting ignores who talks to whom: most of the weight crosses 5 regions.
    let last = summary[0]["cutRatio"]["final"].as_f64().unwrap();
    assert!(last > 0.5 && last <= 1.0, "{}", summary[0]);
    assert!(summary[0]["cutRatio"]["p99"].as_f64().unwrap() >= summary[0]["cutRatio"]["p50"].as_f64().unwrap());
    for (flags, says) in [
        (&["--communities", "20", "--inside", "1.5"][..], "--inside is a share from 0 to 1, not 1.5"),
        (&["--communities", "300"][..], "--communities (300) must not exceed --shards (200)"),
    ] {
        let run = shardalloc(&[&args[..], flags].concat());
        assert_ne!(run.status, 0);
        assert!(run.stderr.contains(says), "{flags:?}: {}", run.stderr);
    }
}

#[test]
fn eval_rebalance_names_the_destinations_a_strategy_gave() {
    let (_dir, snapshot) = fixture();
    // hash moves each misplaced shard to its rendezvous winner (contract
    // 0.3): every shard it moves has a destination, and it is not the
    // shard's home.
    let run = shardalloc(&["strategy", "eval", "--strategy", "hash", "--snapshot", &snapshot, "rebalance"]);
    let line = &lines(&run)[0];
    let shards = line["shards"].as_array().unwrap();
    assert!(!shards.is_empty(), "{line}");
    let to = line["to"].as_object().unwrap_or_else(|| panic!("no destinations: {line}"));
    // The placement mismatch comes first and has none: the placement decides.
    assert_eq!(shards[0], "001", "{line}");
    assert!(!to.contains_key("001"), "{line}");
    for shard in &shards[1..] {
        let shard = shard.as_str().unwrap();
        let dest = to.get(shard).and_then(Value::as_str).unwrap_or_else(|| panic!("{shard}: {line}"));
        let home = if shard == "011" { "127.0.0.3:2552" } else { "127.0.0.1:2552" };
        assert_ne!(dest, home, "{shard} moved to its own home: {line}");
    }
    // least-shard names none: the line has no "to".
    let run = shardalloc(&["strategy", "eval", "--snapshot", &snapshot, "rebalance"]);
    assert!(lines(&run)[0].get("to").is_none(), "{:?}", lines(&run));
}
