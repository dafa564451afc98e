//! The Rust runner of the region core's specification: every scenario in
//! `contracts/region-core/*.txt` (the format is in that folder's README),
//! run against [`RegionCore`] with the literal actions compared. The
//! TypeScript and Python clients run the same files with runners of their
//! own, so a rule of the core is written once.
//!
//! `SHARDALLOC_REWRITE_SCENARIOS=1 cargo test -p shardalloc-client
//! core_scenarios` writes what the core does into the files instead of
//! comparing (for writing a new scenario: write its steps, rewrite, read
//! the actions, commit them only once they are right).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::protocol::NodeMessage;
use crate::region::load::LoadMeter;

type Msg = String;

/// The folder of the scenario files.
fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/region-core")
}

/// One line of expectation: a kind and its JSON value (`null` when none).
type Outcome = (String, Value);

/// What a scenario file holds, line by line, so a rewrite keeps everything
/// but the expectations.
#[derive(Debug)]
enum Item {
    /// A comment, a blank line, `scenario`, `config` or `regions`.
    Raw(String),
    /// A step and the outcomes written under it.
    Step { line: usize, text: String, expected: Vec<Outcome> },
    /// A query and the value written under it.
    Query { line: usize, text: String, expected: Option<Value> },
}

/// Splits `verb [json]` into the verb and the parsed JSON (`null` when absent).
fn verb_and_value(text: &str, file: &str, line: usize) -> (String, Value) {
    let text = text.trim();
    let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
    let rest = rest.trim();
    let value = if rest.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(rest).unwrap_or_else(|e| panic!("{file}:{line}: bad JSON {rest:?}: {e}"))
    };
    (verb.to_owned(), value)
}

fn parse(file: &str, text: &str) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if let Some(outcome) = raw.strip_prefix("  ") {
            match items.last_mut() {
                Some(Item::Step { expected, .. }) => expected.push(verb_and_value(outcome, file, line)),
                Some(Item::Query { expected, .. }) => {
                    let value =
                        outcome.trim().strip_prefix('=').unwrap_or_else(|| panic!("{file}:{line}: `= VALUE` expected"));
                    *expected = Some(verb_and_value(&format!("= {value}"), file, line).1);
                }
                _ => panic!("{file}:{line}: an outcome without a step"),
            }
        } else if raw.starts_with('?') {
            items.push(Item::Query { line, text: raw.to_owned(), expected: None });
        } else if raw.starts_with(|c: char| c.is_ascii_digit()) {
            items.push(Item::Step { line, text: raw.to_owned(), expected: Vec::new() });
        } else {
            items.push(Item::Raw(raw.to_owned()));
        }
    }
    items
}

/// Numbers compare by value (15 and 15.0 are one number, as in JavaScript and Python).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn render_update(update: &Update) -> Value {
    match update {
        Update::Registered { incarnation } => json!({"Registered": {"incarnation": incarnation}}),
        Update::Refused { reason } => json!({"Refused": {"reason": reason}}),
        Update::Disconnected { reason } => json!({"Disconnected": {"reason": reason}}),
        Update::Fenced => json!("Fenced"),
        Update::LeaseRegained => json!("LeaseRegained"),
        Update::HomeChanged { shard, home } => json!({"HomeChanged": {"shard": shard, "home": home}}),
        Update::ShardRefused { shard, reason, dropped } => {
            json!({"ShardRefused": {"shard": shard, "reason": reason, "dropped": dropped}})
        }
        Update::PlacementChanged { shard, target } => {
            json!({"PlacementChanged": {"shard": shard, "target": target}})
        }
        Update::ShardStarted { shard, epoch } => json!({"ShardStarted": {"shard": shard, "epoch": epoch}}),
        Update::ShardStopped { shard } => json!({"ShardStopped": {"shard": shard}}),
        Update::Left => json!("Left"),
        Update::RegionRemoved { address } => json!({"RegionRemoved": {"address": address}}),
    }
}

/// An action as a scenario line's kind and value.
fn render(action: &Action<Msg>) -> Outcome {
    let (kind, value) = match action {
        Action::Send(message) => ("send", serde_json::to_value(message).expect("a region message is JSON")),
        Action::Start { shard, epoch } => ("start", json!({"shard": shard, "epoch": epoch})),
        Action::Stop { shard } => ("stop", json!(shard)),
        Action::AbandonStop { shard } => ("abandon-stop", json!(shard)),
        Action::Deliver { shard, message } => ("deliver", json!({"shard": shard, "message": message})),
        Action::Forward { to, shard, message } => ("forward", json!({"to": to, "shard": shard, "message": message})),
        Action::Undelivered { shard, message, error } => {
            ("undelivered", json!({"shard": shard, "message": message, "error": render_delivery_error(error)}))
        }
        Action::Publish(update) => ("publish", render_update(update)),
        Action::Reconnect { reason } => ("reconnect", json!(reason)),
    };
    (kind.to_owned(), value)
}

