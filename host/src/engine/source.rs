//! Loading a strategy from its [`StrategySource`]: a built-in's embedded
//! component, a file, or an uploaded component whose bytes the caller keeps
//! (the node's store; offline tools have none).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::Engine;
use super::component::{Compiled, LoadError};
use super::instance::Sandboxed;
use super::limits::Limits;
use crate::strategy::StrategySource;
use crate::strategy::builtin;
use crate::strategy::source::{SourceError, digest_of};

/// Reads an uploaded component's bytes by digest: `Ok(None)` when no
/// component has that digest.
pub type Uploaded<'a> = &'a dyn Fn(&str) -> Result<Option<Vec<u8>>, String>;

/// Why a strategy could not be loaded from its source.
#[derive(Debug, thiserror::Error)]
pub enum SourceLoadError {
    /// The name resolves to nothing.
    #[error(transparent)]
    Unknown(#[from] SourceError),
    /// The file could not be read.
    #[error("cannot read the strategy file {path}: {error}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A digest where no uploaded components are kept.
    #[error("{0} names a component uploaded to a node; here, name a built-in or a .wasm file")]
    NoUploads(String),
    /// The uploaded components could not be read.
    #[error("cannot read the uploaded component {digest}: {reason}")]
    Uploads {
        /// The digest.
        digest: String,
        /// Why.
        reason: String,
    },
    /// The component could not be loaded.
    #[error("{source_name}: {error}")]
    Load {
        /// The built-in name, digest or path.
        source_name: String,
        /// What went wrong.
        error: LoadError,
    },
}

/// The component bytes of `source`; `uploaded` reads uploaded components.
pub fn read(source: &StrategySource, uploaded: Option<Uploaded<'_>>) -> Result<Cow<'static, [u8]>, SourceLoadError> {
    match source {
        StrategySource::Builtin(name) => {
            builtin::component_bytes(name).map(Cow::Borrowed).ok_or_else(|| source.unknown_error().into())
        }
        StrategySource::Digest(digest) => {
            let uploaded = uploaded.ok_or_else(|| SourceLoadError::NoUploads(digest.clone()))?;
            match uploaded(digest) {
                Ok(Some(bytes)) => Ok(Cow::Owned(bytes)),
                Ok(None) => Err(source.unknown_error().into()),
                Err(reason) => Err(SourceLoadError::Uploads { digest: digest.clone(), reason }),
            }
        }
        StrategySource::File(path) => std::fs::read(path).map(Cow::Owned).map_err(|error| read_error(path, error)),
    }
}

/// A built-in's embedded bytes and their digest, computed once per process.
fn builtin_digest(name: &str) -> Option<(&'static [u8], &'static str)> {
    static DIGESTS: OnceLock<BTreeMap<&'static str, (&'static [u8], String)>> = OnceLock::new();
    let digests = DIGESTS.get_or_init(|| {
        builtin::names()
            .filter_map(|name| builtin::component_bytes(name).map(|bytes| (name, (bytes, digest_of(bytes)))))
            .collect()
    });
    digests.get(name).map(|(bytes, digest)| (*bytes, digest.as_str()))
}

fn read_error(path: &Path, error: std::io::Error) -> SourceLoadError {
    let text = path.display().to_string();
    // A bare word that is no file was meant as a strategy's name.
    let bare = !text.contains('/') && !text.ends_with(".wasm");
    if bare && error.kind() == std::io::ErrorKind::NotFound {
        return SourceError::Unknown {
            given: text,
            builtins: builtin::names().collect::<Vec<_>>().join(", "),
            or_file: ", an uploaded component's sha256:… digest, or the path of a .wasm component",
        }
        .into();
    }
    SourceLoadError::Read { path: text, error }
}

impl Engine {
    /// Reads and compiles (or loads from the artifact cache) a strategy.
    pub fn compile_source(
        &self,
        source: &StrategySource,
        uploaded: Option<Uploaded<'_>>,
    ) -> Result<Arc<Compiled>, SourceLoadError> {
        let load_error = |error| SourceLoadError::Load { source_name: source.to_string(), error };
        if let StrategySource::Builtin(name) = source
            && let Some((bytes, digest)) = builtin_digest(name)
        {
            // Every type of a built-in shares one compiled component; finding
            // it by a digest computed once keeps sha256 over the embedded
            // bytes off each type's start (a debug build's start with 1,024
            // types: 21 s with it, 3 s without).
            return self.compile_digested(bytes, digest.to_owned()).map_err(load_error);
        }
        let bytes = read(source, uploaded)?;
        self.compile(&bytes).map_err(load_error)
    }

    /// Reads, compiles and instantiates a strategy, configured and sandboxed with `limits`.
    pub fn load_source(
        self: &Arc<Self>,
        source: &StrategySource,
        config: &str,
        limits: Limits,
        uploaded: Option<Uploaded<'_>>,
    ) -> Result<Sandboxed, SourceLoadError> {
        let compiled = self.compile_source(source, uploaded)?;
        self.instantiate(&compiled, config, limits)
            .map_err(|error| SourceLoadError::Load { source_name: source.to_string(), error })
    }
}
