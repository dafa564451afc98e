//! The region-session protocol: what a region and the node say to each other
//! over the WebSocket at `/v1/regions/connect`.
//!
//! Every message is one binary WebSocket frame holding one value encoded with
//! [postcard](https://docs.rs/postcard) (varint integers, length-prefixed
//! strings, enums as a varint variant index followed by the fields in order).
//! `docs/protocol.md` lists every message, field by field, for clients in
//! other languages.
//!
//! ```text
//!  region                                   node
//!  Hello{protocol, entity_type} ──────────▶
//!                                ◀──────── Welcome{protocol} | Refused{reason} + close
//!  Register{…, sequence} ─────────────────▶
//!                                ◀──────── Registered{incarnation, sequence, lease_ms, heartbeat_interval_ms}
//!  Heartbeat{sequence, metrics} ──────────▶ (every heartbeat_interval_ms)
//!  Load(LoadReport) ──────────────────────▶ (version 2: right after a heartbeat)
//!                                ◀──────── HeartbeatAck{incarnation, sequence, lease_ms}
//!  GetShardHome{shard} ───────────────────▶
//!                                ◀──────── ShardHome{shard, home}
//!                                ◀──────── BeginHandOff{shard}   (to every region)
//!  BeginHandOffAck{shard} ────────────────▶
//!                                ◀──────── HandOff{shard}        (to the owner)
//!  ShardStopped{shard} ───────────────────▶
//! ```
//!
//! The first frame is always a [`Hello`]; its layout (a varint protocol
//! number first) never changes, so a node can refuse a client of another
//! version clearly. A node speaks every version from
//! [`OLDEST_PROTOCOL_VERSION`] to [`PROTOCOL_VERSION`] and welcomes a region
//! in the version its `Hello` names, so an older region client still
//! connects. A session serves one entity type; a region serving several
//! types opens one session per type.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attributes::ShardAttributes;
use crate::capacity::RegionCapacity;

/// A time or a duration in milliseconds, as the protocol's `*_ms` fields
/// carry them and as the sans-I/O cores (the node's coordinator, the
/// region's core) take the time: a value that is only compared and added to.
pub type Millis = u64;

/// The protocol version this crate speaks. Version 2 added
/// [`RegionMessage::Load`]; version 3 [`NodeMessage::ShardHomeEpoch`],
/// which the node sends instead of `ShardHome`; version 4
/// [`NodeMessage::RegionRemoved`], which older regions are not sent;
/// version 5 [`RegionMessage::GetShardHomeWithAttributes`] and
/// [`RegionMessage::RegisterWithCapacity`].
pub const PROTOCOL_VERSION: u32 = 5;

/// The oldest protocol version a node still serves: a region that says
/// `Hello{protocol: 1}` is welcomed in version 1 and never sends a load
/// report.
pub const OLDEST_PROTOCOL_VERSION: u32 = 1;

/// Most shards a [`LoadReport`] names one by one; the region's other
/// shards go into its `rest`. A report naming more is ignored whole.
pub const MAX_LOAD_SHARDS: usize = 1024;

/// The shortest window a load report may cover: rates over less are mostly
/// noise, and the node ignores them. A region keeps gathering until its
/// window is at least this long.
pub const MIN_LOAD_WINDOW_MS: Millis = 500;

/// The longest window a load report may cover: a longer one (gathered
/// across a disconnection or a pause) describes a placement that may no
/// longer hold, and the node ignores it as too old. A region drops what it
/// gathered over a longer window and starts a new one.
pub const MAX_LOAD_WINDOW_MS: Millis = 60_000;

/// The largest frame either side accepts, in bytes. A larger one ends the
/// session.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// Most frames either side writes before one flush: what is queued goes out
/// together, and a steady stream still reaches the peer in bounded batches.
pub const FRAMES_PER_FLUSH: usize = 256;

/// The path of the region-session WebSocket.
pub const CONNECT_PATH: &str = "/v1/regions/connect";

/// The longest entity type name, in characters.
pub const MAX_TYPE_NAME_CHARS: usize = 128;

/// The longest region address, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

/// The longest shard id, in bytes.
pub const MAX_SHARD_ID_BYTES: usize = 256;

