//! When the contract tests write their fixtures instead of comparing
//! (`contract_rest`, `contract_store`, `contract_strategy`; the wire's
//! test in `proto/` keeps its own copy of this rule).

/// Whether to write the fixtures instead of comparing: `SHARDALLOC_BLESS`
/// set (not to `0`), and `CI` not set (CI only ever compares).
pub fn blessing() -> bool {
    let bless = std::env::var("SHARDALLOC_BLESS").is_ok_and(|v| !v.is_empty() && v != "0");
    if bless && std::env::var_os("CI").is_some() {
        eprintln!("SHARDALLOC_BLESS is ignored when CI is set: the fixtures are compared, never written");
        return false;
    }
    bless
}
