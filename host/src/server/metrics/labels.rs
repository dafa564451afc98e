//! The metrics' label values: the closed word sets (`label_words!`) and
//! text from outside (`LabelText`, escaped as the text format requires).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::strategy::{FaultKind, StrategyError};

/// Defines a label value: a closed set of words.
macro_rules! label_words {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[doc = $word] $variant,)+
        }

        impl $name {
            /// Every word of the set.
            #[allow(dead_code, reason = "read for the sets a deleted type's series are removed from")]
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The word as the label spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

label_words! {
    /// Why a shard got its home.
    Decision { Placement => "placement", Strategy => "strategy", Fallback => "fallback", }
}

label_words! {
    /// Why a strategy's answer was replaced by the fallback.
    FallbackReason {
        Refused => "error",
        Invalid => "invalid-answer",
        Trap => "trap",
        Deadline => "deadline",
        Memory => "memory",
        Rebalance => "rebalance",
    }
}

label_words! {
    /// A leadership this node won or lost.
    LeadershipChange { Won => "won", Lost => "lost", }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct LeadershipLabels {
    pub(super) change: LeadershipChange,
}

label_words! {
    /// A hand-off step or end.
    HandOffOutcome { Started => "started", Stopping => "stopping", TimedOut => "timed-out", OwnerGone => "owner-gone", }
}

label_words! {
    /// A region's status, draining counted apart.
    RegionGauge { Up => "up", Unreachable => "unreachable", Leaving => "leaving", Draining => "draining", }
}

label_words! {
    /// A strategy call.
    Call { Allocate => "allocate", Rebalance => "rebalance", }
}

/// A label value from outside (a type name, a region address), escaped as
/// the text format requires: `\`, `"` and a newline (prometheus-client
/// writes label values as given).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelText(String);

impl From<&str> for LabelText {
    fn from(text: &str) -> Self {
        LabelText(text.to_owned())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

impl From<&StrategyError> for FallbackReason {
    fn from(error: &StrategyError) -> Self {
        match error {
            StrategyError::Refused(_) => FallbackReason::Refused,
            StrategyError::Invalid(_) => FallbackReason::Invalid,
            StrategyError::Fault { kind: FaultKind::Trap, .. } => FallbackReason::Trap,
            StrategyError::Fault { kind: FaultKind::Deadline, .. } => FallbackReason::Deadline,
            StrategyError::Fault { kind: FaultKind::Memory, .. } => FallbackReason::Memory,
        }
    }
}
