//! Journal batches merged before they cross into a component.
//!
//! The shard table journals one batch per change, so a copy can be brought
//! up to date from any generation. Sending them one by one costs a crossing
//! each: a hand-off alone is four batches (moving, unhomed, homed
//! elsewhere, settled). [`coalesce`] merges consecutive batches into one
//! wherever applying the merged batch (in the contract's field order) ends
//! in the same view as applying them in turn:
//!
//! - a shard's changes merge when each later one comes after the earlier
//!   ones in field order, or touches another part of the shard (its home,
//!   its hand-off flag, its pin, its load, its attributes); a shard retired or arriving
//!   never merges a change out of order;
//! - lists keep their order, so shards homed in one region stay in the
//!   order they were homed (the newest last);
//! - a batch with a new topology is never merged: region indexes change
//!   with it. A later metric matrix replaces an earlier one.
//!
//! The merged batches are numbered by the caller (a component's copy counts
//! the batches it was sent), and the checksum after them is the table's.

use std::collections::HashMap;

use shardalloc_guest::kept::Changes;

/// The fields a shard was touched in, one bit per [`Field`].
type Fields = u16;

const ALL: [Field; 11] = [
    Field::Retired,
    Field::Unhomed,
    Field::Named,
    Field::Arrived,
    Field::Homed,
    Field::Moving,
    Field::Settled,
    Field::Pinned,
    Field::Unpinned,
    Field::Load,
    Field::Attributes,
];

fn bit(field: Field) -> Fields {
    1 << field as u8
}

/// A batch's per-shard fields, in the order a batch is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Retired,
    Unhomed,
    /// Its id, as it enters the view.
    Named,
    Arrived,
    Homed,
    Moving,
    Settled,
    Pinned,
    Unpinned,
    Load,
    /// Its attributes (applied last).
    Attributes,
}

/// The part of a shard a field changes: fields of different parts commute,
/// except that leaving or entering the view commutes with nothing.
fn part(field: Field) -> Option<u8> {
    match field {
        Field::Retired | Field::Named | Field::Arrived => None,
        Field::Unhomed | Field::Homed => Some(0),
        Field::Moving | Field::Settled => Some(1),
        Field::Pinned | Field::Unpinned => Some(2),
        Field::Load => Some(3),
        Field::Attributes => Some(4),
    }
}

/// Whether `later` may be applied in field order with `earlier` already in
/// the batch.
fn may_follow(earlier: Field, later: Field) -> bool {
    earlier <= later || matches!((part(earlier), part(later)), (Some(a), Some(b)) if a != b)
}

/// Each shard a batch touches, with each field it touches it in.
fn touches(batch: &Changes) -> impl Iterator<Item = (u32, Field)> + '_ {
    batch
        .retired
        .iter()
        .map(|&h| (h, Field::Retired))
        .chain(batch.unhomed.iter().map(|&h| (h, Field::Unhomed)))
        .chain(batch.named.shards.iter().map(|&h| (h, Field::Named)))
        .chain(batch.arrived_homeless.iter().map(|&h| (h, Field::Arrived)))
        .chain(batch.homed.shards.iter().map(|&h| (h, Field::Homed)))
        .chain(batch.moving.iter().map(|&h| (h, Field::Moving)))
        .chain(batch.settled.iter().map(|&h| (h, Field::Settled)))
        .chain(batch.pinned.iter().map(|&h| (h, Field::Pinned)))
        .chain(batch.unpinned.iter().map(|&h| (h, Field::Unpinned)))
        .chain(batch.loads.shards.iter().map(|&h| (h, Field::Load)))
        .chain(batch.attributes.shards.iter().map(|&h| (h, Field::Attributes)))
}

/// The batches as few merged batches as keep their meaning, in order.
/// Each one's `generation` is left as its last batch's: the caller numbers
/// them.
pub fn coalesce<'a>(batches: impl IntoIterator<Item = &'a Changes>) -> Vec<Changes> {
    let mut merged: Vec<Changes> = Vec::new();
    // The fields each shard of the last merged batch was touched in.
    let mut touched: HashMap<u32, Fields, foldhash::fast::RandomState> = HashMap::default();
    let mut open = false;
    for batch in batches {
        let fits = open
            && batch.topology.is_none()
            && touches(batch).all(|(h, later)| {
                touched.get(&h).is_none_or(|&fields| {
                    ALL.iter().filter(|&&earlier| fields & bit(earlier) != 0).all(|&earlier| may_follow(earlier, later))
                })
            });
        if !fits {
            touched.clear();
            merged.push(batch.clone());
            open = batch.topology.is_none();
        } else {
            let into = merged.last_mut().expect("an open batch");
            append(into, batch);
        }
        if open {
            for (h, field) in touches(batch) {
                *touched.entry(h).or_default() |= bit(field);
            }
        }
    }
    merged
}

fn append(into: &mut Changes, batch: &Changes) {
    into.generation = batch.generation;
    into.retired.extend_from_slice(&batch.retired);
    into.unhomed.extend_from_slice(&batch.unhomed);
    into.named.extend(&batch.named);
    into.arrived_homeless.extend_from_slice(&batch.arrived_homeless);
    into.arrived_hashes.extend_from_slice(&batch.arrived_hashes);
    if batch.metrics.is_some() {
        into.metrics.clone_from(&batch.metrics);
    }
    if batch.smoothed_metrics.is_some() {
        into.smoothed_metrics.clone_from(&batch.smoothed_metrics);
    }
    into.homed.shards.extend_from_slice(&batch.homed.shards);
    into.homed.hashes.extend_from_slice(&batch.homed.hashes);
    into.homed.regions.extend_from_slice(&batch.homed.regions);
    into.homed.since.extend_from_slice(&batch.homed.since);
    into.moving.extend_from_slice(&batch.moving);
    into.settled.extend_from_slice(&batch.settled);
    into.pinned.extend_from_slice(&batch.pinned);
    into.unpinned.extend_from_slice(&batch.unpinned);
    into.loads.shards.extend_from_slice(&batch.loads.shards);
    into.loads.loads.extend_from_slice(&batch.loads.loads);
    into.attributes.extend(&batch.attributes);
}
