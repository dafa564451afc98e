//! `shardalloc internal-compile` (hidden): the node's compiler process.
//!
//! Reads a component from stdin (its length as 8 little-endian bytes, then
//! the bytes), compiles it with the node's engine settings and writes
//! wasmtime's precompiled artifact to stdout; a component that does not
//! compile exits 1 with the reason on stderr. The node kills it when the
//! compile runs past its time or its request is dropped
//! (`server/compile.rs`); it exits by itself when stdin closes, which is
//! how it learns the node died.

use std::io::{Read, Write};

use anyhow::Context;
use shardalloc::engine::Engine;

/// Compiles stdin to stdout (see the module documentation).
pub fn run() -> anyhow::Result<()> {
    let mut stdin = std::io::stdin().lock();
    let mut length = [0u8; 8];
    stdin.read_exact(&mut length).context("read the component's length")?;
    let length = u64::from_le_bytes(length);
    let limit = shardalloc::engine::limits::MAX_COMPONENT_SIZE as u64;
    anyhow::ensure!(length <= limit, "the component is {length} bytes; the limit is {limit}");
    let mut bytes = vec![0u8; length as usize];
    stdin.read_exact(&mut bytes).context("read the component")?;
    drop(stdin);
    std::thread::Builder::new().name("parent-watch".into()).spawn(|| {
        // Nothing more comes; end of input means the node is gone.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(2);
    })?;
    let engine = Engine::for_tool()?;
    let artifact = engine.precompile(&bytes)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&artifact).context("write the artifact")?;
    stdout.flush().context("write the artifact")?;
    Ok(())
}
