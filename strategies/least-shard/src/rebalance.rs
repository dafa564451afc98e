//! The two rebalance algorithms and the conditions that hold rebalancing.
//!
//! Which regions take part:
//! - proxy-only regions host no shards: they are left out of everything
//!   except the hold on unreachable or joining regions (a hand-off needs every
//!   region's and proxy's acknowledgement, as in Akka);
//! - *participants* are all other regions; their application versions must
//!   agree and their shards are counted;
//! - *receivers* are the allocatable participants (up, not draining): only
//!   they can get a moved shard, so only they count in the current
//!   algorithm's optimal-per-region denominator. Any other participant
//!   (leaving or draining) has a target of zero shards.

use std::cmp::Ordering;

use shardalloc_guest::{Allocations, RegionId, RegionStatus, Shard, View, compare_versions};

use crate::config::Config;
use crate::region_order;

/// Why rebalancing is held this round, if it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Regions run different application versions (a rolling update).
    MixedVersions,
    /// A region (or proxy) is unreachable.
    Unreachable(String),
    /// A region (or proxy) is still joining.
    Joining(String),
    /// Current algorithm: some hand-off is still in progress.
    InProgress(usize),
    /// Classic algorithm: `max_simultaneous_rebalance` shards already moving.
    TooManyInProgress(usize),
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::MixedVersions => write!(f, "regions run mixed application versions"),
            Hold::Unreachable(a) => write!(f, "region {a} is unreachable"),
            Hold::Joining(a) => write!(f, "region {a} is joining"),
            Hold::InProgress(n) => write!(f, "{n} hand-offs in progress"),
            Hold::TooManyInProgress(n) => write!(f, "{n} hand-offs in progress, the most allowed at once"),
        }
    }
}

/// The topology conditions under which neither algorithm rebalances (Akka's
/// `isAGoodTimeToRebalance`): any region or proxy unreachable or joining, or
/// the non-proxy regions running different application versions.
pub fn topology_hold(view: &View) -> Option<Hold> {
    for region in view.regions() {
        match region.status {
            RegionStatus::Unreachable => return Some(Hold::Unreachable(region.address.clone())),
            RegionStatus::Joining => return Some(Hold::Joining(region.address.clone())),
            RegionStatus::Up | RegionStatus::Leaving => {}
        }
    }
    let mut versions = view.regions().iter().filter(|r| !r.proxy_only).map(|r| r.app_version.as_str());
    if let Some(first) = versions.next()
        && versions.any(|v| v != first && compare_versions(v, first) != Ordering::Equal)
    {
        return Some(Hold::MixedVersions);
    }
    None
}

/// The non-proxy regions, most suitable first by [`region_order`].
fn participants_in_order(view: &View) -> Vec<RegionId> {
    let mut ids: Vec<RegionId> = view.region_ids().filter(|id| !view.region(*id).proxy_only).collect();
    ids.sort_by(|a, b| region_order(view, *a, *b));
    ids
}

/// The current algorithm (Akka 2.6.10+), assuming nothing holds it.
pub(crate) fn current(config: &Config, view: &View, table: &Allocations) -> Vec<Shard> {
    let order = participants_in_order(view);
    let size = |id: RegionId| table.region_shards(id).len();
    let receives = |id: RegionId| view.region(id).is_allocatable();
    let shards: usize = order.iter().map(|id| size(*id)).sum();
    let receivers = order.iter().filter(|id| receives(**id)).count();
    if shards == 0 || receivers == 0 {
        return Vec::new();
    }
    let optimal = shards.div_ceil(receivers);
    let limit = config.limit(shards);

    // Phase 1: every region's oldest shards above its target (optimal for a
    // receiver, zero for a leaving or draining region).
    let mut selected = Vec::new();
    for &id in &order {
        let target = if receives(id) { optimal } else { 0 };
        let excess = size(id).saturating_sub(target);
        // Pinned shards stay where they are: the excess is taken from the others.
        selected.extend(table.region_shards(id).filter(|s| !table.is_pinned(*s)).take(excess));
        if selected.len() >= limit {
            break;
        }
    }
    if !selected.is_empty() {
        selected.truncate(limit);
        return selected;
    }

    // Phase 2: optimal is rounded up, so regions may sit two or more below
    // it; move that many shards, one (the oldest) from each region at or
    // above optimal.
    let below: usize = order.iter().filter(|id| receives(**id)).map(|id| (optimal - 1).saturating_sub(size(*id))).sum();
    if below == 0 {
        return Vec::new();
    }
    order
        .iter()
        .filter(|id| receives(**id) && size(**id) >= optimal)
        .filter_map(|id| table.region_shards(*id).find(|s| !table.is_pinned(*s)))
        .take(below.min(limit))
        .collect()
}

/// The classic algorithm, assuming the topology does not hold it and fewer
/// than `max_simultaneous_rebalance` shards are moving.
pub(crate) fn classic(config: &Config, view: &View, table: &Allocations) -> Vec<Shard> {
    let order = participants_in_order(view);
    // The most suitable receiver, counting all its shards (moving ones too).
    let Some(least) = order.iter().copied().find(|id| view.region(*id).is_allocatable()) else {
        return Vec::new();
    };
    let least_size = table.region_shards(least).len();
    // The participant with the most shards not already moving; on a tie the
    // first in region order.
    let mut most: Option<(RegionId, usize)> = None;
    for &id in &order {
        let movable = table.region_shards(id).filter(|s| !table.is_in_progress(*s)).count();
        if most.is_none_or(|(_, best)| movable > best) {
            most = Some((id, movable));
        }
    }
    let Some((most, most_size)) = most else {
        return Vec::new();
    };
    let threshold = config.rebalance_threshold as usize;
    let difference = most_size.saturating_sub(least_size);
    if difference <= threshold {
        return Vec::new();
    }
    let room = (config.max_simultaneous_rebalance as usize).saturating_sub(table.in_progress_count());
    let n = (difference - threshold).min(threshold).min(room);
    let mut candidates: Vec<(String, Shard)> = table
        .region_shards(most)
        .filter(|s| !table.is_in_progress(*s) && !table.is_pinned(*s))
        .map(|s| (table.shard_id(s).into_owned(), s))
        .collect();
    candidates.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    candidates.into_iter().take(n).map(|(_, s)| s).collect()
}
