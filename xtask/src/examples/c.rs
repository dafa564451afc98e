//! The C example: bindings generated with the `wit-bindgen-c` library (no
//! CLI to install), compiled with Debian's clang for `wasm32-wasi` against
//! `wasi-libc`, and made a component with the `wit-component` library (with
//! the WASI preview-1 adapter, used only if libc imports anything).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use wit_bindgen_core::wit_parser::Resolve;

/// The C sources of the strategy; `component.c` is the glue, the rest is
/// plain C that the native tests use too.
const STRATEGY_SOURCES: [&str; 2] = ["component.c", "latency.c"];

/// Writes `strategy.h`, `strategy.c` and `strategy_component_type.o` for the
/// `strategy` world of `wit_dir` into `out`.
pub fn generate_bindings(wit_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit_dir).with_context(|| format!("read the WIT in {}", wit_dir.display()))?;
    let world = resolve.select_world(&[package], Some("strategy"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default().build().generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out)?;
    for (name, contents) in files.iter() {
        std::fs::write(out.join(name), contents).with_context(|| format!("write {name}"))?;
    }
    Ok(())
}

/// Builds the example in `dir` into `out/latency-aware-c.wasm`.
pub fn build(root: &Path, dir: &Path, out: &Path) -> anyhow::Result<PathBuf> {
    let generated = out.join("bindings");
    generate_bindings(&root.join("wit").join("0.3"), &generated)?;
    let core = out.join("latency-aware-c.core.wasm");
    let mut clang = Command::new("clang");
    clang
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(&generated)
        .args(STRATEGY_SOURCES.iter().map(|s| dir.join(s)))
        .arg(generated.join("strategy.c"))
        .arg(generated.join("strategy_component_type.o"))
        .arg("-o")
        .arg(&core);
    crate::checked(&mut clang)?;
    let module = std::fs::read(&core)?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .context("make the C module a component")?;
    let path = out.join("latency-aware-c.wasm");
    std::fs::write(&path, component)?;
    Ok(path)
}

/// Builds the plain-C part natively with its tests and runs them.
pub fn test_natively(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let binary = out.join("test_latency");
    let mut clang = Command::new("clang");
    clang
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined", "-fsanitize-trap=undefined"])
        .arg(dir.join("test_latency.c"))
        .arg(dir.join("latency.c"))
        .arg("-lm")
        .arg("-o")
        .arg(&binary);
    crate::checked(&mut clang)?;
    let output = Command::new(&binary).output().context("run the C tests")?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        bail!("the C example's tests failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(())
}
