//! The host's values as each contract's records, borrowing their text and
//! numbers rather than copying them: what crosses into a strategy call.

use shardalloc_guest::kept::{Changes, FullView};
use shardalloc_guest::{RegionStatus, Topology};

use super::bindings::{v0_1, v0_2, v0_3};
use crate::strategy::ClusterView;

/// Contract 0.1.
pub mod v1 {
    use super::*;
    use v0_1::wit;

    /// Each region's labels as the contract's records.
    pub fn labels(topology: &Topology) -> Vec<Vec<wit::Label<'_>>> {
        topology
            .regions()
            .iter()
            .map(|r| r.labels.iter().map(|(k, v)| wit::Label { key: k, value: v }).collect())
            .collect()
    }

    /// The topology's regions as the contract's records.
    pub fn regions<'a>(topology: &'a Topology, labels: &'a [Vec<wit::Label<'a>>]) -> Vec<wit::Region<'a>> {
        topology
            .regions()
            .iter()
            .zip(labels)
            .map(|(r, labels)| wit::Region {
                address: &r.address,
                status: match r.status {
                    RegionStatus::Up => wit::RegionStatus::Up,
                    RegionStatus::Joining => wit::RegionStatus::Joining,
                    RegionStatus::Leaving => wit::RegionStatus::Leaving,
                    RegionStatus::Unreachable => wit::RegionStatus::Unreachable,
                },
                app_version: &r.app_version,
                join_order: r.join_order,
                labels,
                proxy_only: r.proxy_only,
                draining: r.draining,
            })
            .collect()
    }

    /// The per-call numbers, lent to the call as they are in the view.
    pub fn loads(view: &ClusterView) -> wit::Loads<'_> {
        wit::Loads {
            generation: view.topology().generation(),
            shard_counts: view.shard_counts(),
            metrics: view.metrics(),
        }
    }
}

/// The records of a topology, the same in contracts 0.2 and 0.3 but for
/// 0.3's `region.quantities` (given the contract's quantity record):
/// expanded in each contract's module, over its `wit`.
macro_rules! topology_records {
    ($label:ident $(, $quantity:ident)?) => {
        /// A topology's parts the records borrow.
        struct Parts<'a> {
            labels: Vec<Vec<wit::$label<'a>>>,
            $(quantities: Vec<Vec<wit::$quantity<'a>>>,)?
            names: Vec<&'a str>,
        }

        fn parts(topology: &Topology) -> Parts<'_> {
            Parts {
                labels: topology
                    .regions()
                    .iter()
                    .map(|r| r.labels.iter().map(|(k, v)| wit::$label { key: k, value: v }).collect())
                    .collect(),
                $(quantities: topology
                    .regions()
                    .iter()
                    .map(|r| r.quantities.iter().map(|(n, a)| wit::$quantity { name: n, amount: *a }).collect())
                    .collect(),)?
                names: topology.metric_names().iter().map(String::as_str).collect(),
            }
        }

        fn regions<'a>(topology: &'a Topology, parts: &'a Parts<'a>) -> Vec<wit::Region<'a>> {
            topology
                .regions()
                .iter()
                .enumerate()
                .map(|(i, r)| wit::Region {
                    address: &r.address,
                    status: match r.status {
                        RegionStatus::Up => wit::RegionStatus::Up,
                        RegionStatus::Joining => wit::RegionStatus::Joining,
                        RegionStatus::Leaving => wit::RegionStatus::Leaving,
                        RegionStatus::Unreachable => wit::RegionStatus::Unreachable,
                    },
                    app_version: &r.app_version,
                    join_order: r.join_order,
                    labels: &parts.labels[i],
                    proxy_only: r.proxy_only,
                    draining: r.draining,
                    capacity: r.capacity,
                    $(quantities: {
                        let quantities: &[wit::$quantity<'_>] = &parts.quantities[i];
                        quantities
                    },)?
                })
                .collect()
        }

        /// Calls `f` with a batch's new topology, if it has one, as the
        /// contract's record.
        fn with_topology<R>(topology: Option<&Topology>, f: impl FnOnce(Option<wit::Topology<'_>>) -> R) -> R {
            let parts = topology.map(parts);
            let regions = topology.zip(parts.as_ref()).map(|(t, p)| regions(t, p));
            let lowered = topology.zip(parts.as_ref()).zip(regions.as_ref()).map(|((t, p), regions)| wit::Topology {
                regions,
                metric_names: &p.names,
                signal: t.signal(),
            });
            f(lowered)
        }
    };
}

