//! The sandbox's limits, each documented where it is defined.

use std::time::Duration;

/// How long one strategy call may run before it is interrupted. A call that
/// hits it traps, its store is dropped and the decision falls back.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);

/// The deadline of the calls made while loading and instantiating
/// (`describe`, `configure`): rare, and never on the decision path, so they
/// get more room than decisions.
pub const LOAD_DEADLINE: Duration = Duration::from_secs(1);

/// The default budget of loading the whole view into an instance that has
/// none (a fresh instance: an activation, a dry run, a shadow, one rebuilt
/// after a fault) together with that instance's first decision on it,
/// where a strategy builds what it keeps (a 0.2 strategy reading every
/// shard's id through `shard-id`, one host call each). Measured apart from
/// [`Limits::deadline`], which every later decision keeps: at 1,000,000
/// shards the load alone takes longer than a decision may. Past it the
/// call faults as a deadline fault whose detail names this budget. The
/// node's driver waits on the call, so keep it well below the regions'
/// lease (10 s by default): a faulty strategy costs this much per fault.
pub const DEFAULT_VIEW_LOAD: Duration = Duration::from_secs(2);

/// How much linear memory one strategy instance may use: 256 MiB, room
/// for the kept view of a type of 1,000,000 shards with every id (it
/// loaded within 128 MiB and not within 64 MiB, measured once by hand) and
/// a strategy's own index of them. Only what an instance touches is backed by memory; the
/// cap bounds a runaway strategy.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 << 20;

/// The largest memory limit a type may be configured with; no pooled
/// memory grows past it.
pub const MAX_MEMORY_LIMIT: usize = 1 << 30;

/// How often the epoch ticker advances the engine's epoch. Deadlines are
/// counted in these ticks, so they are this coarse.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The entity types the default instance pool is sized for: the node's
/// type limit (`server::driver::catalog::MAX_TYPES`, which a test keeps
/// equal to it; `shardalloc serve` sizes its pool from that constant).
pub const POOL_TYPES: usize = 1_024;

/// Strategy instances one entity type holds for longer than a call: the
/// live instance its caller uses; the one it is swapping for (a new
/// activation's instance warmed before the swap and waiting for its first
/// caller, or the instance the caller swapped out, dropped on the next
/// activation); and its shadow's.
///
/// Measured with the slot's code (`engine::slot`): one handle per type (the
/// coordinator's), so a type holds at most two active-side instances and one
/// shadow once its callers took them. What exists only for a moment comes
/// out of [`SHARED_INSTANCES`].
pub const INSTANCES_PER_TYPE: u32 = 3;

/// Instances beyond the types' own, for what lives only for a moment: the
/// instance `describe` runs on while a component is compiled (at most
/// `--concurrent-compiles` uploads at once, and the driver's own), dry runs
/// (two at once), an activation or shadow validated on the driver thread
/// (one at a time) while the type still holds the previous one's.
pub const SHARED_INSTANCES: u32 = 64;

/// Instance slots the pool needs for `types` entity types, each holding
/// [`INSTANCES_PER_TYPE`], plus [`SHARED_INSTANCES`].
pub const fn instances_for_types(types: usize) -> u32 {
    types as u32 * INSTANCES_PER_TYPE + SHARED_INSTANCES
}

/// Instance slots in the pooling allocator (`EngineConfig::max_instances`):
/// [`POOL_TYPES`] types' worth, 3,136.
///
/// A slot is not memory: the pool only counts component and core instances,
/// and reserves address space for their linear memories and tables (see
/// [`MEMORIES_PER_INSTANCE`]). Past the pool, an instantiation fails (`maximum
/// concurrent limit of N for …`): a new type, activation or shadow is
/// refused and a call falls back; the types already served carry on.
pub const DEFAULT_MAX_INSTANCES: u32 = instances_for_types(POOL_TYPES);

/// Core (module) instances the pool admits per strategy instance. A count,
/// not a reservation: every component measured has 3 (the built-ins, the
/// Rust, C and JavaScript examples), the Python example 38. The pool used
/// to admit 2 per instance, so 171 types of 3 each overflowed its 512.
pub const CORE_INSTANCES_PER_INSTANCE: u32 = 64;

/// Linear memories the pool reserves per strategy instance: every
/// component measured (the built-ins and every example) has one. Each
/// reservation is [`MEMORY_RESERVATION`] plus [`MEMORY_GUARD`] of address
/// space, `PROT_NONE` until the instance uses it: 3,136 of them reserve
/// 12.3 TiB of the 128 TiB a process can address, and no memory. A
/// component with two memories takes two of them.
pub const MEMORIES_PER_INSTANCE: u32 = 1;

