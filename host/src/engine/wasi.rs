//! The WASI a strategy may import: capability-free and deterministic.
//!
//! The contract needs no WASI, but ordinary toolchains add it: a
//! `cargo build --target wasm32-wasip2` component, componentize-py without
//! `--stub-wasi`, componentize-js without `-d …`. Such components load here
//! and answer identically on every run, because what they get is:
//!
//! - **no files, no sockets, no environment, no arguments**: no preopened
//!   directory, TCP, UDP and name lookup refused, stdin empty;
//! - **clocks frozen at zero** (wall and monotonic), and a sleep or timer
//!   that is ready at once, so no call can wait on a clock;
//! - **randomness from a fixed seed** (the same bytes in every store);
//! - **stdout and stderr into the strategy log** (stdout at `info`, stderr at
//!   `warn`, one record per line), at most [`OUTPUT_PER_CALL`] bytes per call;
//! - interfaces no strategy has any use for (`wasi:http`, …) linked as stubs
//!   that trap when called ([`link_for`]).
//!
//! Imports outside `wasi:` and the contract are refused by [`check_imports`],
//! which names them and says how to build without them.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use shardalloc_guest::Level;
use wasmtime::component::{Component, Linker, Resource, ResourceTable, ResourceType};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::{MAX_LOG_MESSAGE, cut};

/// The imports of the contracts themselves, at every version this host
/// speaks.
pub const CONTRACT_IMPORTS: [&str; 6] = [
    "shardalloc:strategy/types@0.1.0",
    "shardalloc:strategy/host@0.1.0",
    "shardalloc:strategy/types@0.2.0",
    "shardalloc:strategy/host@0.2.0",
    "shardalloc:strategy/types@0.3.0",
    "shardalloc:strategy/host@0.3.0",
];

/// Most bytes of stdout and stderr together that one strategy call may log;
/// the rest is dropped and counted in one line.
pub const OUTPUT_PER_CALL: usize = 16 * 1024;

/// The bytes every store's random generators cycle through.
const RANDOM_SEED_LEN: usize = 256;

/// Adds the capability-free WASI to `linker`.
pub fn add_to_linker<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    // A timer would block the caller in the host, out of reach of the
    // call's deadline: every subscription is ready at once instead.
    linker.allow_shadowing(true);
    // (Imports of any 0.2.x version resolve to this one.)
    let mut clock = linker.instance("wasi:clocks/monotonic-clock@0.2.12")?;
    clock.func_wrap("subscribe-duration", |mut store, (_,): (u64,)| ready_at_once(store.data_mut().ctx().table))?;
    clock.func_wrap("subscribe-instant", |mut store, (_,): (u64,)| ready_at_once(store.data_mut().ctx().table))?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The WASI interfaces [`add_to_linker`] provides (any `0.2.x` version).
const PROVIDED: [&str; 25] = [
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stderr",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:random/random",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/network",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/tcp",
];

/// A resource type of the stubs: no value of it is ever made.
struct StubResource;