/// Checks an entity type name: 1 to [`MAX_TYPE_NAME_CHARS`] characters of
/// `A-Z a-z 0-9 . _ -`. The error names the rule.
pub fn check_type_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_TYPE_NAME_CHARS || !name.chars().all(allowed) {
        return Err(format!(
            "an entity type name is 1 to {MAX_TYPE_NAME_CHARS} characters of A-Z a-z 0-9 . _ -, not {name:?}"
        ));
    }
    Ok(())
}

/// Checks a region address: 1 to [`MAX_ADDRESS_BYTES`] bytes of printable
/// ASCII without spaces (`host:port`, a URI). The error names the rule.
pub fn check_address(address: &str) -> Result<(), String> {
    if address.is_empty() || address.len() > MAX_ADDRESS_BYTES || !address.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "a region address is 1 to {MAX_ADDRESS_BYTES} bytes of printable ASCII without spaces, not {address:?}"
        ));
    }
    Ok(())
}

/// Checks a shard id: 1 to [`MAX_SHARD_ID_BYTES`] bytes, no control
/// characters. The error names the rule.
pub fn check_shard_id(shard: &str) -> Result<(), String> {
    match shard.len() {
        0 => Err("a shard id is empty".to_owned()),
        n if n > MAX_SHARD_ID_BYTES => {
            Err(format!("a shard id of {n} bytes is longer than {MAX_SHARD_ID_BYTES} bytes"))
        }
        _ if shard.chars().any(char::is_control) => {
            Err(format!("a shard id must not contain control characters: {shard:?}"))
        }
        _ => Ok(()),
    }
}

/// The first frame a region sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version the region speaks ([`PROTOCOL_VERSION`]).
    pub protocol: u32,
    /// The entity type this session serves.
    pub entity_type: String,
}

impl Hello {
    /// Whether a node serves the version this `Hello` asks for
    /// ([`OLDEST_PROTOCOL_VERSION`] to [`PROTOCOL_VERSION`]); the refusal
    /// names both ends. The inbound half of the version rules, beside the
    /// outbound one ([`NodeMessage::for_protocol`]).
    pub fn check_protocol(&self) -> Result<(), String> {
        if (OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&self.protocol) {
            return Ok(());
        }
        Err(format!(
            "protocol version {} is not supported; this node speaks versions {OLDEST_PROTOCOL_VERSION} to \
             {PROTOCOL_VERSION}",
            self.protocol
        ))
    }
}

/// A region's registration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Register {
    /// The region's address, unique in the cluster; other regions reach it by it.
    pub address: String,
    /// Chosen at start-up, greater for every restart.
    pub incarnation: u64,
    /// Cluster roles.
    pub roles: Vec<String>,
    /// Application version.
    pub app_version: String,
    /// Labels (zone, dc…), handed to the strategy.
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    pub proxy_only: bool,
    /// Echoed in [`NodeMessage::Registered`]: the lease counts from this send.
    pub sequence: u64,
}

/// One shard's load in a [`LoadReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardLoad {
    /// The shard id.
    pub shard: String,
    /// Its load over the report's window, in units per second (finite, not
    /// negative).
    pub load: f64,
}

/// The load a region carried over the window that ended when it sent the
/// report (protocol version 2): each named shard's own, and the rest
/// together.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LoadReport {
    /// How long the window was, in milliseconds of the region's clock:
    /// [`MIN_LOAD_WINDOW_MS`] to [`MAX_LOAD_WINDOW_MS`].
    pub window_ms: Millis,
    /// The most loaded shards, at most [`MAX_LOAD_SHARDS`], most loaded
    /// first.
    pub shards: Vec<ShardLoad>,
    /// The load of the region's other shards together, in units per second;
    /// the node spreads it evenly over the shards the region holds and did
    /// not name.
    pub rest: f64,
}

impl LoadReport {
    /// Checks the report's bounds; the error names the rule broken.
    pub fn check(&self) -> Result<(), String> {
        if self.window_ms < MIN_LOAD_WINDOW_MS {
            return Err(format!("a window of {} ms is shorter than {MIN_LOAD_WINDOW_MS} ms", self.window_ms));
        }
        if self.window_ms > MAX_LOAD_WINDOW_MS {
            return Err(format!(
                "a window of {} ms is longer than {MAX_LOAD_WINDOW_MS} ms: the loads are too old",
                self.window_ms
            ));
        }
        if self.shards.len() > MAX_LOAD_SHARDS {
            return Err(format!("{} shards named; at most {MAX_LOAD_SHARDS}", self.shards.len()));
        }
        let bad = |load: f64| !load.is_finite() || load < 0.0;
        if let Some(entry) = self.shards.iter().find(|e| bad(e.load)) {
            return Err(format!("shard {:?} has load {}; a load is finite and not negative", entry.shard, entry.load));
        }
        if bad(self.rest) {
            return Err(format!("the rest has load {}; a load is finite and not negative", self.rest));
        }
        Ok(())
    }

