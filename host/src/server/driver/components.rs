//! The uploaded components as a whole: what they weigh (for the quota the
//! upload handler enforces) and which of them are collected.
//!
//! A component is **in use**, and never collected, while any type has it
//! as its active strategy, in its activation history (persisted, and the
//! slot's own: everything a rollback, by hand or automatic, can return to),
//! or as its shadow, or while something in the process holds its compiled
//! form (a dry run or an activation between its compile and its swap).

use std::collections::BTreeSet;

use super::Driver;
use super::request::StoredComponents;
use crate::strategy::StrategySource;

impl Driver {
    /// The recorded components' count and bytes, and whether `digest` is one.
    pub(super) fn stored_components(&self, digest: &str) -> StoredComponents {
        let components = self.catalog.components();
        StoredComponents {
            count: components.len(),
            bytes: components.values().map(|c| c.size).sum(),
            has_digest: components.contains_key(digest),
        }
    }

    /// Every digest a type uses: active, in its history (persisted or the
    /// slot's), shadowing.
    fn digests_in_use(&self) -> BTreeSet<String> {
        let mut used = BTreeSet::new();
        let mut add = |source: &StrategySource| {
            if let StrategySource::Digest(digest) = source {
                used.insert(digest.clone());
            }
        };
        for (_, entry) in self.catalog.iter() {
            add(&entry.record.strategy);
            entry.activations.iter().for_each(|a| add(&a.strategy));
            let slot = &entry.slot;
            let held = slot.history().into_iter().chain([slot.active()]).chain(slot.shadow());
            held.for_each(|a| add(&StrategySource::Digest(a.compiled.digest.clone())));
        }
        used
    }

    /// Forgets, in this turn, the components no one uses that were uploaded
    /// more than `retention_ms` before `now_ms`; returns their digests.
    pub(super) fn collect_components(
        &mut self,
        now_ms: u64,
        retention_ms: u64,
        in_flight: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let used = self.digests_in_use();
        let old: Vec<String> = (self.catalog.components().values())
            .filter(|c| now_ms.saturating_sub(c.uploaded_at_ms) >= retention_ms)
            .filter(|c| !used.contains(&c.digest) && !in_flight(&c.digest))
            .map(|c| c.digest.clone())
            .collect();
        let mut collected = Vec::new();
        for digest in old {
            match self.catalog.remove_component(&digest, &mut self.turn) {
                Ok(()) => {
                    tracing::info!(%digest, retention_ms, "collected an unused uploaded component");
                    collected.push(digest);
                }
                Err(refusal) => tracing::debug!(%digest, %refusal, "an unused component is kept"),
            }
        }
        collected
    }
}