/// A linker for one component: `base`, plus stubs that trap for every
/// `wasi:` interface it imports that `base` does not provide (`wasi:http`,
/// `wasi:sockets/udp`, …). A stub defines only the resources introduced by
/// that interface; a resource it merely uses (an `output-stream`) stays the
/// provided one, or the component's types would not match.
pub fn link_for<T: 'static>(
    base: &Linker<T>,
    engine: &wasmtime::Engine,
    component: &Component,
) -> wasmtime::Result<Linker<T>> {
    use wasmtime::component::types::ComponentItem;
    let mut linker = base.clone();
    let mut known = Vec::new();
    for (name, import) in component.component_type().imports(engine) {
        let ComponentItem::ComponentInstance(instance) = import.ty else { continue };
        let interface = name.split('@').next().unwrap_or(name);
        let stub = name.starts_with("wasi:") && !PROVIDED.contains(&interface);
        let mut definitions = if stub { Some(linker.instance(name)?) } else { None };
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::Resource(resource) if !known.contains(&resource) => {
                    known.push(resource);
                    if let Some(definitions) = definitions.as_mut() {
                        definitions.resource(export, ResourceType::host::<StubResource>(), |_, _| Ok(()))?;
                    }
                }
                ComponentItem::ComponentFunc(_) => {
                    if let Some(definitions) = definitions.as_mut() {
                        let what = format!("{name}#{export}");
                        definitions.func_new(export, move |_, _, _, _| {
                            Err(wasmtime::format_err!("{what} is not available to strategies"))
                        })?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(linker)
}

/// Refuses imports that are neither the contract's nor WASI's, listing them.
pub fn check_imports(engine: &wasmtime::Engine, component: &Component) -> Result<(), Vec<String>> {
    let foreign: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !name.starts_with("wasi:") && !CONTRACT_IMPORTS.contains(name))
        .map(str::to_owned)
        .collect();
    if foreign.is_empty() { Ok(()) } else { Err(foreign) }
}

struct ReadyAtOnce;

#[wasmtime_wasi::async_trait]
impl Pollable for ReadyAtOnce {
    async fn ready(&mut self) {}
}

fn ready_at_once(table: &mut ResourceTable) -> wasmtime::Result<(Resource<DynPollable>,)> {
    let resource = table.push(ReadyAtOnce)?;
    Ok((wasmtime_wasi::p2::subscribe(table, resource)?,))
}

/// What each store keeps for WASI.
pub struct StoreWasi {
    ctx: WasiCtx,
    table: ResourceTable,
    output: Arc<Mutex<OutputLog>>,
}

impl StoreWasi {
    /// A fresh, capability-free context; `label` names the strategy in logs.
    pub fn new(label: &str) -> Self {
        let output = Arc::new(Mutex::new(OutputLog::new(label)));
        let seed: Vec<u8> = (0..RANDOM_SEED_LEN as u64).map(|i| (splitmix(i) >> 56) as u8).collect();
        let ctx = WasiCtxBuilder::new()
            .stdout(StrategyOutput { log: output.clone(), level: Level::Info })
            .stderr(StrategyOutput { log: output.clone(), level: Level::Warn })
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(wasmtime_wasi::Deterministic::new(seed.clone()))
            .insecure_random(wasmtime_wasi::Deterministic::new(seed))
            .insecure_random_seed(0)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        StoreWasi { ctx, table: ResourceTable::new(), output }
    }

    /// The context and resource table, for wasmtime-wasi.
    pub fn view(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.ctx, table: &mut self.table }
    }

    /// Starts a call: logs any partial line and the count of dropped
    /// bytes of the previous call, and renews the output allowance.
    pub fn begin_call(&self) {
        self.output.lock().unwrap_or_else(|e| e.into_inner()).begin_call();
    }
}

fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Wall and monotonic time, both zero forever.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Lines written to stdout and stderr, turned into strategy log records.
struct OutputLog {
    label: String,
    pending: [Vec<u8>; 2],
    allowance: usize,
    dropped: usize,
}

impl OutputLog {
    fn new(label: &str) -> Self {
        OutputLog { label: label.to_owned(), pending: [Vec::new(), Vec::new()], allowance: OUTPUT_PER_CALL, dropped: 0 }
    }

    fn begin_call(&mut self) {
        for level in [Level::Info, Level::Warn] {
            let line = std::mem::take(&mut self.pending[slot(level)]);
            if !line.is_empty() {
                self.emit(level, &line);
            }
        }
        if self.dropped > 0 {
            let message =
                format!("{} bytes of stdout/stderr dropped: a call may write {OUTPUT_PER_CALL} bytes", self.dropped);
            crate::strategy::emit_strategy_log(&self.label, Level::Warn, &message, &[]);
        }
        self.dropped = 0;
        self.allowance = OUTPUT_PER_CALL;
    }

    fn write(&mut self, level: Level, bytes: &[u8]) {
        let kept = bytes.len().min(self.allowance);
        self.dropped += bytes.len() - kept;
        self.allowance -= kept;
        for &byte in &bytes[..kept] {
            if byte == b'\n' {
                let line = std::mem::take(&mut self.pending[slot(level)]);
                self.emit(level, &line);
            } else {
                let pending = &mut self.pending[slot(level)];
                pending.push(byte);
                if pending.len() >= MAX_LOG_MESSAGE {
                    let line = std::mem::take(pending);
                    self.emit(level, &line);
                }
            }
        }
    }

    fn emit(&self, level: Level, line: &[u8]) {
        let text = cut(String::from_utf8_lossy(line).into_owned(), MAX_LOG_MESSAGE);
        let stream = if level == Level::Info { "stdout" } else { "stderr" };
        crate::strategy::emit_strategy_log(&self.label, level, &text, &[("stream".to_owned(), stream.to_owned())]);
    }
}

fn slot(level: Level) -> usize {
    usize::from(level != Level::Info)
}

/// A guest's stdout or stderr.
#[derive(Clone)]
struct StrategyOutput {
    log: Arc<Mutex<OutputLog>>,
    level: Level,
}

impl StrategyOutput {
    fn write_bytes(&self, bytes: &[u8]) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).write(self.level, bytes);
    }
}

impl IsTerminal for StrategyOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StrategyOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StrategyOutput {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for StrategyOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for StrategyOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
