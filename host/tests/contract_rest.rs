//! The REST API's golden bodies (`contracts/rest/`, see
//! `contracts/README.md`): one JSON file per schema of the node's OpenAPI
//! document (`components.schemas`; the bodies are the types of
//! `proto/src/api.rs`), frozen from the code of the API's version. Each sample is serialized and compared with its fixture, each
//! fixture is read back as its type and compared with its sample, and each
//! fixture's property names are compared with its schema's, so a renamed,
//! added or removed field, a changed word or a schema without a fixture
//! fails here with a message naming the contract.
//!
//! `SHARDALLOC_BLESS=1 cargo test -p shardalloc --test in_process -- contract_rest::`
//! writes the fixtures instead (never when `CI` is set).

use crate::bless;
#[path = "contract_rest/samples.rs"]
mod samples;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use serde_json::Value;

use bless::blessing;
use samples::{Sample, samples};

/// The fixtures' directory.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/rest")
}

/// The node's OpenAPI document, as `/v1/openapi.json` serves it.
static DOCUMENT: LazyLock<Value> =
    LazyLock::new(|| serde_json::from_str(shardalloc::server::document()).expect("the OpenAPI document is JSON"));

/// The contract's name, as every failure begins.
fn contract() -> String {
    let version = DOCUMENT["info"]["version"].as_str().unwrap_or("?");
    format!("the REST API (/v1, OpenAPI version {version})")
}

const REGENERATE: &str = "SHARDALLOC_BLESS=1 cargo test -p shardalloc --test in_process -- contract_rest::";

const COMPATIBLE: &str = "removing, renaming or retyping a field or a word breaks clients; adding an optional \
                          field is compatible only for readers that ignore unknown fields (see contracts/README.md)";

/// The document's body schemas, by name.
fn schemas() -> &'static serde_json::Map<String, Value> {
    DOCUMENT["components"]["schemas"].as_object().expect("the document has components.schemas")
}

/// The schema a file's name is of: `Name.json`, `Name.form.json`.
fn schema_of(file: &str) -> &str {
    file.split('.').next().unwrap_or(file)
}

/// Panics with every failure, each on its own paragraph.
fn fail_on(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} failure(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The paths where two JSON values differ, at most a few.
fn differences(path: &str, old: &Value, new: &Value, found: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            for (key, value) in old {
                match new.get(key) {
                    Some(other) => differences(&format!("{path}.{key}"), value, other, found),
                    None => found.push(format!("{path}.{key} is gone")),
                }
            }
            for key in new.keys().filter(|k| !old.contains_key(*k)) {
                found.push(format!("{path}.{key} is new"));
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
            for (i, (old, new)) in old.iter().zip(new).enumerate() {
                differences(&format!("{path}[{i}]"), old, new, found);
            }
        }
        _ if old == new => {}
        _ => found.push(format!("{path} was {old}, is {new}")),
    }
}

/// A schema, with a `$ref` to another followed.
fn resolve(schema: &Value) -> &Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => &schemas()[name],
        None => schema,
    }
}

fn property_names(schema: &Value) -> Option<BTreeSet<String>> {
    schema["properties"].as_object().map(|p| p.keys().cloned().collect())
}

/// Whether a body's JSON has its schema's shape: an object has exactly the
/// properties of the schema (or of one of its `oneOf`), and the list of a
/// closed set's words is the schema's `enum`.
fn shape(schema: &Value, json: &Value) -> Result<(), String> {
    if let (Some(words), Value::Array(sampled)) = (schema["enum"].as_array(), json) {
        return if words == sampled {
            Ok(())
        } else {
            Err(format!("its words in the OpenAPI document are {}, the type's are {json}", Value::from(words.clone())))
        };
    }
    let Value::Object(object) = json else { return Ok(()) };
    let keys: BTreeSet<String> = object.keys().cloned().collect();
    let alternatives: Vec<&Value> = match schema["oneOf"].as_array() {
        Some(alternatives) => alternatives.iter().map(resolve).collect(),
        None => vec![schema],
    };
    let documented: Vec<BTreeSet<String>> = alternatives.into_iter().filter_map(property_names).collect();
    if documented.is_empty() || documented.contains(&keys) {
        Ok(())
    } else {
        Err(format!("its properties in the OpenAPI document are {documented:?}, the type writes {keys:?}"))
    }
}

