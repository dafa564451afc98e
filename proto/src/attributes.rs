//! Shard attributes: a small map of words an operator (over REST) gives a
//! shard, e.g. `tenant=acme`, which strategies of contract 0.3 read, so a
//! tenant or a tier is an attribute and not something parsed out of the
//! shard's id.
//!
//! [`ShardAttributes`] is the one type every boundary uses (the REST
//! bodies, the node's core, its store); [`ShardAttributes::new`] is the one
//! place their limits are checked, each refusal naming the rule:
//!
//! - at most [`MAX_ATTRIBUTES`] pairs a shard;
//! - a key is 1 to [`MAX_ATTRIBUTE_KEY_BYTES`] bytes of `A-Z a-z 0-9 . _ - /`;
//! - a value is at most [`MAX_ATTRIBUTE_VALUE_BYTES`] bytes, no control
//!   characters (it may be empty).
//!
//! A shard without attributes has the empty map; setting the empty map
//! clears a shard's attributes.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most attributes one shard carries.
pub const MAX_ATTRIBUTES: usize = 16;

/// Longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 64;

/// Longest attribute value, in bytes.
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 256;

/// A shard's attributes, sorted by key, keys unique, within the limits of
/// this module. Compact: a shard without any holds no allocation, and one
/// with some holds its pairs in one boxed slice (a node may keep a million).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct ShardAttributes {
    pairs: Box<[(Box<str>, Box<str>)]>,
}

/// Why a shard's attributes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributeError {
    /// More pairs than [`MAX_ATTRIBUTES`].
    #[error("{0} attributes; a shard has at most {MAX_ATTRIBUTES}")]
    TooMany(usize),
    /// A key outside the key rule.
    #[error("an attribute key is 1 to {MAX_ATTRIBUTE_KEY_BYTES} bytes of A-Z a-z 0-9 . _ - /, not {0:?}")]
    Key(String),
    /// A value outside the value rule.
    #[error(
        "the value of attribute {key:?} is {bytes} bytes or holds a control character; a value is at most \
         {MAX_ATTRIBUTE_VALUE_BYTES} bytes without control characters"
    )]
    Value {
        /// Its key.
        key: String,
        /// Its length in bytes.
        bytes: usize,
    },
}

/// Whether `key` follows the key rule (also the rule of a region's
/// capacity quantity names, [`crate::capacity`]).
pub(crate) fn key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_ATTRIBUTE_KEY_BYTES
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

fn value_ok(value: &str) -> bool {
    value.len() <= MAX_ATTRIBUTE_VALUE_BYTES && !value.chars().any(char::is_control)
}

impl ShardAttributes {
    /// Attributes from pairs, checked (keys may come in any order; a key
    /// given twice keeps its last value).
    pub fn new<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, AttributeError> {
        let map: BTreeMap<String, String> = pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        Self::from_map(map)
    }

    /// Attributes from a map, checked.
    pub fn from_map(map: BTreeMap<String, String>) -> Result<Self, AttributeError> {
        if map.len() > MAX_ATTRIBUTES {
            return Err(AttributeError::TooMany(map.len()));
        }
        for (key, value) in &map {
            if !key_ok(key) {
                return Err(AttributeError::Key(key.clone()));
            }
            if !value_ok(value) {
                return Err(AttributeError::Value { key: key.clone(), bytes: value.len() });
            }
        }
        Ok(ShardAttributes { pairs: map.into_iter().map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str())).collect() })
    }

    /// Attributes a node reads back from its own store: they were checked
    /// when written and are not checked again, so that a store written by a
    /// later version with wider limits still reads (keys are still sorted
    /// and unique: `map` is a map).
    pub fn stored(map: BTreeMap<String, String>) -> Self {
        ShardAttributes { pairs: map.into_iter().map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str())).collect() }
    }

    /// The value of `key`, if the shard has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|at| &*self.pairs[at].1)
    }

    /// Each (key, value), keys in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (&**k, &**v))
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when the shard has none.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The pairs as a map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }
}

impl fmt::Debug for ShardAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for ShardAttributes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for ShardAttributes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(deserializer)?;
        ShardAttributes::from_map(map).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ShardAttributes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .additional_properties(Some(
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .max_length(Some(MAX_ATTRIBUTE_VALUE_BYTES)),
            ))
            .max_properties(Some(MAX_ATTRIBUTES))
            .description(Some(
                "A shard's attributes: at most 16 pairs; keys 1 to 64 bytes of A-Z a-z 0-9 . _ - /, values at \
                 most 256 bytes without control characters.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ShardAttributes {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_sorted_and_read_by_key() {
        let attributes = ShardAttributes::new([("tier", "gold"), ("tenant", "acme")]).unwrap();
        assert_eq!(attributes.iter().collect::<Vec<_>>(), vec![("tenant", "acme"), ("tier", "gold")]);
        assert_eq!(attributes.get("tenant"), Some("acme"));
        assert_eq!(attributes.get("zone"), None);
        assert_eq!(format!("{attributes:?}"), r#"{"tenant": "acme", "tier": "gold"}"#);
    }

    #[test]
    fn each_limit_is_refused_by_name() {
        let cases: Vec<(Vec<(String, String)>, &str)> = vec![
            ((0..17).map(|i| (format!("k{i}"), String::new())).collect(), "17 attributes; a shard has at most 16"),
            (vec![(String::new(), "v".into())], "an attribute key is 1 to 64 bytes"),
            (vec![("a b".into(), "v".into())], r#"not "a b""#),
            (vec![("k".repeat(65), "v".into())], "an attribute key is 1 to 64 bytes"),
            (vec![("tenant".into(), "x".repeat(257))], r#"the value of attribute "tenant" is 257 bytes"#),
            (vec![("tenant".into(), "a\nb".into())], "control character"),
        ];
        for (pairs, expected) in cases {
            let error = ShardAttributes::new(pairs.clone()).unwrap_err().to_string();
            assert!(error.contains(expected), "{pairs:?}: {error}");
        }
        let longest = ShardAttributes::new([("k".repeat(64), "v".repeat(256))]).unwrap();
        assert_eq!(longest.len(), 1);
        assert!(ShardAttributes::new([("tenant", "")]).is_ok(), "an empty value is a value");
    }

    #[test]
    fn json_is_an_object_of_strings_checked_on_reading() {
        let attributes: ShardAttributes = serde_json::from_str(r#"{"tier":"gold","tenant":"acme"}"#).unwrap();
        assert_eq!(serde_json::to_string(&attributes).unwrap(), r#"{"tenant":"acme","tier":"gold"}"#);
        let error = serde_json::from_str::<ShardAttributes>(r#"{"a b":"x"}"#).unwrap_err().to_string();
        assert!(error.contains("an attribute key is"), "{error}");
        assert!(serde_json::from_str::<ShardAttributes>(r#"{"a":1}"#).is_err());
        assert!(ShardAttributes::default().is_empty());
    }
}
