//! The zone signal: which zone each shard belongs in.
//!
//! ```json
//! {"shards": {"42": "eu", "tenant-a/7": "ap"},
//!  "prefixes": {"tenant-a/": "us", "tenant-": "eu", "": "eu"}}
//! ```
//!
//! - `shards` maps exact shard ids to zones; `prefixes` maps id prefixes to
//!   zones. Both are optional; `null` counts as absent.
//! - A shard's zone is its exact entry if it has one, else the entry of the
//!   longest prefix of its id (bytewise, so `tenant-a/` beats `tenant-`);
//!   the empty prefix `""` matches every id and so acts as a default zone.
//! - A zone is a non-empty string, compared exactly with the region label.
//! - Other top-level keys are ignored (room for comments and for other
//!   consumers of the same signal); anything else that does not fit — not an
//!   object, `shards` or `prefixes` not an object, a zone that is not a
//!   non-empty string — makes the whole signal invalid.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// JSON Schema of the signal.
pub const SIGNAL_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "zone strategy signal",
  "type": "object",
  "properties": {
    "shards": {
      "description": "Exact shard id to zone; checked first.",
      "type": ["object", "null"],
      "additionalProperties": { "type": "string", "minLength": 1 }
    },
    "prefixes": {
      "description": "Shard id prefix to zone; the longest matching prefix wins; \"\" matches every shard.",
      "type": ["object", "null"],
      "additionalProperties": { "type": "string", "minLength": 1 }
    }
  },
  "additionalProperties": true
}"#;

/// A parsed zone signal; see the module documentation for the format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneMap {
    shards: BTreeMap<String, String>,
    prefixes: BTreeMap<String, String>,
    /// The distinct prefix lengths, longest first.
    prefix_lengths: Vec<usize>,
}

fn zones(signal: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, String> {
    let entries = match signal.get(key) {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => entries,
        Some(other) => return Err(format!("\"{key}\" must be an object of zone names, got {other}")),
    };
    entries
        .iter()
        .map(|(id, zone)| match zone.as_str() {
            Some(zone) if !zone.is_empty() => Ok((id.clone(), zone.to_owned())),
            _ => Err(format!("\"{key}\".{id:?} must be a zone name (a non-empty string), got {zone}")),
        })
        .collect()
}

impl ZoneMap {
    /// Parses signal text. The error says what does not fit the format.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let Value::Object(signal) = value else {
            return Err(format!("must be a JSON object, got {}", kind(&value)));
        };
        let shards = zones(&signal, "shards")?;
        let prefixes = zones(&signal, "prefixes")?;
        let mut prefix_lengths: Vec<usize> = prefixes.keys().map(String::len).collect();
        prefix_lengths.sort_unstable_by(|a, b| b.cmp(a));
        prefix_lengths.dedup();
        Ok(ZoneMap { shards, prefixes, prefix_lengths })
    }

    /// True when the map names no shard and no prefix.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty() && self.prefixes.is_empty()
    }

    /// The zone of a shard: its exact entry, else its longest matching
    /// prefix's; `None` when neither matches.
    pub fn zone_of(&self, shard_id: &str) -> Option<&str> {
        if let Some(zone) = self.shards.get(shard_id) {
            return Some(zone);
        }
        self.prefix_lengths
            .iter()
            .filter_map(|len| shard_id.get(..*len))
            .find_map(|prefix| self.prefixes.get(prefix))
            .map(String::as_str)
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::ZoneMap;

    #[test]
    fn exact_then_longest_prefix() {
        let map = ZoneMap::parse(
            r#"{"shards":{"tenant-a/7":"ap","x":"us"},"prefixes":{"tenant-a/":"us","tenant-":"eu","t":"mars"}}"#,
        )
        .unwrap();
        let cases = [
            ("tenant-a/7", Some("ap")),
            ("tenant-a/8", Some("us")),
            ("tenant-a/", Some("us")),
            ("tenant-a", Some("eu")),
            ("tenant-b/1", Some("eu")),
            ("tx", Some("mars")),
            ("x", Some("us")),
            ("xy", None),
            ("", None),
        ];
        for (id, want) in cases {
            assert_eq!(map.zone_of(id), want, "{id}");
        }
    }

    #[test]
    fn empty_prefix_is_a_default_and_multibyte_ids_work() {
        let map = ZoneMap::parse(r#"{"prefixes":{"":"eu","é":"us"},"comment":"ignored"}"#).unwrap();
        assert_eq!(map.zone_of("anything"), Some("eu"));
        assert_eq!(map.zone_of("ét"), Some("us"));
        // A prefix length that falls inside a multi-byte character is skipped.
        assert_eq!(map.zone_of("ü"), Some("eu"));
        assert_eq!(map.zone_of(""), Some("eu"));
    }

    #[test]
    fn absent_and_null_sections_are_empty() {
        assert!(ZoneMap::parse("{}").unwrap().is_empty());
        assert!(ZoneMap::parse(r#"{"shards":null,"prefixes":null}"#).unwrap().is_empty());
    }

    #[test]
    fn bad_shapes_are_named() {
        let cases = [
            ("[1,2]", "an array"),
            ("\"eu\"", "a string"),
            ("null", "null"),
            ("{", "JSON"),
            (r#"{"shards":["a"]}"#, "\"shards\""),
            (r#"{"prefixes":"eu"}"#, "\"prefixes\""),
            (r#"{"shards":{"42":5}}"#, "\"42\""),
            (r#"{"prefixes":{"t-":""}}"#, "\"t-\""),
        ];
        for (text, needle) in cases {
            let err = ZoneMap::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