/// Compares one sample with its fixture and its schema.
fn check(sample: &Sample, failures: &mut Vec<String>) {
    let file = sample.file();
    let name = &sample.schema;
    let json = sample.body.json();
    let Some(schema) = schemas().get(name) else {
        failures.push(format!(
            "{}: body `{name}` (contracts/rest/{file}) is a schema the OpenAPI document does not list: \
             the router no longer uses the type, or the document names it otherwise",
            contract()
        ));
        return;
    };
    if let Err(e) = shape(schema, &json) {
        failures.push(format!(
            "{} changed: body `{name}`: the OpenAPI document (/v1/openapi.json) and the type disagree: {e}; \
             clients generated from the document would read or write other JSON than the node",
            contract()
        ));
    }
    let golden = match std::fs::read_to_string(fixtures().join(&file)) {
        Ok(text) => text,
        Err(e) => {
            failures.push(format!(
                "{}: body `{name}` has no golden fixture contracts/rest/{file} ({e}); a new body is frozen \
                 deliberately with `{REGENERATE}` (see contracts/README.md)",
                contract()
            ));
            return;
        }
    };
    let golden: Value = match serde_json::from_str(&golden) {
        Ok(golden) => golden,
        Err(e) => {
            failures.push(format!("contracts/rest/{file} is not JSON: {e}"));
            return;
        }
    };
    if json != golden {
        let mut found = Vec::new();
        differences("", &golden, &json, &mut found);
        failures.push(format!(
            "{} changed: body `{name}` serializes differently from contracts/rest/{file}: {}; {COMPATIBLE}",
            contract(),
            found.join(", ")
        ));
    }
    if let Err(e) = sample.body.read_back(&golden) {
        failures.push(format!(
            "{} changed: contracts/rest/{file} no longer reads as body `{name}`: {e}; {COMPATIBLE}",
            contract()
        ));
    }
}

#[test]
fn golden_bodies_serialize_and_read_back_both_ways() {
    let samples = samples();
    if blessing() {
        std::fs::create_dir_all(fixtures()).expect("creating contracts/rest");
        for sample in &samples {
            let mut text = serde_json::to_string_pretty(&sample.body.json()).expect("JSON");
            text.push('\n');
            std::fs::write(fixtures().join(sample.file()), text).expect("writing a fixture");
        }
        eprintln!("wrote {} fixtures to contracts/rest", samples.len());
        return;
    }
    let mut failures = Vec::new();
    for sample in &samples {
        check(sample, &mut failures);
    }
    fail_on(failures);
}

#[test]
fn every_schema_has_a_sample() {
    let samples = samples();
    let sampled: BTreeSet<&str> = samples.iter().map(|s| s.schema.as_str()).collect();
    let mut failures = Vec::new();
    assert!(schemas().len() >= 30, "only {} schemas in the document", schemas().len());
    for name in schemas().keys() {
        if !sampled.contains(name.as_str()) {
            failures.push(format!(
                "{}: schema `{name}` of the OpenAPI document has no golden sample: add one to \
                 host/tests/contract_rest/samples.rs, then write its fixture with `{REGENERATE}` \
                 (see contracts/README.md)",
                contract()
            ));
        }
    }
    let mut files = BTreeSet::new();
    for sample in &samples {
        if !files.insert(sample.file()) {
            failures.push(format!("two samples write contracts/rest/{}", sample.file()));
        }
    }
    fail_on(failures);
}

#[test]
fn every_rest_fixture_has_a_schema_and_a_sample() {
    let produced: BTreeSet<String> = samples().iter().map(Sample::file).collect();
    let blessing = blessing();
    if blessing {
        std::fs::create_dir_all(fixtures()).expect("creating contracts/rest");
    }
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(fixtures()).expect("contracts/rest exists") {
        let file = entry.expect("a directory entry").file_name().to_string_lossy().into_owned();
        if produced.contains(&file) && schemas().contains_key(schema_of(&file)) {
            continue;
        }
        if blessing {
            std::fs::remove_file(fixtures().join(&file)).expect("removing a stale fixture");
            eprintln!("removed contracts/rest/{file}: no sample or schema produces it");
            continue;
        }
        let why = if schemas().contains_key(schema_of(&file)) {
            "no sample produces it: the fixture is stale"
        } else {
            "the OpenAPI document has no such schema: a body was removed or renamed, which breaks clients"
        };
        failures.push(format!(
            "{} changed: contracts/rest/{file} is a golden body of schema `{}`, but {why} (see contracts/README.md)",
            contract(),
            schema_of(&file)
        ));
    }
    fail_on(failures);
}