/// Contract 0.2.
pub mod v2 {
    use super::*;
    use v0_2::wit;

    topology_records!(Label);

    /// Calls `f` with a batch as the contract's `changes`.
    pub fn with_changes<R>(c: &Changes, f: impl FnOnce(wit::Changes<'_>) -> R) -> R {
        with_topology(c.topology.as_ref(), |topology| {
            f(wit::Changes {
                generation: c.generation,
                retired: &c.retired,
                unhomed: &c.unhomed,
                arrived_homeless: &c.arrived_homeless,
                arrived_hashes: &c.arrived_hashes,
                topology,
                metrics: c.metrics.as_deref(),
                homed: wit::Homed { shards: &c.homed.shards, hashes: &c.homed.hashes, regions: &c.homed.regions },
                moving: &c.moving,
                settled: &c.settled,
                pinned: &c.pinned,
                unpinned: &c.unpinned,
                loads: wit::ShardLoads { shards: &c.loads.shards, loads: &c.loads.loads },
            })
        })
    }

    /// Calls `f` with a whole view as the contract's `view`.
    pub fn with_view<R>(v: &FullView, f: impl FnOnce(wit::View<'_>) -> R) -> R {
        let parts = parts(&v.topology);
        let regions = regions(&v.topology, &parts);
        f(wit::View {
            generation: v.generation,
            topology: wit::Topology { regions: &regions, metric_names: &parts.names, signal: v.topology.signal() },
            metrics: &v.metrics,
            homed: wit::Homed { shards: &v.homed.shards, hashes: &v.homed.hashes, regions: &v.homed.regions },
            homeless: &v.homeless,
            homeless_hashes: &v.homeless_hashes,
            moving: &v.moving,
            pinned: &v.pinned,
            loads: wit::ShardLoads { shards: &v.loads.shards, loads: &v.loads.loads },
        })
    }
}

/// Contract 0.3.
pub mod v3 {
    use super::*;
    use shardalloc_guest::kept::{Attributed, ShardNames};
    use v0_3::wit;

    topology_records!(LabelParam, Quantity);

    /// Every shard's id in `table`, packed straight from it as the
    /// contract's `shard-ids` (one text and each id's end: no string per
    /// shard is copied on the way), with the handles in the same order.
    pub fn pack_table(table: &crate::strategy::table::ShardTable) -> ShardNames {
        let mut names = ShardNames::default();
        for shard in table.shards() {
            names.push(shard.handle, table.shard_id(shard.handle).unwrap_or_default());
        }
        names
    }

    /// The attributes of every shard in `table` that has some, packed as
    /// the contract's `attributed`.
    pub fn pack_attributes(table: &crate::strategy::table::ShardTable) -> Attributed {
        let mut attributed = Attributed::default();
        let allocations = table.allocations();
        for shard in table.shards() {
            let attributes = allocations.attributes(shard);
            if !attributes.is_empty() {
                attributed.push(shard.handle, attributes.iter());
            }
        }
        attributed
    }

    /// `attributed` as the contract's record, as it is; none when the
    /// strategy did not ask for attributes.
    fn attributes(attributed: &Attributed, wanted: bool) -> wit::Attributed<'_> {
        if !wanted {
            return wit::Attributed { shards: &[], counts: &[], text: "", ends: &[] };
        }
        wit::Attributed {
            shards: &attributed.shards,
            counts: &attributed.counts,
            text: &attributed.text,
            ends: &attributed.ends,
        }
    }

    /// `names` as the contract's `shard-ids`, as they are (they are packed
    /// already); none when the strategy did not ask for ids.
    fn ids(names: &ShardNames, wanted: bool) -> wit::ShardIds<'_> {
        if !wanted {
            return wit::ShardIds { shards: &[], text: "", ends: &[] };
        }
        wit::ShardIds { shards: &names.shards, text: &names.text, ends: &names.ends }
    }