/// Tables the pool holds per strategy instance: every component measured
/// has two (its module's, and the adapter shims'), of at most 81 elements
/// among the built-ins and 7,690 among the examples. Each table slot is
/// wasmtime's default of 20,000 elements, 160 KiB of address space reserved
/// without backing (3,136 instances: 980 MiB).
pub const TABLES_PER_INSTANCE: u32 = 2;

/// The address space reserved for each linear memory: 4 GiB, which lets
/// compiled code skip bounds checks on 32-bit memories (wasmtime's default
/// on 64-bit hosts, set explicitly so the figures here hold). A memory never
/// grows past the instance's cap ([`Limits::memory`], at most
/// [`MAX_MEMORY_LIMIT`]); the rest of the reservation stays inaccessible.
pub const MEMORY_RESERVATION: u64 = 4 << 30;

// A memory grows within its reservation, never moving (wasmtime refuses a
// pool whose memories could outgrow it).
const _: () = assert!(MAX_MEMORY_LIMIT as u64 <= MEMORY_RESERVATION);

/// The inaccessible guard after each memory's reservation (wasmtime's
/// default, set explicitly): loads and stores with static offsets below it
/// need no bounds check either.
pub const MEMORY_GUARD: u64 = 32 << 20;

/// The address space the pool of `max_instances` reserves for linear
/// memories, in bytes (tables add 320 KiB per instance, without backing).
pub const fn pool_reservation(max_instances: u32) -> u64 {
    let slots = max_instances as u64 * MEMORIES_PER_INSTANCE as u64;
    // One guard before the first slot, then a memory and its guard per slot.
    MEMORY_GUARD + slots * (MEMORY_RESERVATION + MEMORY_GUARD)
}

/// The largest component the engine accepts, in bytes.
pub const MAX_COMPONENT_SIZE: usize = 32 << 20;

/// Per-instance sandbox settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of one call.
    pub deadline: Duration,
    /// Linear memory cap, in bytes (at most [`MAX_MEMORY_LIMIT`]).
    pub memory: usize,
    /// Wall-clock budget of a whole-view load and the first decision after
    /// it ([`DEFAULT_VIEW_LOAD`]); never shorter than `deadline`.
    pub view_load: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { deadline: DEFAULT_DEADLINE, memory: DEFAULT_MEMORY_LIMIT, view_load: DEFAULT_VIEW_LOAD }
    }
}

impl Limits {
    /// The deadline in epoch ticks: rounded up, plus one because the first
    /// tick may come at once, and never fewer than two.
    pub fn deadline_ticks(&self) -> u64 {
        ticks(self.deadline)
    }

    /// The deadline of loading calls, in ticks: [`LOAD_DEADLINE`] or the
    /// call deadline, whichever is longer.
    pub fn load_deadline_ticks(&self) -> u64 {
        ticks(self.deadline.max(LOAD_DEADLINE))
    }

    /// The budget of a whole-view load and the decision after it, in ticks:
    /// [`Limits::view_load`] or the call deadline, whichever is longer.
    pub fn view_load_ticks(&self) -> u64 {
        ticks(self.deadline.max(self.view_load))
    }
}

fn ticks(deadline: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    let ticks = deadline.as_nanos().div_ceil(tick) as u64;
    (ticks + 1).max(2)
}

/// Longest log message kept from a strategy; longer ones are cut.
pub const MAX_LOG_MESSAGE: usize = 4096;

/// Cuts guest-supplied text to `limit` bytes on a character boundary.
pub fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pool_holds_three_instances_for_each_type_in_12_tib_of_address_space() {
        assert_eq!(DEFAULT_MAX_INSTANCES, 3_136);
        assert_eq!(instances_for_types(1), INSTANCES_PER_TYPE + SHARED_INSTANCES);
        // What the node's VmSize shows for its memories: 13,259,740,916 kB
        // measured, 12.35 TiB.
        let tib = pool_reservation(DEFAULT_MAX_INSTANCES) as f64 / (1u64 << 40) as f64;
        assert!((12.3..12.4).contains(&tib), "{tib} TiB");
    }

    #[test]
    fn deadline_ticks_round_up_and_never_fire_at_once() {
        let ticks =
            |ms| Limits { deadline: Duration::from_millis(ms), memory: 0, ..Limits::default() }.deadline_ticks();
        assert_eq!(ticks(50), 11);
        assert_eq!(ticks(1), 2);
        assert_eq!(ticks(0), 2);
        assert_eq!(ticks(6), 3);
    }
}
