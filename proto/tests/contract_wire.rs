//! The region wire protocol's golden frames (`contracts/wire/`, see
//! `contracts/README.md`): every frame a region or the node sends, as bytes
//! frozen from the code of the protocol version. Each sample is encoded with
//! `protocol::encode` and compared with its fixture, and each fixture is
//! decoded with `protocol::decode` and compared with its sample. Postcard is
//! positional: a renamed field passes, but a field added, removed, retyped or
//! moved, or a variant inserted or reordered, changes the bytes and fails
//! here with a message naming the contract.
//!
//! `contracts/wire/frames.json` holds every sample's value as JSON (serde's
//! own shape: a struct as an object, an enum variant as `{"Variant": …}` or
//! `"Variant"`), keyed by its fixture's name with its kind (`hello`,
//! `region`, `node`, and the inter-region wire's `peer-hello` and `peer`):
//! the clients in other languages (`clients/`) decode
//! each fixture to that value and encode the value to the fixture's bytes.
//!
//! `SHARDALLOC_BLESS=1 cargo test -p shardalloc-proto --test contract_wire`
//! writes the fixtures instead (never when `CI` is set).

#[path = "contract_wire/samples.rs"]
mod samples;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use shardalloc_proto::peer::PEER_PROTOCOL_VERSION;
use shardalloc_proto::protocol::PROTOCOL_VERSION;

use samples::{Frame, HELLO, NODE_VARIANTS, PEER_HELLO, PEER_VARIANTS, REGION_VARIANTS, Sample, samples};

/// The file of the samples' values, for the clients in other languages.
const VALUES: &str = "frames.json";

/// The fixtures' directory.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/wire")
}

/// The contract's name, as every failure begins.
fn contract() -> String {
    format!(
        "the region wire protocol and the inter-region wire (PROTOCOL_VERSION {PROTOCOL_VERSION}, \
         PEER_PROTOCOL_VERSION {PEER_PROTOCOL_VERSION}, docs/protocol.md)"
    )
}

const REGENERATE: &str = "SHARDALLOC_BLESS=1 cargo test -p shardalloc-proto --test contract_wire";

/// Whether to write the fixtures instead of comparing: `SHARDALLOC_BLESS`
/// set (not to `0`), and `CI` not set.
fn blessing() -> bool {
    let bless = std::env::var("SHARDALLOC_BLESS").is_ok_and(|v| !v.is_empty() && v != "0");
    if bless && std::env::var_os("CI").is_some() {
        eprintln!("SHARDALLOC_BLESS is ignored when CI is set: the fixtures are compared, never written");
        return false;
    }
    bless
}

/// Lowercase hex, 64 characters (32 bytes) a line, a newline at the end.
fn to_hex(bytes: &[u8]) -> String {
    let mut text = String::new();
    for line in bytes.chunks(32) {
        for byte in line {
            write!(text, "{byte:02x}").expect("writing to a String");
        }
        text.push('\n');
    }
    if text.is_empty() {
        text.push('\n');
    }
    text
}

/// The bytes of hex text; whitespace is ignored.
fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("an odd number ({}) of hex digits", digits.len()));
    }
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).map_err(|_| "a byte that is not a hex digit".to_owned())?;
            u8::from_str_radix(pair, 16).map_err(|_| format!("{pair:?} is not a hex byte"))
        })
        .collect()
}

/// Panics with every failure, each on its own paragraph.
fn fail_on(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} failure(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn every_frame_variant_has_a_sample() {
    let samples = samples();
    let sampled: BTreeSet<&str> = samples.iter().map(|s| s.frame.variant()).collect();
    let mut failures = Vec::new();
    for variant in [HELLO, PEER_HELLO].iter().chain(REGION_VARIANTS).chain(NODE_VARIANTS).chain(PEER_VARIANTS) {
        if !sampled.contains(variant) {
            failures.push(format!(
                "{}: frame `{variant}` has no golden sample: add one to proto/tests/contract_wire/samples.rs, \
                 then write its fixture with `{REGENERATE}` (a variant appended at the end of its enum is \
                 compatible within a protocol version; see contracts/README.md)",
                contract()
            ));
        }
    }
    let mut files = BTreeSet::new();
    for sample in &samples {
        if !files.insert(sample.file()) {
            failures.push(format!("two samples write contracts/wire/{}", sample.file()));
        }
    }
    fail_on(failures);
}

/// Compares one sample with its fixture, both ways.
fn check(sample: &Sample, failures: &mut Vec<String>) {
    let file = sample.file();
    let name = file.trim_end_matches(".hex");
    let encoded = sample.frame.encode().unwrap_or_else(|e| panic!("frame `{name}` does not encode: {e}"));
    let path = fixtures().join(&file);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            failures.push(format!(
                "{}: frame `{name}` has no golden fixture contracts/wire/{file} ({e}); a new frame is frozen \
                 deliberately with `{REGENERATE}` (see contracts/README.md)",
                contract()
            ));
            return;
        }
    };
    let golden = match from_hex(&text) {
        Ok(bytes) => bytes,
        Err(e) => {
            failures.push(format!("contracts/wire/{file} is not hex: {e}"));
            return;
        }
    };
    if encoded != golden {
        failures.push(format!(
            "{} changed: frame `{name}` encodes differently from contracts/wire/{file}; a change of any frame \
             needs a new protocol version (see contracts/README.md)\n  fixture: {}\n  now:     {}",
            contract(),
            to_hex(&golden).replace('\n', ""),
            to_hex(&encoded).replace('\n', ""),
        ));
    }
    match sample.frame.decode_like(&golden) {
        Ok(decoded) if decoded == sample.frame => {}
        Ok(decoded) => failures.push(format!(
            "{} changed: contracts/wire/{file} decodes to {decoded:?}, not to frame `{name}` {:?}; a change of \
             any frame needs a new protocol version (see contracts/README.md)",
            contract(),
            sample.frame
        )),
        Err(e) => failures.push(format!(
            "{} changed: contracts/wire/{file} no longer decodes as frame `{name}` ({e}); a change of any frame \
             needs a new protocol version (see contracts/README.md)",
            contract()
        )),
    }
}