    /// What a strategy asked to be sent with its view and batches.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Wants {
        /// Shard ids (`needs-shard-ids`).
        pub ids: bool,
        /// Shard attributes (`needs-shard-attributes`).
        pub attributes: bool,
    }

    /// Calls `f` with a batch as the contract's `changes`, with the ids of
    /// the shards it brings and their attributes as the strategy `wants`.
    pub fn with_changes<R>(c: &Changes, wants: Wants, f: impl FnOnce(wit::Changes<'_>) -> R) -> R {
        with_topology(c.topology.as_ref(), |topology| {
            f(wit::Changes {
                generation: c.generation,
                retired: &c.retired,
                unhomed: &c.unhomed,
                arrived_homeless: &c.arrived_homeless,
                arrived_hashes: &c.arrived_hashes,
                topology,
                metrics: c.metrics.as_deref(),
                smoothed_metrics: c.smoothed_metrics.as_deref().or(c.metrics.as_deref()),
                homed: wit::Homed {
                    shards: &c.homed.shards,
                    hashes: &c.homed.hashes,
                    regions: &c.homed.regions,
                    since: &c.homed.since,
                },
                moving: &c.moving,
                settled: &c.settled,
                pinned: &c.pinned,
                unpinned: &c.unpinned,
                loads: wit::ShardLoads { shards: &c.loads.shards, loads: &c.loads.loads },
                named: ids(&c.named, wants.ids),
                attributes: attributes(&c.attributes, wants.attributes),
            })
        })
    }

    /// Calls `f` with a whole view as the contract's `view`: its ids
    /// those `given` ([`pack_table`]), else the view's own, and its
    /// attributes those `attributed` ([`pack_attributes`]), else the
    /// view's own.
    pub fn with_view<R>(
        v: &FullView,
        given: Option<&ShardNames>,
        attributed: Option<&Attributed>,
        f: impl FnOnce(wit::View<'_>) -> R,
    ) -> R {
        let parts = parts(&v.topology);
        let regions = regions(&v.topology, &parts);
        let names = given.unwrap_or(&v.ids);
        f(wit::View {
            generation: v.generation,
            topology: wit::Topology { regions: &regions, metric_names: &parts.names, signal: v.topology.signal() },
            metrics: &v.metrics,
            smoothed_metrics: v.smoothed_metrics.as_deref().unwrap_or(&v.metrics),
            homed: wit::Homed {
                shards: &v.homed.shards,
                hashes: &v.homed.hashes,
                regions: &v.homed.regions,
                since: &v.homed.since,
            },
            homeless: &v.homeless,
            homeless_hashes: &v.homeless_hashes,
            moving: &v.moving,
            pinned: &v.pinned,
            loads: wit::ShardLoads { shards: &v.loads.shards, loads: &v.loads.loads },
            ids: ids(names, true),
            attributes: attributes(attributed.unwrap_or(&v.attributes), true),
        })
    }

    /// The contract's cause.
    pub fn cause(cause: crate::strategy::AllocationCause) -> wit::AllocationCause {
        use crate::strategy::AllocationCause as C;
        match cause {
            C::NewShard => wit::AllocationCause::NewShard,
            C::RegionRemoved => wit::AllocationCause::RegionRemoved,
            C::Drained => wit::AllocationCause::Drained,
            C::PlacementLifted => wit::AllocationCause::PlacementLifted,
            C::Rebalance => wit::AllocationCause::Rebalance,
            C::Operator => wit::AllocationCause::Operator,
        }
    }
}
