//! The generated bindings of the `shardalloc:strategy` world (wasm32 only),
//! from the WIT this crate carries (`wit/`, a copy of the repository's).

#![allow(
    clippy::all,
    clippy::allow_attributes_without_reason,
    missing_docs,
    reason = "wit-bindgen's generated bindings, not ours to document or lint"
)]

wit_bindgen::generate!({
    world: "strategy",
    path: "wit",
    pub_export_macro: true,
    export_macro_name: "__export_strategy_world",
    default_bindings_module: "shardalloc_guest::__private::bindings",
});