fn render_delivery_error(error: &DeliveryError) -> Value {
    match error {
        DeliveryError::AttemptsExhausted { shard, to, attempts, reason } => {
            json!({"AttemptsExhausted": {"shard": shard, "to": to, "attempts": attempts, "reason": reason}})
        }
        DeliveryError::DeadlinePassed { shard, to, waited_ms, reason } => {
            json!({"DeadlinePassed": {"shard": shard, "to": to, "waited_ms": waited_ms, "reason": reason}})
        }
        DeliveryError::ShardRefused { shard, reason } => json!({"ShardRefused": {"shard": shard, "reason": reason}}),
        DeliveryError::RegionStopped { shard } => json!({"RegionStopped": {"shard": shard}}),
    }
}

fn render_send_error(error: &SendError) -> Value {
    match error {
        SendError::BufferFull { shard, limit } => json!({"BufferFull": {"shard": shard, "limit": limit}}),
        SendError::TotalBufferFull { limit } => json!({"TotalBufferFull": {"limit": limit}}),
        SendError::InvalidShard { shard, reason } => json!({"InvalidShard": {"shard": shard, "reason": reason}}),
        SendError::Stopped => json!("Stopped"),
    }
}

fn render_region_error(error: &RegionError) -> Value {
    match error {
        RegionError::InvalidShard { shard, reason } => json!({"InvalidShard": {"shard": shard, "reason": reason}}),
        RegionError::DrainAndLeaveTimedOut { bound, shards, leave_asked } => json!({"DrainAndLeaveTimedOut": {
            "bound_ms": bound.as_millis() as u64, "shards": shards, "leave_asked": leave_asked
        }}),
        other => panic!("the core does not raise {other:?}"),
    }
}

/// The scenarios' default configuration, changed by a `config` line.
fn configure(changes: &Value, address: Option<&str>, file: &str) -> (CoreConfig, usize) {
    let mut c = json!({
        "address": "a", "incarnation": 7, "roles": [], "app_version": "1.0", "labels": {}, "proxy_only": false,
        "shard_buffer_limit": 3, "total_buffer_limit": 5, "stop_deadline_ms": 500, "home_retry_ms": 1000,
        "response_timeout_ms": 10000, "load_report_top": 10, "forward_attempts": 3, "forward_deadline_ms": 5000,
        "max_lookups_in_flight": 256,
    });
    for (key, value) in changes.as_object().into_iter().flatten() {
        assert!(c.get(key).is_some(), "{file}: no config field {key:?}");
        c[key] = value.clone();
    }
    if let Some(address) = address {
        c["address"] = json!(address);
    }
    let u = |key: &str| c[key].as_u64().unwrap_or_else(|| panic!("{file}: config {key} is not a number"));
    let registration = Register {
        address: c["address"].as_str().expect("address").to_owned(),
        incarnation: u("incarnation"),
        roles: serde_json::from_value(c["roles"].clone()).expect("roles"),
        app_version: c["app_version"].as_str().expect("app_version").to_owned(),
        labels: serde_json::from_value(c["labels"].clone()).expect("labels"),
        proxy_only: c["proxy_only"].as_bool().expect("proxy_only"),
        sequence: 0,
    };
    let config = CoreConfig {
        registration,
        shard_buffer_limit: u("shard_buffer_limit") as usize,
        total_buffer_limit: u("total_buffer_limit") as usize,
        stop_deadline_ms: u("stop_deadline_ms"),
        home_retry_ms: u("home_retry_ms"),
        response_timeout_ms: u("response_timeout_ms"),
        forward_attempts: u("forward_attempts") as u32,
        forward_deadline_ms: u("forward_deadline_ms"),
        max_lookups_in_flight: u("max_lookups_in_flight") as usize,
    };
    (config, u("load_report_top") as usize)
}

/// One region of a scenario: its core and its load meter.
struct Subject {
    core: RegionCore<Msg>,
    meter: LoadMeter,
    top: usize,
}

/// The regions of the scenario under way.
#[derive(Default)]
struct World {
    config: Value,
    regions: BTreeMap<String, Subject>,
    /// The region a step without `@` goes to.
    first: Option<String>,
}

