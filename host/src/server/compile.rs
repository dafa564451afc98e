//! The compile budget of uploaded components: [`Compiler`].
//!
//! 1. **Measured first**: functions, locals and code size against
//!    [`CompileBudget`] (`engine/budget.rs`), before anything compiles:
//!    422 `over-compile-budget` naming the limit.
//! 2. **Bounded parallelism**: at most [`CompileSettings::concurrent`]
//!    compiles at once; the others wait (within the time limit), off the
//!    driver thread.
//! 3. **Killable**: Cranelift cannot be stopped midway, so the node's binary
//!    compiles in a child process of itself (`shardalloc internal-compile`,
//!    `cli/compile.rs`): the component's bytes in on stdin, wasmtime's
//!    precompiled artifact out on stdout, which the node loads
//!    (`engine/precompiled.rs`). The child is killed (SIGKILL, and reaped)
//!    when it runs past [`CompileSettings::timeout`] (422
//!    `compile-timeout`) or when the request is dropped because its client
//!    went away. The child exits by itself when the node dies (its stdin
//!    closes).
//!
//! Components the engine already holds or has in its artifact cache are
//! not compiled, so they skip all three.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::api_error::{ApiError, ErrorCode};
use super::rest::blocking;
use crate::engine::Engine;
use crate::engine::budget::{BudgetError, CompileBudget};
use crate::engine::component::{Compiled, LoadError};

/// How long one compile of an upload may run before it is killed.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(60);

/// Compiles of uploads that run at once (each uses every core wasmtime's
/// parallel compilation finds).
pub const DEFAULT_CONCURRENT_COMPILES: usize = 2;

/// The hidden subcommand of the `shardalloc` binary that compiles.
pub const COMPILE_SUBCOMMAND: &str = "internal-compile";

/// The largest artifact read back from a compiler process.
const MAX_ARTIFACT: u64 = 1 << 30;

/// How uploads are compiled.
#[derive(Clone, Debug)]
pub struct CompileSettings {
    /// What a component may ask the compiler to do.
    pub budget: CompileBudget,
    /// How long one compile may run ([`DEFAULT_COMPILE_TIMEOUT`]).
    pub timeout: Duration,
    /// Compiles at once ([`DEFAULT_CONCURRENT_COMPILES`]).
    pub concurrent: usize,
    /// The `shardalloc` binary to run as the compiler process; `None`
    /// compiles on a blocking thread of this process, which a time limit
    /// answers but cannot stop (in-process tests and tools).
    pub program: Option<PathBuf>,
}

impl Default for CompileSettings {
    fn default() -> Self {
        CompileSettings {
            budget: CompileBudget::default(),
            timeout: DEFAULT_COMPILE_TIMEOUT,
            concurrent: DEFAULT_CONCURRENT_COMPILES,
            program: None,
        }
    }
}

/// Runs the compiles of uploaded components within their budget.
#[derive(Debug)]
pub struct Compiler {
    settings: CompileSettings,
    permits: Semaphore,
}

/// Why a compiler process failed.
#[derive(Debug, thiserror::Error)]
enum ProcessError {
    #[error("cannot run the compiler process: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Refused(String),
}

impl Compiler {
    /// A compiler with these settings.
    pub fn new(settings: CompileSettings) -> Self {
        let permits = Semaphore::new(settings.concurrent.max(1));
        Compiler { settings, permits }
    }

    /// Its settings.
    pub fn settings(&self) -> &CompileSettings {
        &self.settings
    }