    /// Folds a `later` report into this one: one report over both windows,
    /// what a node does with reports that come faster than it takes them.
    /// Each rate is weighted by its report's window (a shard one report
    /// does not name counts 0 there: its load is in that report's rest), so
    /// the total load is kept; at most [`MAX_LOAD_SHARDS`] stay named (the
    /// lightest of the others join the rest), and the window is capped at
    /// [`MAX_LOAD_WINDOW_MS`]. Both reports pass [`LoadReport::check`]; so
    /// does the result.
    pub fn coalesce(&mut self, later: LoadReport) {
        let (w1, w2) = (self.window_ms as f64, later.window_ms as f64);
        let window = w1 + w2;
        let mut named: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
        for (shards, weight) in [(std::mem::take(&mut self.shards), w1), (later.shards, w2)] {
            for entry in shards {
                *named.entry(entry.shard).or_default() += entry.load * weight / window;
            }
        }
        let mut rest = self.rest * w1 / window + later.rest * w2 / window;
        let mut shards: Vec<ShardLoad> = named.into_iter().map(|(shard, load)| ShardLoad { shard, load }).collect();
        shards.sort_by(|a, b| b.load.total_cmp(&a.load).then_with(|| a.shard.cmp(&b.shard)));
        rest += shards.iter().skip(MAX_LOAD_SHARDS).map(|e| e.load).sum::<f64>();
        shards.truncate(MAX_LOAD_SHARDS);
        self.shards = shards;
        self.rest = rest;
        self.window_ms = self.window_ms.saturating_add(later.window_ms).min(MAX_LOAD_WINDOW_MS);
    }
}

/// What a region sends after its [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RegionMessage {
    /// Registers (first) or re-registers this session's region.
    Register(Register),
    /// Alive; renews the lease. `sequence` increases with every heartbeat.
    Heartbeat {
        /// Echoed in [`NodeMessage::HeartbeatAck`].
        sequence: u64,
        /// Gauges for the strategy (`mem-used-ratio`, `cpu`, custom ones);
        /// non-finite values are dropped.
        metrics: BTreeMap<String, f64>,
    },
    /// Where does this shard live?
    GetShardHome {
        /// The shard id (1 to 256 bytes).
        shard: String,
    },
    /// The region stopped routing to the shard and buffers its messages.
    BeginHandOffAck {
        /// The shard.
        shard: String,
    },
    /// The region stopped the shard it was told to hand off.
    ShardStopped {
        /// The shard.
        shard: String,
    },
    /// The region wants to leave: its shards are handed off, then it gets
    /// [`NodeMessage::LeaveDone`].
    Leave,
    /// The region asks to be drained (`true`) or undrained (`false`).
    Drain {
        /// Drain or undrain.
        draining: bool,
    },
    /// The load the region carried since its last report (protocol
    /// version 2; sent right after a `Heartbeat`). Never answered.
    Load(LoadReport),
    /// `GetShardHome` with the shard's attributes as the application gives
    /// them (protocol version 5): the node keeps them when the shard has
    /// none yet (an operator's, or another region's first, stay). Answered
    /// as `GetShardHome`. A region sends it only when it has attributes
    /// for the shard.
    GetShardHomeWithAttributes {
        /// The shard id (1 to 256 bytes).
        shard: String,
        /// Its attributes (checked when the frame is read:
        /// [`crate::attributes`]).
        attributes: ShardAttributes,
    },
    /// `Register` with the region's declared capacity (protocol version 5):
    /// named quantities it can carry, handed to strategies. Answered as
    /// `Register`. A region sends it only when it declares a capacity; a
    /// later registration of the same incarnation replaces it (a
    /// `Register` clears it).
    RegisterWithCapacity {
        /// The registration.
        register: Register,
        /// Its capacity (checked when the frame is read:
        /// [`crate::capacity`]).
        capacity: RegionCapacity,
    },
}

