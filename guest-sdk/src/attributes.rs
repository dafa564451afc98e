//! Shard attributes as a strategy reads them (contract 0.3): the small map
//! of words an operator gave a shard (`tenant=acme`, `tier=gold`), so a
//! strategy places by tenant without parsing shard ids.
//!
//! The host checks them when they are written (at most 16 pairs, keys of
//! at most 64 bytes, values of at most 256); a strategy only reads them:
//! [`ShardKey::attributes`](crate::ShardKey::attributes) for the shard
//! being allocated, [`Allocations::attributes`](crate::Allocations::attributes)
//! for a shard in the view.

/// One shard's attributes, sorted by key, keys unique.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    pairs: Vec<(Box<str>, Box<str>)>,
}

impl Attributes {
    /// Attributes from pairs in any order (a key given twice keeps its last
    /// value). Natively, for tests; the host's come checked.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let map: std::collections::BTreeMap<Box<str>, Box<str>> =
            pairs.into_iter().map(|(k, v)| (Box::from(k.as_ref()), Box::from(v.as_ref()))).collect();
        Attributes { pairs: map.into_iter().collect() }
    }

    /// Attributes from pairs already sorted by key, keys unique, as the host
    /// sends them ([`crate::kept::Attributed::check`] refuses any other
    /// order): taken as they are, without sorting them again.
    pub(crate) fn sorted<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let pairs: Vec<(Box<str>, Box<str>)> = pairs.into_iter().map(|(k, v)| (Box::from(k), Box::from(v))).collect();
        debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0), "attributes out of order: {pairs:?}");
        Attributes { pairs }
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
}

/// The attributes of a shard without any: what a read answers for it.
pub(crate) static NONE: Attributes = Attributes { pairs: Vec::new() };

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_sorted_and_read_by_key() {
        let attributes = Attributes::new([("tier", "gold"), ("tenant", "acme"), ("tier", "silver")]);
        assert_eq!(attributes.iter().collect::<Vec<_>>(), [("tenant", "acme"), ("tier", "silver")]);
        assert_eq!(attributes.get("tenant"), Some("acme"));
        assert_eq!(attributes.get("zone"), None);
        assert!(NONE.is_empty() && NONE.get("tenant").is_none());
    }
}
