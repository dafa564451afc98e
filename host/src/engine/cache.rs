//! Precompiled artifacts on disk, keyed by the component's sha256 and the
//! engine's compatibility hash, so a restart loads a strategy by mmap in
//! well under a millisecond instead of compiling it again.
//!
//! Safety: artifacts are deserialized without validation (that is what
//! makes them fast), so the cache directory must be written by this engine
//! only. It is created with mode 0700; an artifact that fails to load is
//! deleted and compiled again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::Component;

/// Most artifacts a cache keeps; the least recently used beyond this are
/// deleted when a new one is stored.
pub const MAX_CACHED_ARTIFACTS: usize = 64;

/// Whether a load compiled or reused an artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now (and stored when a cache is configured).
    Compiled,
    /// Loaded from a stored artifact.
    Hit,
}

/// A directory of precompiled components.
#[derive(Clone, Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// Opens (creating) the cache directory. It and every directory
    /// created on the way (the data directory, on a first start) are
    /// owner-only.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = dir.into();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(ArtifactCache { dir })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str, engine_hash: &str) -> PathBuf {
        let digest = digest.trim_start_matches("sha256:");
        self.dir.join(format!("{digest}-{engine_hash}.cwasm"))
    }

    /// Whether the artifact for `digest` is stored.
    pub fn contains(&self, engine_hash: &str, digest: &str) -> bool {
        self.path(digest, engine_hash).is_file()
    }

    /// Deletes the least recently used artifacts beyond
    /// [`MAX_CACHED_ARTIFACTS`] (a deleted one is compiled again when next
    /// needed).
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut artifacts: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if artifacts.len() <= MAX_CACHED_ARTIFACTS {
            return;
        }
        artifacts.sort();
        for (_, path) in &artifacts[..artifacts.len() - MAX_CACHED_ARTIFACTS] {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Loads the artifact for `digest`, compiling and storing it when absent
    /// or unusable.
    pub fn load_or_compile(
        &self,
        engine: &wasmtime::Engine,
        engine_hash: &str,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.path(digest, engine_hash);
        if path.is_file() {
            // SAFETY: the file was written by `precompile_component` of an
            // engine with the same compatibility hash, into a directory only
            // this engine writes (see the module docs).
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => {
                    // Recently used: pruning keeps it.
                    let _ = std::fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
                    return Ok((component, CacheOutcome::Hit));
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), "discarding unusable artifact: {error:#}");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let artifact = engine.precompile_component(bytes)?;
        Ok((self.store(engine, engine_hash, digest, &artifact)?, CacheOutcome::Compiled))
    }

    /// Stores the artifact of `digest` (compiled here, or by the node's
    /// compiler process from the same binary) and loads it.
    pub fn store(
        &self,
        engine: &wasmtime::Engine,
        engine_hash: &str,
        digest: &str,
        artifact: &[u8],
    ) -> wasmtime::Result<Component> {
        let path = self.path(digest, engine_hash);
        // Unique per writer (process and call), so concurrent compiles of the
        // same component never share a partial file; the rename is atomic.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let write = WRITES.fetch_add(1, Ordering::Relaxed);
        let partial = path.with_extension(format!("partial-{}-{write}", std::process::id()));
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&partial)?;
            file.write_all(artifact)?;
            // Durable before it becomes visible: a torn artifact after a
            // power loss would be mapped and executed unchecked.
            file.sync_all()?;
        }
        std::fs::rename(&partial, &path)?;
        self.prune();
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        // SAFETY: as above; written just now by this engine, or by the
        // node's own binary in a compiler process (`server/compile.rs`) for
        // an engine with the same compatibility hash, which wasmtime checks.
        let component = unsafe { Component::deserialize_file(engine, &path) };
        if component.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        component
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_cache_and_the_directories_made_for_it_are_owner_only() {
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("data");
        super::ArtifactCache::open(data.join("cache")).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&data), mode(&data.join("cache"))), (0o700, 0o700));
    }
}