impl RegionMessage {
    /// Whether a region speaking `protocol` may send this message: a
    /// `Load` needs version 2. The refusal says which version it needs.
    pub fn check_protocol(&self, protocol: u32) -> Result<(), String> {
        match self {
            RegionMessage::Load(_) if protocol < 2 => {
                Err(format!("a Load in protocol version {protocol}; it needs version 2"))
            }
            RegionMessage::GetShardHomeWithAttributes { .. } if protocol < 5 => {
                Err(format!("a GetShardHomeWithAttributes in protocol version {protocol}; it needs version 5"))
            }
            RegionMessage::RegisterWithCapacity { .. } if protocol < 5 => {
                Err(format!("a RegisterWithCapacity in protocol version {protocol}; it needs version 5"))
            }
            _ => Ok(()),
        }
    }

    /// The message's name, as `docs/protocol.md` lists it.
    pub fn name(&self) -> &'static str {
        match self {
            RegionMessage::Register(_) => "Register",
            RegionMessage::Heartbeat { .. } => "Heartbeat",
            RegionMessage::GetShardHome { .. } => "GetShardHome",
            RegionMessage::BeginHandOffAck { .. } => "BeginHandOffAck",
            RegionMessage::ShardStopped { .. } => "ShardStopped",
            RegionMessage::Leave => "Leave",
            RegionMessage::Drain { .. } => "Drain",
            RegionMessage::Load(_) => "Load",
            RegionMessage::GetShardHomeWithAttributes { .. } => "GetShardHomeWithAttributes",
            RegionMessage::RegisterWithCapacity { .. } => "RegisterWithCapacity",
        }
    }
}

/// What the node sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeMessage {
    /// The [`Hello`] was accepted.
    Welcome {
        /// The node's protocol version.
        protocol: u32,
    },
    /// The session is refused (version, type, authentication); the node
    /// closes it next.
    Refused {
        /// Why.
        reason: String,
    },
    /// Registration accepted; heartbeat every `heartbeat_interval_ms`. The
    /// region holds a lease of `lease_ms` from when it sent the registration
    /// numbered `sequence`, and must stop all its shards when it runs out
    /// unrenewed.
    Registered {
        /// The incarnation registered.
        incarnation: u64,
        /// The registration's sequence.
        sequence: u64,
        /// The lease.
        lease_ms: u64,
        /// How often to heartbeat.
        heartbeat_interval_ms: u64,
    },
    /// Registration refused (malformed, stale incarnation, too many regions).
    RegisterRefused {
        /// Why.
        reason: String,
    },
    /// Heartbeat `sequence` arrived: the lease runs `lease_ms` from its send.
    HeartbeatAck {
        /// The incarnation.
        incarnation: u64,
        /// The heartbeat's sequence.
        sequence: u64,
        /// The lease.
        lease_ms: u64,
    },
    /// The node does not know this region's incarnation: register again.
    NotRegistered,
    /// Where a shard lives.
    ShardHome {
        /// The shard.
        shard: String,
        /// Its home region's address.
        home: String,
    },
    /// A new shard was refused (a limit, a bad id).
    ShardRefused {
        /// The shard.
        shard: String,
        /// Why.
        reason: String,
    },
    /// Stop routing to the shard, buffer its messages, acknowledge.
    BeginHandOff {
        /// The shard.
        shard: String,
    },
    /// Stop the shard, then send `ShardStopped`.
    HandOff {
        /// The shard.
        shard: String,
    },
    /// An operator's placement changed (`None`: removed).
    PlacementChanged {
        /// The shard.
        shard: String,
        /// Its target region.
        target: Option<String>,
    },
    /// The leaving region holds no shards any more and may stop.
    LeaveDone,
    /// The node is shutting down; reconnect (with backoff) to it or its successor.
    ShuttingDown,
    /// Answers a `Hello` on a node that does not lead: connect to the
    /// leader at `leader` (its base URL, `http(s)://host:port`) instead.
    /// The node closes the session next. Added within protocol version 1:
    /// a new variant at the end, which older regions treat as an unreadable
    /// frame and answer by reconnecting.
    Redirect {
        /// The leader's base URL.
        leader: String,
    },
    /// Where a shard lives, and its epoch (protocol version 3; older
    /// regions get a `ShardHome` instead): every change of the shard's home
    /// gives it a greater epoch, so the region it names may fence writes to
    /// its own storage with it (a write conditional on no greater epoch).
    ShardHomeEpoch {
        /// The shard.
        shard: String,
        /// Its home region's address.
        home: String,
        /// The shard's epoch on that home.
        epoch: u64,
    },
    /// A region of the type was removed: it left, it was silent past the
    /// removal timeout, or it restarted (a new incarnation at its address
    /// while the old one held shards). Protocol version 4; older regions
    /// are not told. Its shards are homed again, so a region drops every
    /// cached home on `address` and asks again before its next message there.
    RegionRemoved {
        /// The removed region's address.
        address: String,
    },
}

