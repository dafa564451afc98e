//! [`StrategySource`]: where a strategy's component comes from, parsed once
//! at the edge (a CLI flag, the TOML file, a REST body, the store) and
//! passed on typed.
//!
//! | source | written as | accepted from |
//! |---|---|---|
//! | [`StrategySource::Builtin`] | `least-shard`, `hash`, `capacity`, `zone` | everywhere |
//! | [`StrategySource::Digest`] | `sha256:<64 hex digits>` (an uploaded component) | everywhere |
//! | [`StrategySource::File`] | a path to a `.wasm` component | CLI flags and the TOML file only |
//!
//! A REST caller can never make the node read a file: [`StrategySource::parse_api`]
//! refuses anything but a built-in's name or a digest. The node stores a
//! type's strategy as a built-in's name or a digest (a file named at start-up
//! is uploaded first), so [`StrategySource::parse_stored`] takes those two.

use std::fmt;
use std::path::PathBuf;

use super::builtin;

/// The prefix of a component digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// `sha256:<hex>` of a component's bytes: its identity everywhere (the
/// engine, the store's blobs, the REST API).
pub fn digest_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hex = String::with_capacity(DIGEST_PREFIX.len() + 64);
    hex.push_str(DIGEST_PREFIX);
    for byte in Sha256::digest(bytes) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Where a strategy's component comes from. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategySource {
    /// A built-in strategy, embedded in the node, by name.
    Builtin(String),
    /// An uploaded component, by `sha256:…` digest of its bytes.
    Digest(String),
    /// A component file (only from the command line or the TOML file).
    File(PathBuf),
}

/// Why a strategy name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Neither a built-in's name nor a digest (nor, where allowed, a file).
    #[error("unknown strategy {given:?}: name a built-in ({builtins}){or_file}")]
    Unknown {
        /// What was given.
        given: String,
        /// The built-ins, comma-separated.
        builtins: String,
        /// How else it could be named here.
        or_file: &'static str,
    },
    /// It starts like a digest but is not one.
    #[error("{0:?} is not a component digest: expected sha256: followed by 64 lowercase hex digits")]
    BadDigest(String),
    /// Empty.
    #[error("the strategy name is empty")]
    Empty,
}

fn unknown(given: &str, or_file: &'static str) -> SourceError {
    SourceError::Unknown { given: given.to_owned(), builtins: builtin::names().collect::<Vec<_>>().join(", "), or_file }
}

fn digest(text: &str) -> Result<StrategySource, SourceError> {
    let hex = &text[DIGEST_PREFIX.len()..];
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(SourceError::BadDigest(text.to_owned()));
    }
    Ok(StrategySource::Digest(text.to_owned()))
}

impl StrategySource {
    /// A built-in by name, if there is one by that name.
    pub fn builtin(name: &str) -> Option<Self> {
        builtin::component_bytes(name).map(|_| StrategySource::Builtin(name.to_owned()))
    }

    /// A built-in's name or a digest; `None` for anything else.
    fn parse_named(text: &str) -> Option<Result<Self, SourceError>> {
        if text.is_empty() {
            return Some(Err(SourceError::Empty));
        }
        if let Some(source) = Self::builtin(text) {
            return Some(Ok(source));
        }
        text.starts_with(DIGEST_PREFIX).then(|| digest(text))
    }

    /// From the command line or the TOML file: a built-in's name, a digest,
    /// or else the path of a component file.
    pub fn parse_cli(text: &str) -> Result<Self, SourceError> {
        Self::parse_named(text).unwrap_or_else(|| Ok(StrategySource::File(PathBuf::from(text))))
    }

    /// From a REST body: a built-in's name or an uploaded component's
    /// digest, never a file.
    pub fn parse_api(text: &str) -> Result<Self, SourceError> {
        Self::parse_named(text).unwrap_or_else(|| Err(unknown(text, " or an uploaded component's sha256:… digest")))
    }

    /// From the store: a digest, or else a built-in's name (checked when it
    /// is loaded, so a store naming a built-in this build lacks still opens
    /// and the error names the type).
    pub fn parse_stored(text: &str) -> Self {
        if text.starts_with(DIGEST_PREFIX) {
            StrategySource::Digest(text.to_owned())
        } else {
            StrategySource::Builtin(text.to_owned())
        }
    }

    /// The error for a name that resolves to nothing here (an unknown
    /// built-in, or a digest no component was uploaded with).
    pub fn unknown_error(&self) -> SourceError {
        unknown(&self.to_string(), " or an uploaded component's sha256:… digest")
    }
}

impl fmt::Display for StrategySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrategySource::Builtin(name) => f.write_str(name),
            StrategySource::Digest(digest) => f.write_str(digest),
            StrategySource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Stored as its text; see [`StrategySource::parse_stored`].
impl serde::Serialize for StrategySource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for StrategySource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(StrategySource::parse_stored(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// What one edge makes of a text: the source, or a refusal.
    type Parsed = Result<StrategySource, ()>;

    #[test]
    fn each_edge_accepts_what_it_may() {
        let cases: &[(&str, Parsed, Parsed)] = &[
            ("hash", Ok(StrategySource::Builtin("hash".into())), Ok(StrategySource::Builtin("hash".into()))),
            (DIGEST, Ok(StrategySource::Digest(DIGEST.into())), Ok(StrategySource::Digest(DIGEST.into()))),
            ("my.wasm", Ok(StrategySource::File("my.wasm".into())), Err(())),
            ("/etc/passwd", Ok(StrategySource::File("/etc/passwd".into())), Err(())),
            ("leastshard", Ok(StrategySource::File("leastshard".into())), Err(())),
            ("sha256:00", Err(()), Err(())),
            ("", Err(()), Err(())),
        ];
        for (text, cli, api) in cases {
            assert_eq!(StrategySource::parse_cli(text).map_err(|_| ()), *cli, "cli {text:?}");
            assert_eq!(StrategySource::parse_api(text).map_err(|_| ()), *api, "api {text:?}");
        }
    }

    #[test]
    fn refusals_name_the_rule() {
        let error = StrategySource::parse_api("./x.wasm").unwrap_err().to_string();
        assert!(error.contains("least-shard") && error.contains("sha256:"), "{error}");
        let error = StrategySource::parse_api("sha256:XYZ").unwrap_err().to_string();
        assert!(error.contains("64 lowercase hex digits"), "{error}");
    }

    #[test]
    fn stored_form_is_its_text() {
        for source in [StrategySource::Builtin("zone".into()), StrategySource::Digest(DIGEST.into())] {
            let json = serde_json::to_string(&source).unwrap();
            assert_eq!(json, format!("\"{source}\""));
            assert_eq!(serde_json::from_str::<StrategySource>(&json).unwrap(), source);
        }
    }
}