impl World {
    fn add(&mut self, address: Option<&str>, file: &str) {
        let (config, top) = configure(&self.config, address, file);
        let name = config.registration.address.clone();
        self.first.get_or_insert_with(|| name.clone());
        self.regions.insert(name, Subject { core: RegionCore::new(config), meter: LoadMeter::default(), top });
    }

    /// The region a step names (`@b`), or the first; the rest of the text.
    fn subject<'t>(&mut self, text: &'t str, file: &str, line: usize) -> (&mut Subject, &'t str) {
        if self.regions.is_empty() {
            self.add(None, file);
        }
        let text = text.trim_start();
        let (name, rest) = match text.strip_prefix('@') {
            Some(tagged) => {
                let (name, rest) = tagged.split_once(' ').unwrap_or((tagged, ""));
                (name.to_owned(), rest)
            }
            None => (self.first.clone().expect("a region"), text),
        };
        let subject = self.regions.get_mut(&name).unwrap_or_else(|| panic!("{file}:{line}: no region {name:?}"));
        (subject, rest)
    }
}

fn field<'v>(value: &'v Value, key: &str, file: &str, line: usize) -> &'v Value {
    value.get(key).unwrap_or_else(|| panic!("{file}:{line}: the event needs {key:?}"))
}

fn text_of(value: &Value, file: &str, line: usize) -> String {
    value.as_str().unwrap_or_else(|| panic!("{file}:{line}: a string expected, got {value}")).to_owned()
}

fn number_of(value: &Value, file: &str, line: usize) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("{file}:{line}: a whole number expected, got {value}"))
}

/// Runs one step; its outcomes.
fn step(world: &mut World, text: &str, file: &str, line: usize) -> Vec<Outcome> {
    let (time, rest) = text.split_once(' ').unwrap_or((text, ""));
    let now: Millis = time.parse().unwrap_or_else(|_| panic!("{file}:{line}: a time in ms expected, got {time:?}"));
    let (subject, rest) = world.subject(rest, file, line);
    let (event, value) = verb_and_value(rest, file, line);
    let core = &mut subject.core;
    let message = |v: &Value| text_of(field(v, "message", file, line), file, line);
    let shard = |v: &Value| text_of(field(v, "shard", file, line), file, line);
    let sent = |result: Result<Vec<A>, SendError>| match result {
        Ok(actions) => actions.iter().map(render).collect(),
        Err(error) => vec![("error".to_owned(), render_send_error(&error))],
    };
    match event.as_str() {
        "connected" => core.connected(now).iter().map(render).collect(),
        "disconnected" => core.disconnected(now, &text_of(&value, file, line)).iter().map(render).collect(),
        "node" => {
            let message: NodeMessage = serde_json::from_value(value.clone())
                .unwrap_or_else(|e| panic!("{file}:{line}: not a node message: {e}"));
            core.on_message(message, now).iter().map(render).collect()
        }
        "tick" => {
            let metrics: BTreeMap<String, f64> =
                if value.is_null() { BTreeMap::new() } else { serde_json::from_value(value).expect("metrics") };
            let (meter, top) = (&mut subject.meter, subject.top);
            core.tick_with_load(now, || metrics, |runs| meter.report(now, runs, top)).iter().map(render).collect()
        }
        "send" => sent(core.send(&shard(&value), message(&value), now)),
        "inbound" => sent(core.inbound(&shard(&value), message(&value), now)),
        "stop-finished" => core.stop_finished(&text_of(&value, file, line), now).iter().map(render).collect(),
        "forward-failed" => {
            let messages = field(&value, "messages", file, line).as_array().expect("messages");
            let messages = messages.iter().map(|m| text_of(m, file, line)).collect();
            let to = text_of(field(&value, "to", file, line), file, line);
            let reason = text_of(field(&value, "reason", file, line), file, line);
            core.forward_failed(&shard(&value), &to, messages, &reason, now).iter().map(render).collect()
        }
        "request-home" => match core.request_home(&text_of(&value, file, line), now) {
            Ok(HomeLookup::Known(home)) => vec![("known".to_owned(), json!(home))],
            Ok(HomeLookup::Asked(actions)) => actions.iter().map(render).collect(),
            Err(error) => vec![("error".to_owned(), render_region_error(&error))],
        },
        "leave" => core.leave(now).iter().map(render).collect(),
        "shutdown" => core.shutdown(now).iter().map(render).collect(),
        "drain-and-leave" => core.drain_and_leave(number_of(&value, file, line), now).iter().map(render).collect(),
        "request-drain" => {
            let draining = value.as_bool().unwrap_or_else(|| panic!("{file}:{line}: true or false expected"));
            core.request_drain(draining, now).iter().map(render).collect()
        }
        "record-load" => {
            let units = field(&value, "units", file, line).as_f64().expect("units");
            subject.meter.record(&shard(&value), units, now);
            Vec::new()
        }
        "set-load" => {
            let rate = field(&value, "rate", file, line).as_f64().expect("rate");
            subject.meter.set(&shard(&value), rate, now);
            Vec::new()
        }
        other => panic!("{file}:{line}: no event {other:?}"),
    }
}