/// The longest lease (and heartbeat interval) a node may grant: one day. A
/// region refuses a `Registered` or `HeartbeatAck` past it as a protocol
/// violation (a lease of 2^64 − 1 ms would never fence the region).
pub const MAX_LEASE_MS: u64 = 86_400_000;

impl NodeMessage {
    /// Checks what a region relies on in a message from the node, the same
    /// in every client (contracts/region-core/limits.txt): a lease and a
    /// heartbeat interval from 1 ms to [`MAX_LEASE_MS`], a shard id of 1 to
    /// [`MAX_SHARD_ID_BYTES`] bytes, and no empty home or region address.
    /// The error names the field and the rule.
    pub fn check_limits(&self) -> Result<(), String> {
        let duration = |what: &str, value: u64| {
            if (1..=MAX_LEASE_MS).contains(&value) {
                Ok(())
            } else {
                Err(format!("{what} {value} is out of range 1..={MAX_LEASE_MS}"))
            }
        };
        let shard = |what: &str, id: &str| {
            if id.is_empty() || id.len() > MAX_SHARD_ID_BYTES {
                Err(format!("{what} of {} bytes is out of range 1..={MAX_SHARD_ID_BYTES}", id.len()))
            } else {
                Ok(())
            }
        };
        let address = |what: &str, value: &str| {
            if value.is_empty() { Err(format!("{what} is empty")) } else { Ok(()) }
        };
        match self {
            NodeMessage::Registered { lease_ms, heartbeat_interval_ms, .. } => {
                duration("Registered.lease_ms", *lease_ms)?;
                duration("Registered.heartbeat_interval_ms", *heartbeat_interval_ms)
            }
            NodeMessage::HeartbeatAck { lease_ms, .. } => duration("HeartbeatAck.lease_ms", *lease_ms),
            NodeMessage::ShardHome { shard: id, home } => {
                shard("ShardHome.shard", id)?;
                address("ShardHome.home", home)
            }
            NodeMessage::ShardHomeEpoch { shard: id, home, .. } => {
                shard("ShardHomeEpoch.shard", id)?;
                address("ShardHomeEpoch.home", home)
            }
            NodeMessage::ShardRefused { shard: id, .. } => shard("ShardRefused.shard", id),
            NodeMessage::BeginHandOff { shard: id } => shard("BeginHandOff.shard", id),
            NodeMessage::HandOff { shard: id } => shard("HandOff.shard", id),
            NodeMessage::PlacementChanged { shard: id, .. } => shard("PlacementChanged.shard", id),
            NodeMessage::RegionRemoved { address: removed } => address("RegionRemoved.address", removed),
            _ => Ok(()),
        }
    }

    /// The message as a region speaking `protocol` reads it: a
    /// `ShardHomeEpoch` is a `ShardHome` before version 3; a
    /// `RegionRemoved` is not sent before version 4 (`None`).
    pub fn for_protocol(self, protocol: u32) -> Option<NodeMessage> {
        match self {
            NodeMessage::ShardHomeEpoch { shard, home, .. } if protocol < 3 => {
                Some(NodeMessage::ShardHome { shard, home })
            }
            NodeMessage::RegionRemoved { .. } if protocol < 4 => None,
            other => Some(other),
        }
    }
}

