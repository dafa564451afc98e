//! Churn limits: how much of a strategy's rebalance answer the host lets
//! through, whatever the strategy (built-in, uploaded, any contract).
//!
//! Per type, all off by default (today's behaviour):
//! - **moves per round**: at most `max_moves_per_round` shards, and at most
//!   `max_moves_fraction` of the type's homed shards (rounded up, so at
//!   least one), whichever is fewer;
//! - **cooldown**: a shard that moved less than `move_cooldown_ms` ago stays;
//! - **round interval**: a round less than `min_round_interval_ms` after the
//!   last round that moved a shard moves nothing.
//!
//! Moves toward a placement (an operator's pin) are never clipped: they come
//! first in the answer and pass as they are. The strategy's own moves are
//! clipped in this order: the round interval, the cooldown, the budget (the
//! first moves of the answer are kept). What is clipped, and why, goes to
//! the event stream, the metrics and dry runs.

use std::collections::BTreeMap;

use shardalloc_proto::protocol::Millis;

/// The limits of one type. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChurnLimits {
    /// Most strategy moves in one round.
    pub max_moves_per_round: Option<usize>,
    /// Most strategy moves in one round as a fraction of the homed shards
    /// (0 < fraction ≤ 1).
    pub max_moves_fraction: Option<f64>,
    /// A shard stays this long after its last move (0: no cooldown).
    pub move_cooldown_ms: u64,
    /// Rounds that move shards are at least this far apart (0: any).
    pub min_round_interval_ms: u64,
}

/// Why a move was clipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClipReason {
    /// The round came too soon after the last round that moved a shard.
    Interval,
    /// The shard moved too recently.
    Cooldown,
    /// The round's move budget was spent.
    MovesPerRound,
}

impl ClipReason {
    /// Every limit.
    pub const ALL: [ClipReason; 3] = [ClipReason::Interval, ClipReason::Cooldown, ClipReason::MovesPerRound];

    /// The limit's name, as events, metrics and dry runs give it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClipReason::Interval => "min-round-interval",
            ClipReason::Cooldown => "move-cooldown",
            ClipReason::MovesPerRound => "max-moves-per-round",
        }
    }
}

impl std::fmt::Display for ClipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the limits kept of one answer and what they clipped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Clipped {
    /// The moves to make, in the answer's order.
    pub kept: Vec<String>,
    /// The moves clipped, in the answer's order, with why.
    pub clipped: Vec<(String, ClipReason)>,
}

impl Clipped {
    /// How many moves each limit clipped.
    pub fn counts(&self) -> BTreeMap<ClipReason, usize> {
        let mut counts = BTreeMap::new();
        for (_, reason) in &self.clipped {
            *counts.entry(*reason).or_default() += 1;
        }
        counts
    }
}

/// What a round needs to know besides the answer.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// The time of the round.
    pub now: Millis,
    /// The type's shards with a home.
    pub homed: usize,
    /// When the last round that moved a shard (of the strategy's) ran.
    pub last_moving_round: Option<Millis>,
}

impl ChurnLimits {
    /// True when no limit is set.
    pub fn is_off(&self) -> bool {
        *self == ChurnLimits::default()
    }

    /// Checks the limits; the error names the one that cannot work.
    pub fn check(&self) -> Result<(), String> {
        if self.max_moves_per_round == Some(0) {
            return Err("max-moves-per-round must be at least 1".to_owned());
        }
        if let Some(fraction) = self.max_moves_fraction
            && !(fraction > 0.0 && fraction <= 1.0)
        {
            return Err(format!("max-moves-fraction must be above 0 and at most 1, not {fraction}"));
        }
        Ok(())
    }

    /// The most strategy moves a round of a type with `homed` shards may make.
    pub fn budget(&self, homed: usize) -> usize {
        let by_fraction = self.max_moves_fraction.map(|f| ((homed as f64 * f).ceil() as usize).max(1));
        [self.max_moves_per_round, by_fraction].into_iter().flatten().min().unwrap_or(usize::MAX)
    }

