//! The `shardalloc:strategy@0.1.0` world as wasmtime bindings. The
//! generated code stays private; the engine uses the few names re-exported
//! here.

#[allow(missing_docs)] // generated
mod generated {
    wasmtime::component::bindgen!({
        world: "strategy",
        path: "../wit",
        // Arguments are lent to the call, not copied into owned values first.
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

pub use generated::Strategy as StrategyWorld;
pub use generated::StrategyPre as StrategyWorldPre;
pub use generated::shardalloc::strategy::host as wit_host;
pub use generated::shardalloc::strategy::types as wit;
