//! The sandbox's limits, each documented where it is defined.

use std::time::Duration;

/// How long one strategy call may run before it is interrupted. A call that
/// hits it traps, its store is dropped and the decision falls back.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);

/// The deadline of the calls made while loading and instantiating
/// (`describe`, `configure`): rare, and never on the decision path, so they
/// get more room than decisions.
pub const LOAD_DEADLINE: Duration = Duration::from_secs(1);

/// How much linear memory one strategy instance may use.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;

/// The largest memory limit a type may be configured with; the pooling
/// allocator reserves slots of this size.
pub const MAX_MEMORY_LIMIT: usize = 1 << 30;

/// How often the epoch ticker advances the engine's epoch. Deadlines are
/// counted in these ticks, so they are this coarse.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Instance slots in the pooling allocator: a live instance per entity type
/// and strategy (active, shadow, dry runs), plus replacements being built.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;

/// The largest component the engine accepts, in bytes.
pub const MAX_COMPONENT_SIZE: usize = 32 << 20;

/// Per-instance sandbox settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of one call.
    pub deadline: Duration,
    /// Linear memory cap, in bytes (at most [`MAX_MEMORY_LIMIT`]).
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { deadline: DEFAULT_DEADLINE, memory: DEFAULT_MEMORY_LIMIT }
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
    fn deadline_ticks_round_up_and_never_fire_at_once() {
        let ticks = |ms| Limits { deadline: Duration::from_millis(ms), memory: 0 }.deadline_ticks();
        assert_eq!(ticks(50), 11);
        assert_eq!(ticks(1), 2);
        assert_eq!(ticks(0), 2);
        assert_eq!(ticks(6), 3);
    }
}