    /// Clips an answer: its first `exempt` moves (toward placements) pass,
    /// the strategy's after them are limited. `moved_at` says when a shard
    /// last moved.
    pub fn clip(
        &self,
        answer: Vec<String>,
        exempt: usize,
        round: Round,
        moved_at: impl Fn(&str) -> Option<Millis>,
    ) -> Clipped {
        let mut clipped = Clipped::default();
        let too_soon = self.min_round_interval_ms > 0
            && round.last_moving_round.is_some_and(|last| round.now < last.saturating_add(self.min_round_interval_ms));
        let mut budget = self.budget(round.homed);
        for (index, shard) in answer.into_iter().enumerate() {
            if index < exempt {
                clipped.kept.push(shard);
                continue;
            }
            let reason = if too_soon {
                Some(ClipReason::Interval)
            } else if self.move_cooldown_ms > 0
                && moved_at(&shard).is_some_and(|at| round.now < at.saturating_add(self.move_cooldown_ms))
            {
                Some(ClipReason::Cooldown)
            } else if budget == 0 {
                Some(ClipReason::MovesPerRound)
            } else {
                None
            };
            match reason {
                Some(reason) => clipped.clipped.push((shard, reason)),
                None => {
                    budget -= 1;
                    clipped.kept.push(shard);
                }
            }
        }
        clipped
    }
}

/// The limits over simulated rounds (dry runs, simulations): round `n`
/// happens `n × round_ms` after `start`, and every move a round makes
/// counts toward the next rounds' cooldown and interval.
#[derive(Debug, Clone, Default)]
pub struct Paced {
    /// The limits (off: every answer passes).
    pub limits: ChurnLimits,
    /// The time between two rounds (the node's rebalance interval).
    pub round_ms: Millis,
    /// The time of round 0: the state simulated.
    pub start: Millis,
    /// When shards last moved, as of `start`; each round adds its moves.
    pub moved_at: std::collections::HashMap<String, Millis>,
    /// When a round last made a strategy move.
    pub last_moving_round: Option<Millis>,
}

impl Paced {
    /// The simulated time of round `n` (from 1): `start` plus `n` rounds.
    pub fn now(&self, n: usize) -> Millis {
        self.start.saturating_add((n as u64).saturating_mul(self.round_ms))
    }