    /// Compiles (or shares, or loads from the cache) an uploaded
    /// component's bytes within the budget. Dropping the future kills a
    /// compiler process under way.
    pub async fn compile(&self, engine: &Arc<Engine>, bytes: bytes::Bytes) -> Result<Arc<Compiled>, ApiError> {
        let invalid = |e: LoadError| ApiError::unprocessable(ErrorCode::InvalidComponent, e.to_string());
        crate::engine::component::sniff(&bytes, crate::engine::limits::MAX_COMPONENT_SIZE).map_err(invalid)?;
        if !engine.needs_compiling(&bytes) {
            let (engine, bytes) = (engine.clone(), bytes.clone());
            return blocking(move || engine.compile(&bytes)).await?.map_err(invalid);
        }
        let budget = self.settings.budget;
        let measured = bytes.clone();
        blocking(move || budget.check(&measured)).await?.map_err(|e| match e {
            BudgetError::Malformed(_) => ApiError::unprocessable(ErrorCode::InvalidComponent, e.to_string()),
            BudgetError::Over { .. } => ApiError::unprocessable(ErrorCode::OverCompileBudget, e.to_string()),
        })?;
        let timeout = self.settings.timeout;
        let timed_out = || {
            ApiError::unprocessable(
                ErrorCode::CompileTimeout,
                format!(
                    "the component did not compile within {} ms (the compile-timeout-ms setting); it was abandoned",
                    timeout.as_millis()
                ),
            )
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let _permit = tokio::time::timeout_at(deadline, self.permits.acquire()).await.map_err(|_| {
            ApiError::unavailable(
                ErrorCode::CompileBusy,
                format!("{} compiles are under way; try again later", self.settings.concurrent),
            )
        })?;
        let started = std::time::Instant::now();
        let Some(program) = &self.settings.program else {
            let (engine, bytes) = (engine.clone(), bytes.clone());
            let work = blocking(move || engine.compile(&bytes));
            return tokio::time::timeout_at(deadline, work).await.map_err(|_| timed_out())??.map_err(invalid);
        };
        let artifact = match run_compiler(program, &bytes, deadline).await {
            Ok(Some(artifact)) => artifact,
            Ok(None) => {
                tracing::warn!(bytes = bytes.len(), ms = timeout.as_millis() as u64, "an upload's compile was killed");
                return Err(timed_out());
            }
            Err(ProcessError::Refused(message)) => return Err(invalid(LoadError::Invalid(message))),
            Err(error) => {
                return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Compiler, error.to_string()));
            }
        };
        tracing::info!(bytes = bytes.len(), seconds = started.elapsed().as_secs_f64(), "an upload compiled");
        let engine = engine.clone();
        blocking(move || engine.load_precompiled(&bytes, &artifact)).await?.map_err(invalid)
    }
}

/// Runs `program internal-compile` on `bytes` until `deadline`: the
/// artifact, `None` when it ran out of time (it is killed and reaped).
async fn run_compiler(
    program: &std::path::Path,
    bytes: &[u8],
    deadline: tokio::time::Instant,
) -> Result<Option<Vec<u8>>, ProcessError> {
    let child = tokio::process::Command::new(program)
        .arg(COMPILE_SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut child = Reaped(Some(child));
    let child = child.0.as_mut().expect("just spawned");
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped").take(MAX_ARTIFACT);
    let mut stderr = child.stderr.take().expect("piped").take(64 << 10);
    let run = async {
        stdin.write_all(&(bytes.len() as u64).to_le_bytes()).await?;
        stdin.write_all(bytes).await?;
        stdin.flush().await?;
        // stdin stays open: the child takes its end as the node's death.
        let (mut artifact, mut message) = (Vec::new(), Vec::new());
        let read_out = stdout.read_to_end(&mut artifact);
        let read_err = stderr.read_to_end(&mut message);
        let (out, err, status) = tokio::join!(read_out, read_err, child.wait());
        out?;
        err?;
        Ok::<_, std::io::Error>((status?, artifact, message))
    };
    let outcome = tokio::time::timeout_at(deadline, run).await;
    match outcome {
        Err(_) => {
            child.kill().await?;
            Ok(None)
        }
        Ok(result) => {
            let (status, artifact, message) = result?;
            if status.success() {
                Ok(Some(artifact))
            } else {
                let message = String::from_utf8_lossy(&message).trim().to_owned();
                Err(ProcessError::Refused(if message.is_empty() { format!("the compiler {status}") } else { message }))
            }
        }
    }
}

/// A compiler process that is killed and reaped when dropped (its request
/// was dropped because its client went away): no zombie is left waiting
/// for tokio to notice another child.
struct Reaped(Option<tokio::process::Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else { return };
        if let Ok(None) = child.try_wait() {
            tracing::info!(pid = child.id(), "killing an abandoned compile");
            let _ = child.start_kill();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = child.wait().await;
                });
            }
        }
    }
}