/// A frame that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Larger than [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes is larger than the limit of {MAX_FRAME_BYTES}")]
    TooLarge(usize),
    /// Not a valid encoding of the expected message.
    #[error("malformed frame: {0}")]
    Malformed(#[from] postcard::Error),
    /// Bytes left after the message.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encodes a message as one frame.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let bytes = postcard::to_stdvec(message)?;
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Decodes one frame; the whole frame must be one message.
pub fn decode<'a, T: Deserialize<'a>>(frame: &'a [u8]) -> Result<T, FrameError> {
    if frame.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(frame.len()));
    }
    let (message, rest) = postcard::take_from_bytes(frame)?;
    if !rest.is_empty() {
        return Err(FrameError::Trailing(rest.len()));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_a_node_serves_and_what_each_may_send() {
        let hello = |protocol| Hello { protocol, entity_type: "cart".into() };
        for protocol in OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION {
            assert_eq!(hello(protocol).check_protocol(), Ok(()));
        }
        for protocol in [0, PROTOCOL_VERSION + 1] {
            let refused = hello(protocol).check_protocol().unwrap_err();
            assert!(refused.contains(&format!("protocol version {protocol} is not supported")), "{refused}");
            assert!(refused.contains(&format!("versions 1 to {PROTOCOL_VERSION}")), "{refused}");
        }
        let load = RegionMessage::Load(LoadReport { window_ms: 1_000, shards: vec![], rest: 0.0 });
        assert_eq!(load.check_protocol(1), Err("a Load in protocol version 1; it needs version 2".into()));
        assert_eq!(load.check_protocol(2), Ok(()));
        assert_eq!(RegionMessage::Leave.check_protocol(1), Ok(()));
        let shard = "s".to_owned();
        let with = RegionMessage::GetShardHomeWithAttributes { shard, attributes: ShardAttributes::default() };
        assert!(with.check_protocol(4).unwrap_err().contains("it needs version 5"));
        assert_eq!(with.check_protocol(5), Ok(()));
    }

    #[test]
    fn coalesced_reports_keep_the_load_over_both_windows() {
        let report = |window_ms, shards: &[(&str, f64)], rest| LoadReport {
            window_ms,
            shards: shards.iter().map(|(s, l)| ShardLoad { shard: (*s).into(), load: *l }).collect(),
            rest,
        };
        let mut first = report(1_000, &[("a", 8.0), ("b", 4.0)], 2.0);
        first.coalesce(report(3_000, &[("a", 4.0), ("c", 16.0)], 6.0));
        // a: (8·1 + 4·3)/4; b: 4·1/4 (its later load is in the later rest);
        // c: 16·3/4; the rest: (2·1 + 6·3)/4.
        assert_eq!(first, report(4_000, &[("c", 12.0), ("a", 5.0), ("b", 1.0)], 5.0));
        assert_eq!(first.check(), Ok(()));

        // Past the named bound, the lightest join the rest; the window is capped.
        let many = |prefix: &str, load| {
            let names: Vec<String> = (0..MAX_LOAD_SHARDS).map(|i| format!("{prefix}{i:04}")).collect();
            report(MAX_LOAD_WINDOW_MS, &names.iter().map(|s| (s.as_str(), load)).collect::<Vec<_>>(), 1.0)
        };
        let mut heavy = many("h", 4.0);
        heavy.coalesce(many("l", 2.0));
        assert_eq!(heavy.shards.len(), MAX_LOAD_SHARDS);
        assert!(heavy.shards.iter().all(|e| e.shard.starts_with('h') && e.load == 2.0));
        assert_eq!(heavy.rest, 1.0 + MAX_LOAD_SHARDS as f64 * 1.0, "the light ones' load is kept, in the rest");
        assert_eq!(heavy.window_ms, MAX_LOAD_WINDOW_MS);
        assert_eq!(heavy.check(), Ok(()));
    }

    #[test]
    fn messages_round_trip() {
        let messages = [
            RegionMessage::Register(Register {
                address: "a".into(),
                incarnation: 3,
                labels: [("zone".to_string(), "eu".to_string())].into(),
                sequence: 1,
                ..Register::default()
            }),
            RegionMessage::Heartbeat { sequence: 2, metrics: [("cpu".to_string(), 0.5)].into() },
            RegionMessage::GetShardHome { shard: "42".into() },
            RegionMessage::Leave,
        ];
        for message in messages {
            assert_eq!(decode::<RegionMessage>(&encode(&message).unwrap()).unwrap(), message);
        }
    }

    /// The layouts other-language clients rely on (docs/protocol.md).
    #[test]
    fn wire_layout_is_pinned() {
        let hello = Hello { protocol: 1, entity_type: "cart".into() };
        assert_eq!(encode(&hello).unwrap(), [1, 4, b'c', b'a', b'r', b't']);
        assert_eq!(encode(&RegionMessage::GetShardHome { shard: "7".into() }).unwrap(), [2, 1, b'7']);
        assert_eq!(encode(&RegionMessage::Leave).unwrap(), [5]);
        let load = LoadReport { window_ms: 1000, shards: vec![ShardLoad { shard: "7".into(), load: 2.0 }], rest: 0.0 };
        let mut bytes = vec![7, 0xE8, 0x07, 1, 1, b'7'];
        bytes.extend(2.0f64.to_le_bytes());
        bytes.extend(0.0f64.to_le_bytes());
        assert_eq!(encode(&RegionMessage::Load(load)).unwrap(), bytes);
        let home = NodeMessage::ShardHome { shard: "7".into(), home: "b".into() };
        assert_eq!(encode(&home).unwrap(), [6, 1, b'7', 1, b'b']);
        assert_eq!(
            encode(&NodeMessage::PlacementChanged { shard: "7".into(), target: None }).unwrap(),
            [10, 1, b'7', 0]
        );
    }

    #[test]
    fn a_home_with_its_epoch_is_a_plain_home_before_version_3() {
        let home = NodeMessage::ShardHomeEpoch { shard: "7".into(), home: "b".into(), epoch: 300 };
        assert_eq!(encode(&home).unwrap(), [14, 1, b'7', 1, b'b', 0xAC, 0x02]);
        let plain = NodeMessage::ShardHome { shard: "7".into(), home: "b".into() };
        assert_eq!(home.clone().for_protocol(2), Some(plain.clone()));
        assert_eq!(home.clone().for_protocol(1), Some(plain.clone()));
        assert_eq!(home.clone().for_protocol(3), Some(home.clone()));
        assert_eq!(plain.clone().for_protocol(3), Some(plain));
        let removed = NodeMessage::RegionRemoved { address: "10.0.0.2:2552".into() };
        assert_eq!(removed.clone().for_protocol(3), None, "a version 3 region is not told");
        assert_eq!(removed.clone().for_protocol(4), Some(removed));
    }

    #[test]
    fn names_follow_their_rules() {
        for good in ["cart", "Cart.v2", "a_b-c", &"x".repeat(128)] {
            assert_eq!(check_type_name(good), Ok(()), "{good}");
        }
        for bad in ["", "a b", "q\"x\\", "evil\n", "ümlaut", &"x".repeat(129), "a/b"] {
            let error = check_type_name(bad).unwrap_err();
            assert!(error.contains("A-Z a-z 0-9"), "{error}");
        }
        for good in ["10.0.0.1:2552", "akka://sys@host:1", "sim-1", &"a".repeat(256)] {
            assert_eq!(check_address(good), Ok(()), "{good}");
        }
        for bad in ["", "a b", "evil\"} 1\nx", "tab\t", "é", &"a".repeat(257)] {
            assert!(check_address(bad).unwrap_err().contains("printable ASCII"), "{bad:?}");
        }
        assert_eq!(check_shard_id("42"), Ok(()));
        assert_eq!(check_shard_id("tenant/ü 7"), Ok(()));
        for bad in ["", "a\u{1b}[2J", "two\nlines", "nul\0", &"s".repeat(257)] {
            assert!(check_shard_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_load_report_outside_its_bounds_names_the_rule() {
        let good = LoadReport { window_ms: 1_000, shards: vec![ShardLoad { shard: "a".into(), load: 1.5 }], rest: 3.0 };
        assert_eq!(good.check(), Ok(()));
        let cases = [
            (LoadReport { window_ms: 499, ..good.clone() }, "shorter than 500 ms"),
            (LoadReport { window_ms: 60_001, ..good.clone() }, "too old"),
            (LoadReport { rest: f64::NAN, ..good.clone() }, "the rest has load NaN"),
            (
                LoadReport { shards: vec![ShardLoad { shard: "a".into(), load: -1.0 }], ..good.clone() },
                "shard \"a\" has load -1",
            ),
            (
                LoadReport {
                    shards: vec![ShardLoad { shard: "a".into(), load: 1.0 }; MAX_LOAD_SHARDS + 1],
                    ..good.clone()
                },
                "1025 shards named; at most 1024",
            ),
        ];
        for (report, rule) in cases {
            let error = report.check().unwrap_err();
            assert!(error.contains(rule), "{error} should say {rule}");
        }
    }

    #[test]
    fn garbage_and_trailing_bytes_are_refused() {
        assert!(matches!(decode::<RegionMessage>(&[200, 1]), Err(FrameError::Malformed(_))));
        assert!(matches!(decode::<RegionMessage>(&[5, 0]), Err(FrameError::Trailing(1))));
        assert!(matches!(decode::<RegionMessage>(&vec![0; MAX_FRAME_BYTES + 1]), Err(FrameError::TooLarge(_))));
    }
}
