//! The strategy's settings: [`Config`], [`Algorithm`], their JSON parsing and
//! validation, and the JSON Schema published in `describe`.

use serde_json::Value;

/// Which rebalance algorithm runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Akka 2.6.10+ `LeastShardAllocationStrategy`: two phases, bounded by
    /// [`Config::absolute_limit`] and [`Config::relative_limit`]; one round
    /// at a time.
    #[default]
    Current,
    /// The classic Akka `ShardCoordinator.LeastShardAllocationStrategy`: moves
    /// a few shards from the most to the least loaded region while their
    /// difference exceeds [`Config::rebalance_threshold`], at most
    /// [`Config::max_simultaneous_rebalance`] moving at once.
    Classic,
}

impl Algorithm {
    /// The name used in the configuration (`current` or `classic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Current => "current",
            Algorithm::Classic => "classic",
        }
    }
}

/// The default of [`Config::absolute_limit`].
pub const DEFAULT_ABSOLUTE_LIMIT: u32 = 20;
/// The default of [`Config::relative_limit`].
pub const DEFAULT_RELATIVE_LIMIT: f64 = 0.1;
/// The default of [`Config::rebalance_threshold`].
pub const DEFAULT_REBALANCE_THRESHOLD: u32 = 1;
/// The default of [`Config::max_simultaneous_rebalance`].
pub const DEFAULT_MAX_SIMULTANEOUS_REBALANCE: u32 = 3;

/// Validated settings of the least-shard strategy. Every field has a default;
/// the settings of the algorithm not selected are validated but unused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// The rebalance algorithm (`algorithm`, default `current`).
    pub algorithm: Algorithm,
    /// Current algorithm: most shards one round moves (`absolute_limit`,
    /// default 20, at least 1).
    pub absolute_limit: u32,
    /// Current algorithm: most shards one round moves as a fraction of all
    /// allocated shards, rounded down (`relative_limit`, default 0.1, in
    /// (0, 1]). A round moves at most
    /// `max(1, min(floor(relative_limit × shards), absolute_limit))`.
    pub relative_limit: f64,
    /// Classic algorithm: the shard-count difference between the most and the
    /// least loaded region must exceed it before anything moves
    /// (`rebalance_threshold`, default 1, at least 1).
    pub rebalance_threshold: u32,
    /// Classic algorithm: most shards moving at once, counting those already
    /// moving (`max_simultaneous_rebalance`, default 3, at least 1).
    pub max_simultaneous_rebalance: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            algorithm: Algorithm::Current,
            absolute_limit: DEFAULT_ABSOLUTE_LIMIT,
            relative_limit: DEFAULT_RELATIVE_LIMIT,
            rebalance_threshold: DEFAULT_REBALANCE_THRESHOLD,
            max_simultaneous_rebalance: DEFAULT_MAX_SIMULTANEOUS_REBALANCE,
        }
    }
}

/// The configuration as written: every key optional (`null` or absent means
/// the default), unknown keys refused by name. Values stay JSON so that a bad
/// one is reported with its key.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    algorithm: Value,
    absolute_limit: Value,
    relative_limit: Value,
    rebalance_threshold: Value,
    max_simultaneous_rebalance: Value,
}

/// A positive integer that fits in `u32`, or the default when unset.
fn positive_integer(key: &str, value: &Value, default: u32) -> Result<u32, String> {
    if value.is_null() {
        return Ok(default);
    }
    match value.as_u64() {
        Some(n) if n >= 1 && n <= u64::from(u32::MAX) => Ok(n as u32),
        _ => Err(format!("invalid config: {key} must be an integer from 1 to {}, got {value}", u32::MAX)),
    }
}

impl Config {
    /// Parses and validates JSON text. Empty text or `null` gives the
    /// defaults; an unknown key or a bad value is an error naming the key.
    pub fn parse(text: &str) -> Result<Config, String> {
        let raw: RawConfig = shardalloc_guest::config::parse(text)?;
        let defaults = Config::default();
        let algorithm = match &raw.algorithm {
            Value::Null => defaults.algorithm,
            Value::String(s) if s == "current" => Algorithm::Current,
            Value::String(s) if s == "classic" => Algorithm::Classic,
            other => {
                return Err(format!("invalid config: algorithm must be \"current\" or \"classic\", got {other}"));
            }
        };
        let relative_limit = match &raw.relative_limit {
            Value::Null => defaults.relative_limit,
            value => match value.as_f64() {
                Some(f) if f > 0.0 && f <= 1.0 => f,
                _ => {
                    return Err(format!(
                        "invalid config: relative_limit must be a number greater than 0 and at most 1, got {value}"
                    ));
                }
            },
        };
        Ok(Config {
            algorithm,
            absolute_limit: positive_integer("absolute_limit", &raw.absolute_limit, defaults.absolute_limit)?,
            relative_limit,
            rebalance_threshold: positive_integer(
                "rebalance_threshold",
                &raw.rebalance_threshold,
                defaults.rebalance_threshold,
            )?,
            max_simultaneous_rebalance: positive_integer(
                "max_simultaneous_rebalance",
                &raw.max_simultaneous_rebalance,
                defaults.max_simultaneous_rebalance,
            )?,
        })
    }

    /// The current algorithm's per-round limit for `shards` allocated shards:
    /// `max(1, min(floor(relative_limit × shards), absolute_limit))`.
    pub fn limit(&self, shards: usize) -> usize {
        // Truncation toward zero, as Akka's `(relativeLimit * n).toInt`.
        let relative = (self.relative_limit * shards as f64) as usize;
        relative.min(self.absolute_limit as usize).max(1)
    }
}

/// JSON Schema (draft 2020-12) of the configuration.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "least-shard strategy configuration",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "algorithm": {
      "description": "Rebalance algorithm: \"current\" (Akka 2.6.10+, two phases, bounded per round) or \"classic\" (Akka's original, threshold based).",
      "enum": ["current", "classic"],
      "default": "current"
    },
    "absolute_limit": {
      "description": "current: most shards one rebalance round moves.",
      "type": "integer",
      "minimum": 1,
      "maximum": 4294967295,
      "default": 20
    },
    "relative_limit": {
      "description": "current: most shards one rebalance round moves, as a fraction of all allocated shards (rounded down, at least 1).",
      "type": "number",
      "exclusiveMinimum": 0,
      "maximum": 1,
      "default": 0.1
    },
    "rebalance_threshold": {
      "description": "classic: rebalance only when the most loaded region has more than this many shards over the least loaded one.",
      "type": "integer",
      "minimum": 1,
      "maximum": 4294967295,
      "default": 1
    },
    "max_simultaneous_rebalance": {
      "description": "classic: most shards moving at once, including those already moving.",
      "type": "integer",
      "minimum": 1,
      "maximum": 4294967295,
      "default": 3
    }
  }
}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_follows_akka() {
        let c = Config::default();
        assert_eq!(c.limit(0), 1);
        assert_eq!(c.limit(9), 1);
        assert_eq!(c.limit(10), 1);
        assert_eq!(c.limit(55), 5);
        assert_eq!(c.limit(200), 20);
        assert_eq!(c.limit(100_000), 20);
        let c = Config { absolute_limit: 5, relative_limit: 0.3, ..Config::default() };
        assert_eq!(c.limit(10), 3);
        let c = Config { absolute_limit: 1000, relative_limit: 1.0, ..Config::default() };
        assert_eq!(c.limit(10), 10);
    }

    #[test]
    fn schema_is_json() {
        let schema: Value = serde_json::from_str(CONFIG_SCHEMA).unwrap();
        let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 5);
    }
}
