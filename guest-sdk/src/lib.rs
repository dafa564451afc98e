//! # shardalloc-guest: write a shard allocation strategy in plain Rust
//!
//! A strategy implements [`Strategy`] over plain types: a [`View`] of the
//! cluster (regions with status, version, join order, labels, metrics and
//! shard counts), the [`ShardKey`] being allocated, and for rebalancing the
//! [`Allocations`] (each region's shards, oldest first, and the ones moving).
//! One line, `shardalloc_guest::export_strategy!(MyStrategy);`, makes the
//! crate a `shardalloc:strategy` component when built for `wasm32`; on every
//! other target it expands to nothing, so the same crate is unit-tested with
//! plain `cargo test` and can be linked natively into the node.
//!
//! Layout:
//! - [`topology`]: regions, the [`Topology`], version ordering and the
//!   topology's part of the suitability order;
//! - [`view`]: the per-call [`View`], the shard key and hash;
//! - [`allocations`]: [`Allocations`], the shard table `rebalance` reads;
//! - [`attributes`]: a shard's [`Attributes`] (`tenant=acme`), contract 0.3;
//! - [`kept`]: the view a component of contract 0.3 keeps from the host's
//!   batches of changes, and the view checksum;
//! - [`strategy`]: the [`Strategy`] trait and [`Info`];
//! - [`order`]: the suitability order of regions and `least_loaded`;
//! - [`config`]: JSON configuration parsing that names unknown keys;
//! - [`host`]: logging (and, in components, shard ids on demand);
//! - [`snapshot`]: the snapshot JSON format the CLI reads;
//! - [`testing`]: the one-line [`testing::Scenario`] harness and random clusters;
//! - [`conformance`]: the suite every strategy should pass;
//! - `bindings` (wasm32 only): the contract's generated bindings;
//! - `export` (wasm32 only): the glue behind [`export_strategy!`].

pub mod allocations;
pub mod attributes;
pub mod config;
pub mod conformance;
pub mod host;
pub mod kept;
pub mod order;
mod shard_ids;
pub mod snapshot;
pub mod strategy;
mod suitable;
pub mod testing;
pub mod topology;
pub mod view;

#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod bindings;
#[cfg(target_arch = "wasm32")]
mod export;

pub use attributes::Attributes;
pub use host::{Level, LogRecord, log};
pub use snapshot::{Snapshot, SnapshotRegion};
pub use strategy::{Info, Strategy};
pub use view::{
    AllocationCause, Allocations, Move, Region, RegionId, RegionStatus, Shard, ShardKey, Topology, View,
    compare_versions, shard_hash,
};

/// The version of the `shardalloc:strategy` contract this SDK implements.
pub const CONTRACT_VERSION: &str = "0.3.0";

#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod __private {
    pub use crate::export::*;
}

/// Exports a [`Strategy`] type (which must implement `Default`) as the
/// component's `shardalloc:strategy` world. On targets other than wasm32 it
/// expands to nothing, so many strategies can be linked into one native
/// binary without clashing.
///
/// ```ignore
/// #[derive(Default)]
/// pub struct MyStrategy { /* settings */ }
/// impl shardalloc_guest::Strategy for MyStrategy { /* … */ }
/// shardalloc_guest::export_strategy!(MyStrategy);
/// ```
#[macro_export]
macro_rules! export_strategy {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::__private::bindings::exports::shardalloc::strategy::allocator as __allocator;
            use $crate::__private::bindings::shardalloc::strategy::types as __types;
            ::std::thread_local! {
                static __SHARDALLOC_STATE: ::core::cell::RefCell<::core::option::Option<$ty>> =
                    const { ::core::cell::RefCell::new(::core::option::Option::None) };
            }
            struct __ShardallocExports;
            impl __allocator::Guest for __ShardallocExports {
                fn describe() -> __types::Info {
                    $crate::__private::describe(&__SHARDALLOC_STATE)
                }
                fn configure(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::configure(&__SHARDALLOC_STATE, config)
                }
                fn load_view(view: __types::View) -> u64 {
                    $crate::__private::load_view(&__SHARDALLOC_STATE, view)
                }
                fn apply(changes: __types::Changes) -> u64 {
                    $crate::__private::apply(changes)
                }
                fn allocate(
                    shard: u32,
                    hash: u64,
                    requester: ::core::option::Option<u32>,
                    cause: __types::AllocationCause,
                    now: u64,
                ) -> i64 {
                    $crate::__private::allocate(&__SHARDALLOC_STATE, shard, hash, requester, cause, now)
                }
                fn last_error() -> ::std::string::String {
                    $crate::__private::last_error()
                }
                fn rebalance(now: u64) -> ::core::result::Result<::std::vec::Vec<__types::Move>, ::std::string::String> {
                    $crate::__private::rebalance(&__SHARDALLOC_STATE, now)
                }
            }
            $crate::__private::bindings::__export_strategy_world!(__ShardallocExports with_types_in $crate::__private::bindings);
        };
    };
}
