//! The strategy worlds as wasmtime bindings, one module per contract
//! version. The generated code stays private; the engine uses the few names
//! re-exported here.

/// `shardalloc:strategy@0.1.0`: the frozen first contract.
pub mod v0_1 {
    #[allow(missing_docs)] // generated
    mod generated {
        wasmtime::component::bindgen!({
            world: "strategy",
            path: "../wit/0.1",
            // Arguments are lent to the call, not copied into owned values first.
            ownership: Borrowing { duplicate_if_necessary: true },
        });
    }

    pub use generated::Strategy as World;
    pub use generated::StrategyPre as WorldPre;
    pub use generated::shardalloc::strategy::host as wit_host;
    pub use generated::shardalloc::strategy::types as wit;
}

/// `shardalloc:strategy@0.2.0`: the view kept in the guest.
pub mod v0_2 {
    #[allow(missing_docs)] // generated
    mod generated {
        wasmtime::component::bindgen!({
            world: "strategy",
            path: "../wit/0.2",
            ownership: Borrowing { duplicate_if_necessary: true },
        });
    }

    pub use generated::Strategy as World;
    pub use generated::StrategyPre as WorldPre;
    pub use generated::shardalloc::strategy::host as wit_host;
    pub use generated::shardalloc::strategy::types as wit;
}
