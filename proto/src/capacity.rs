//! A region's declared capacity: named quantities it says it can carry,
//! e.g. `load=800` (in the units shard loads are reported in),
//! `memory-mb=4096`, `connections=20000`, given once when it registers
//! (protocol version 5's `RegisterWithCapacity`) and handed to strategies
//! of contract 0.3 as they were declared (0.2 and 0.3 also see the `load`
//! quantity as the region's `capacity`).
//!
//! [`RegionCapacity`] is the one type the wire, the node's core and its
//! store use; [`RegionCapacity::new`] is the one place its limits are
//! checked, each refusal naming the rule:
//!
//! - at most [`MAX_QUANTITIES`] quantities a region;
//! - a name is 1 to [`MAX_QUANTITY_NAME_BYTES`] bytes of `A-Z a-z 0-9 . _ - /`
//!   (the rule of shard attribute keys);
//! - an amount is a finite number, zero or more.
//!
//! A region that declared nothing has the empty capacity.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most quantities one region declares.
pub const MAX_QUANTITIES: usize = 16;

/// Longest quantity name, in bytes: a name follows the rule of shard
/// attribute keys.
pub const MAX_QUANTITY_NAME_BYTES: usize = crate::attributes::MAX_ATTRIBUTE_KEY_BYTES;

/// The quantity in the units shard loads are reported in: what load-aware
/// strategies compare a region's shard loads against.
pub const LOAD_QUANTITY: &str = "load";

/// A region's declared capacity, sorted by name, names unique, within the
/// limits of this module.
#[derive(Clone, Default, PartialEq)]
pub struct RegionCapacity {
    quantities: BTreeMap<String, f64>,
}

/// Why a region's capacity was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CapacityError {
    /// More quantities than [`MAX_QUANTITIES`].
    #[error("{0} capacity quantities; a region declares at most {MAX_QUANTITIES}")]
    TooMany(usize),
    /// A name outside the name rule.
    #[error("a capacity quantity's name is 1 to {MAX_QUANTITY_NAME_BYTES} bytes of A-Z a-z 0-9 . _ - /, not {0:?}")]
    Name(String),
    /// A negative or non-finite amount.
    #[error("capacity quantity {name:?} is {amount}; an amount is a finite number, zero or more")]
    Amount {
        /// Its name.
        name: String,
        /// The amount given.
        amount: f64,
    },
}

impl RegionCapacity {
    /// A capacity from (name, amount) pairs, checked (names may come in any
    /// order; a name given twice keeps its last amount).
    pub fn new<N: Into<String>>(quantities: impl IntoIterator<Item = (N, f64)>) -> Result<Self, CapacityError> {
        Self::from_map(quantities.into_iter().map(|(n, a)| (n.into(), a)).collect())
    }

    /// A capacity from a map, checked.
    pub fn from_map(quantities: BTreeMap<String, f64>) -> Result<Self, CapacityError> {
        if quantities.len() > MAX_QUANTITIES {
            return Err(CapacityError::TooMany(quantities.len()));
        }
        for (name, amount) in &quantities {
            if !crate::attributes::key_ok(name) {
                return Err(CapacityError::Name(name.clone()));
            }
            if !amount.is_finite() || *amount < 0.0 {
                return Err(CapacityError::Amount { name: name.clone(), amount: *amount });
            }
        }
        Ok(RegionCapacity { quantities })
    }

    /// A capacity a node reads back from its own store: checked when the
    /// region declared it, not checked again (a store written by a later
    /// version with wider limits still reads).
    pub fn stored(quantities: BTreeMap<String, f64>) -> Self {
        RegionCapacity { quantities }
    }

    /// The amount of the quantity `name`, if the region declared it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.quantities.get(name).copied()
    }

    /// The [`LOAD_QUANTITY`], if declared: the region's capacity in the
    /// units of shard loads.
    pub fn load(&self) -> Option<f64> {
        self.get(LOAD_QUANTITY)
    }

    /// Each (name, amount), names in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, f64)> {
        self.quantities.iter().map(|(n, a)| (n.as_str(), *a))
    }

    /// How many quantities.
    pub fn len(&self) -> usize {
        self.quantities.len()
    }

    /// True when the region declared none.
    pub fn is_empty(&self) -> bool {
        self.quantities.is_empty()
    }

    /// The quantities as a map.
    pub fn as_map(&self) -> &BTreeMap<String, f64> {
        &self.quantities
    }
}

impl fmt::Debug for RegionCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for RegionCapacity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.quantities.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RegionCapacity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(deserializer)?;
        RegionCapacity::from_map(map).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for RegionCapacity {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .additional_properties(Some(
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::Number)
                    .minimum(Some(0.0)),
            ))
            .max_properties(Some(MAX_QUANTITIES))
            .description(Some(
                "A region's declared capacity: at most 16 named quantities (names 1 to 64 bytes of A-Z a-z 0-9 . _ \
                 - /), each a finite number, zero or more; `load` is in the units of shard loads.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for RegionCapacity {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_sorted_and_read_by_name() {
        let capacity = RegionCapacity::new([("memory-mb", 4096.0), ("load", 800.0)]).unwrap();
        assert_eq!(capacity.iter().collect::<Vec<_>>(), vec![("load", 800.0), ("memory-mb", 4096.0)]);
        assert_eq!(capacity.load(), Some(800.0));
        assert_eq!(capacity.get("cpu"), None);
        assert_eq!(format!("{capacity:?}"), r#"{"load": 800.0, "memory-mb": 4096.0}"#);
        assert_eq!(RegionCapacity::new([("memory-mb", 1.0)]).unwrap().load(), None);
    }

    #[test]
    fn each_limit_is_refused_by_name() {
        let cases: Vec<(Vec<(String, f64)>, &str)> = vec![
            ((0..17).map(|i| (format!("q{i}"), 1.0)).collect(), "17 capacity quantities; a region declares at most 16"),
            (vec![(String::new(), 1.0)], "a capacity quantity's name is 1 to 64 bytes"),
            (vec![("memory mb".into(), 1.0)], r#"not "memory mb""#),
            (vec![("q".repeat(65), 1.0)], "1 to 64 bytes"),
            (vec![("load".into(), -1.0)], r#"capacity quantity "load" is -1"#),
            (vec![("load".into(), f64::NAN)], "a finite number, zero or more"),
            (vec![("load".into(), f64::INFINITY)], "a finite number, zero or more"),
        ];
        for (quantities, expected) in cases {
            let error = RegionCapacity::new(quantities.clone()).unwrap_err().to_string();
            assert!(error.contains(expected), "{quantities:?}: {error}");
        }
        assert!(RegionCapacity::new([("q".repeat(64), 0.0)]).is_ok(), "zero is an amount, 64 bytes a name");
    }

    #[test]
    fn json_is_an_object_of_numbers_checked_on_reading() {
        let capacity: RegionCapacity = serde_json::from_str(r#"{"memory-mb":4096,"load":800.5}"#).unwrap();
        assert_eq!(serde_json::to_string(&capacity).unwrap(), r#"{"load":800.5,"memory-mb":4096.0}"#);
        let error = serde_json::from_str::<RegionCapacity>(r#"{"load":-2}"#).unwrap_err().to_string();
        assert!(error.contains("a finite number, zero or more"), "{error}");
        assert!(serde_json::from_str::<RegionCapacity>(r#"{"load":"lots"}"#).is_err());
        assert!(RegionCapacity::default().is_empty());
    }
}