    /// Clips the answer of round `n` (from 1) over `homed` shards, and
    /// records its moves.
    pub fn round(&mut self, n: usize, answer: Vec<String>, exempt: usize, homed: usize) -> Clipped {
        let now = self.now(n);
        let round = Round { now, homed, last_moving_round: self.last_moving_round };
        let moved_at = &self.moved_at;
        let clipped = self.limits.clip(answer, exempt, round, |shard| moved_at.get(shard).copied());
        if clipped.kept.len() > exempt {
            self.last_moving_round = Some(now);
        }
        if !self.limits.is_off() {
            for shard in &clipped.kept {
                self.moved_at.insert(shard.clone(), now);
            }
        }
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(shards: &[&str]) -> Vec<String> {
        shards.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn each_limit_clips_what_it_should_and_nothing_else() {
        let moved = |shard: &str| match shard {
            "hot" => Some(9_500),
            "old" => Some(1_000),
            _ => None,
        };
        let round = Round { now: 10_000, homed: 100, last_moving_round: Some(4_000) };
        let off = ChurnLimits::default();
        let budget = ChurnLimits { max_moves_per_round: Some(2), ..off };
        let fraction = ChurnLimits { max_moves_fraction: Some(0.015), ..off };
        let cooldown = ChurnLimits { move_cooldown_ms: 1_000, ..off };
        let interval = ChurnLimits { min_round_interval_ms: 6_001, ..off };
        let all = ChurnLimits { max_moves_per_round: Some(1), move_cooldown_ms: 1_000, ..off };
        use ClipReason::*;
        // (limits, exempt placement moves, kept, clipped)
        type Case<'a> = (ChurnLimits, usize, &'a [&'a str], &'a [(&'a str, ClipReason)]);
        let cases: [Case; 7] = [
            (off, 0, &["a", "hot", "old", "b"], &[]),
            (budget, 0, &["a", "hot"], &[("old", MovesPerRound), ("b", MovesPerRound)]),
            (fraction, 0, &["a", "hot"], &[("old", MovesPerRound), ("b", MovesPerRound)]),
            (cooldown, 0, &["a", "old", "b"], &[("hot", Cooldown)]),
            (interval, 0, &[], &[("a", Interval), ("hot", Interval), ("old", Interval), ("b", Interval)]),
            (interval, 2, &["a", "hot"], &[("old", Interval), ("b", Interval)]),
            (all, 1, &["a", "old"], &[("hot", Cooldown), ("b", MovesPerRound)]),
        ];
        for (index, (limits, exempt, kept, clipped)) in cases.into_iter().enumerate() {
            let got = limits.clip(answer(&["a", "hot", "old", "b"]), exempt, round, moved);
            assert_eq!(got.kept, answer(kept), "case {index}: kept");
            let clipped: Vec<(String, ClipReason)> = clipped.iter().map(|(s, r)| ((*s).to_owned(), *r)).collect();
            assert_eq!(got.clipped, clipped, "case {index}: clipped");
        }
    }

    #[test]
    fn the_budget_is_the_smaller_limit_and_a_fraction_allows_at_least_one() {
        let limits = |max, fraction| ChurnLimits {
            max_moves_per_round: max,
            max_moves_fraction: fraction,
            ..ChurnLimits::default()
        };
        assert_eq!(limits(None, None).budget(10), usize::MAX);
        assert_eq!(limits(Some(5), None).budget(10), 5);
        assert_eq!(limits(None, Some(0.01)).budget(10_000), 100);
        assert_eq!(limits(None, Some(0.01)).budget(10), 1, "rounded up");
        assert_eq!(limits(Some(50), Some(0.01)).budget(10_000), 50);
        assert_eq!(limits(Some(0), None).check(), Err("max-moves-per-round must be at least 1".to_owned()));
        assert!(limits(None, Some(1.5)).check().unwrap_err().contains("at most 1"));
        assert!(limits(None, Some(0.0)).check().is_err());
        assert!(limits(None, Some(f64::NAN)).check().is_err());
        assert_eq!(limits(Some(3), Some(1.0)).check(), Ok(()));
    }

    #[test]
    fn simulated_rounds_keep_the_cooldown_of_their_own_moves() {
        let limits = ChurnLimits { move_cooldown_ms: 25_000, ..ChurnLimits::default() };
        let mut paced = Paced { limits, round_ms: 10_000, start: 1_000_000, ..Paced::default() };
        paced.moved_at.insert("before".into(), 990_000);
        let first = paced.round(1, answer(&["a", "before"]), 0, 10);
        assert_eq!((first.kept, first.clipped), (answer(&["a"]), vec![("before".into(), ClipReason::Cooldown)]));
        let second = paced.round(2, answer(&["a", "before"]), 0, 10);
        assert_eq!(second.kept, ["before"], "a moved 10 s ago; before 30 s ago");
        assert_eq!(paced.round(4, answer(&["a"]), 0, 10).kept, ["a"], "30 s after its move");
    }

    #[test]
    fn a_round_after_the_interval_moves_again() {
        let limits = ChurnLimits { min_round_interval_ms: 5_000, ..ChurnLimits::default() };
        let round = |now| Round { now, homed: 10, last_moving_round: Some(10_000) };
        assert!(limits.clip(answer(&["a"]), 0, round(14_999), |_| None).kept.is_empty());
        assert_eq!(limits.clip(answer(&["a"]), 0, round(15_000), |_| None).kept, ["a"]);
        let first = Round { now: 0, homed: 10, last_moving_round: None };
        assert_eq!(limits.clip(answer(&["a"]), 0, first, |_| None).kept, ["a"], "no round moved yet");
    }
}