#[test]
fn golden_frames_encode_and_decode_both_ways() {
    let samples = samples();
    if blessing() {
        std::fs::create_dir_all(fixtures()).expect("creating contracts/wire");
        for sample in &samples {
            let bytes = sample.frame.encode().expect("every sample encodes");
            std::fs::write(fixtures().join(sample.file()), to_hex(&bytes)).expect("writing a fixture");
        }
        eprintln!("wrote {} fixtures to contracts/wire", samples.len());
        return;
    }
    let mut failures = Vec::new();
    for sample in &samples {
        check(sample, &mut failures);
    }
    fail_on(failures);
}

#[test]
fn every_wire_fixture_has_a_sample() {
    let produced: BTreeSet<String> = samples().iter().map(Sample::file).collect();
    let blessing = blessing();
    if blessing {
        std::fs::create_dir_all(fixtures()).expect("creating contracts/wire");
    }
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(fixtures()).expect("contracts/wire exists") {
        let file = entry.expect("a directory entry").file_name().to_string_lossy().into_owned();
        if produced.contains(&file) || file == VALUES {
            continue;
        }
        if blessing {
            std::fs::remove_file(fixtures().join(&file)).expect("removing a stale fixture");
            eprintln!("removed contracts/wire/{file}: no sample produces it");
            continue;
        }
        failures.push(format!(
            "{} changed: contracts/wire/{file} is produced by no sample: a frame was removed or renamed \
             (a removed frame needs a new protocol version), or the fixture is stale (see contracts/README.md)",
            contract()
        ));
    }
    fail_on(failures);
}

#[test]
fn hex_round_trips() {
    let bytes: Vec<u8> = (0..=255).collect();
    let text = to_hex(&bytes);
    assert!(text.lines().all(|line| line.len() == 64), "{text}");
    assert_eq!(from_hex(&text).unwrap(), bytes);
    assert!(from_hex("abc").is_err());
    assert!(from_hex("zz").is_err());
}

/// Every sample's value, as `contracts/wire/frames.json` holds it.
fn values() -> String {
    let mut all = serde_json::Map::new();
    for sample in samples() {
        let (kind, value) = match &sample.frame {
            Frame::Hello(hello) => ("hello", serde_json::to_value(hello)),
            Frame::Region(message) => ("region", serde_json::to_value(message)),
            Frame::Node(message) => ("node", serde_json::to_value(message)),
            Frame::PeerHello(hello) => ("peer-hello", serde_json::to_value(hello)),
            Frame::Peer(message) => ("peer", serde_json::to_value(message)),
        };
        let value = value.expect("every sample is JSON");
        let name = sample.file().trim_end_matches(".hex").to_owned();
        all.insert(name, serde_json::json!({ "kind": kind, "value": value }));
    }
    let mut text = serde_json::to_string_pretty(&serde_json::Value::Object(all)).expect("JSON");
    text.push('\n');
    text
}

#[test]
fn the_values_file_holds_every_sample_for_the_other_clients() {
    let path = fixtures().join(VALUES);
    if blessing() {
        std::fs::write(&path, values()).expect("writing contracts/wire/frames.json");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("contracts/wire/{VALUES}: {e}"));
    assert!(
        golden == values(),
        "{}: contracts/wire/{VALUES} does not hold the samples' values (the other clients test against it); \
         regenerate it with `{REGENERATE}` together with the frames",
        contract()
    );
    // And it reads back to the samples.
    let read: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&golden).expect("JSON");
    for sample in samples() {
        let name = sample.file().trim_end_matches(".hex").to_owned();
        let value = read[&name]["value"].clone();
        let frame = match &sample.frame {
            Frame::Hello(_) => serde_json::from_value(value).map(Frame::Hello),
            Frame::Region(_) => serde_json::from_value(value).map(Frame::Region),
            Frame::Node(_) => serde_json::from_value(value).map(Frame::Node),
            Frame::PeerHello(_) => serde_json::from_value(value).map(Frame::PeerHello),
            Frame::Peer(_) => serde_json::from_value(value).map(Frame::Peer),
        };
        assert_eq!(frame.expect("a value reads back"), sample.frame, "{name}");
    }
}
