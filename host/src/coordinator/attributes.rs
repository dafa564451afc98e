//! Shard attributes: operators give shards small maps of words
//! ([`ShardAttributes`], e.g. `tenant=acme`), which the durable state keeps
//! per shard, apart from the shard's home (they follow the shard through
//! hand-offs and survive its region), and which strategies of contract 0.3
//! read through the shard table.
//!
//! A region may offer a shard's attributes with its request for the
//! shard's home (protocol version 5, the application's own): they are kept
//! when the shard has none yet, so an operator's write, or the first
//! region's offer, stays.
//!
//! A write is all or nothing: every shard id is checked, none twice, at
//! most [`MAX_ATTRIBUTE_WRITES`] in one request, and the type keeps
//! attributes for at most `max_shards` shards (the limit on its homes).
//! Writing the empty map clears a shard's attributes; writing what a shard
//! already has changes nothing.

use std::collections::BTreeSet;

use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::protocol::check_shard_id;

use super::{Change, Coordinator, Observation, Reply, RequestId};

/// Most shards one attribute write names.
pub const MAX_ATTRIBUTE_WRITES: usize = 10_000;

impl Coordinator {
    /// Whether `writes` would be accepted now, without writing anything:
    /// the message names the first problem.
    pub fn check_attributes(&self, writes: &[(String, ShardAttributes)]) -> Result<(), String> {
        if writes.is_empty() {
            return Err("no shards named".to_owned());
        }
        if writes.len() > MAX_ATTRIBUTE_WRITES {
            return Err(format!("{} shards named; at most {MAX_ATTRIBUTE_WRITES} in one write", writes.len()));
        }
        let mut seen = BTreeSet::new();
        for (index, (shard, _)) in writes.iter().enumerate() {
            check_shard_id(shard).map_err(|error| format!("shard {index}: {error}"))?;
            if !seen.insert(shard.as_str()) {
                return Err(format!("shard {index}: {shard:?} is named twice"));
            }
        }
        let added = writes
            .iter()
            .filter(|(shard, attributes)| !attributes.is_empty() && !self.durable.attributes.contains_key(shard))
            .count();
        let limit = self.config.max_shards;
        if self.durable.attributes.len() + added > limit {
            return Err(format!("the type keeps attributes for at most {limit} shards (max_shards)"));
        }
        Ok(())
    }

    /// Writes shards' attributes, all or nothing.
    pub(super) fn set_attributes(&mut self, request: RequestId, writes: Vec<(String, ShardAttributes)>) {
        if let Err(message) = self.check_attributes(&writes) {
            return self.reply(request, Reply::AttributesRefused(message));
        }
        let mut changed = Vec::new();
        for (shard, attributes) in writes {
            if self.attributes_of(&shard) != &attributes {
                changed.push(shard.clone());
                self.change(Change::AttributesSet { shard, attributes });
            }
        }
        self.reply(request, Reply::AttributesWritten { changed });
    }

    /// A region's offer of a shard's attributes (the application's, with
    /// its request for the shard's home): kept when the shard has none, its
    /// id is valid and the type has room; otherwise passed over (the
    /// attributes the shard has, an operator's or another region's first,
    /// stay).
    pub(super) fn offer_attributes(&mut self, region: &str, shard: String, attributes: ShardAttributes) {
        if attributes.is_empty() || self.durable.attributes.contains_key(&shard) || check_shard_id(&shard).is_err() {
            return;
        }
        if self.durable.attributes.len() >= self.config.max_shards {
            self.observe(Observation::Ignored {
                what: format!(
                    "the attributes {region} offered for {shard}: the type keeps attributes for at most {} shards",
                    self.config.max_shards
                ),
            });
            return;
        }
        self.change(Change::AttributesSet { shard, attributes });
    }

    /// A shard's attributes (empty when it has none).
    pub fn attributes_of(&self, shard: &str) -> &ShardAttributes {
        static NONE: std::sync::LazyLock<ShardAttributes> = std::sync::LazyLock::new(ShardAttributes::default);
        self.durable.attributes.get(shard).unwrap_or(&NONE)
    }
}