type A = Action<Msg>;

/// Answers one query.
fn query(world: &mut World, text: &str, file: &str, line: usize) -> Value {
    let (subject, rest) = world.subject(text.trim_start_matches('?'), file, line);
    let (name, argument) = verb_and_value(rest, file, line);
    let core = &subject.core;
    let shard = || text_of(&argument, file, line);
    match name.as_str() {
        "registered" => json!(core.is_registered()),
        "fenced" => json!(core.is_fenced()),
        "lease-until" => json!(core.lease_until()),
        "left" => json!(core.has_left()),
        "idle" => json!(core.is_idle()),
        "running" => json!(core.running()),
        "epoch-of" => json!(core.epoch_of(&shard())),
        "buffered" => json!(core.buffered()),
        "cached-home" => json!(core.cached_home(&shard())),
        "delivers-locally" => json!(core.delivers_locally(&shard())),
        "departure" => match core.departure() {
            None => Value::Null,
            Some(Ok(())) => json!("Ok"),
            Some(Err(error)) => render_region_error(error),
        },
        other => panic!("{file}:{line}: no query {other:?}"),
    }
}

fn line_of((kind, value): &Outcome) -> String {
    if value.is_null() { format!("  {kind}") } else { format!("  {kind} {value}") }
}

/// Runs every scenario of one file; the failures, and the file as the core
/// would have it written.
fn run_file(path: &Path) -> (Vec<String>, String) {
    let file = path.file_name().expect("a file name").to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut rewritten = Vec::new();
    let mut world = World::default();
    let mut scenario = String::new();
    for item in parse(&file, &text) {
        match item {
            Item::Raw(raw) => {
                if let Some(name) = raw.strip_prefix("scenario ") {
                    scenario = name.trim().to_owned();
                    world = World::default();
                } else if let Some(changes) = raw.strip_prefix("config ") {
                    assert!(world.regions.is_empty(), "{file}: `config` must come before the first step");
                    world.config = serde_json::from_str(changes).unwrap_or_else(|e| panic!("{file}: config: {e}"));
                } else if let Some(names) = raw.strip_prefix("regions ") {
                    for name in names.split_whitespace() {
                        world.add(Some(name), &file);
                    }
                }
                rewritten.push(raw);
            }
            Item::Step { line, text, expected } => {
                let got = step(&mut world, &text, &file, line);
                let matches = got.len() == expected.len()
                    && got.iter().zip(&expected).all(|(g, e)| g.0 == e.0 && same(&g.1, &e.1));
                if !matches {
                    let show = |o: &[Outcome]| o.iter().map(line_of).collect::<Vec<_>>().join("\n");
                    failures.push(format!(
                        "{file}:{line} ({scenario}): {text}\nexpected:\n{}\ngot:\n{}",
                        show(&expected),
                        show(&got)
                    ));
                }
                rewritten.push(text);
                rewritten.extend(got.iter().map(line_of));
            }
            Item::Query { line, text, expected } => {
                let got = query(&mut world, &text, &file, line);
                if !expected.as_ref().is_some_and(|e| same(e, &got)) {
                    failures.push(format!("{file}:{line} ({scenario}): {text}\nexpected {expected:?}, got {got}"));
                }
                rewritten.push(text);
                rewritten.push(format!("  = {got}"));
            }
        }
    }
    (failures, rewritten.join("\n") + "\n")
}

#[test]
fn every_scenario_of_the_region_core_specification() {
    let rewrite = std::env::var_os("SHARDALLOC_REWRITE_SCENARIOS").is_some();
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenario_dir())
        .expect("contracts/region-core")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", scenario_dir().display());
    let mut failures = Vec::new();
    for path in &files {
        let (failed, rewritten) = run_file(path);
        if rewrite {
            std::fs::write(path, rewritten).expect("rewrite a scenario file");
        } else {
            failures.extend(failed);
        }
    }
    assert!(failures.is_empty(), "{} step(s) differ:\n\n{}", failures.len(), failures.join("\n\n"));
}
