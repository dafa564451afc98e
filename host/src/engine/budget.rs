//! The compile budget's static half: what an uploaded component may ask
//! Cranelift to compile, measured with `wasmparser` (the same version
//! wasmtime parses with) *before* anything is compiled.
//!
//! Cranelift's time grows with the number of functions and, steeply, with
//! the locals of each: a 165 KB component of 2,000 functions × 50,000
//! locals keeps a core busy for minutes. Counting them takes milliseconds.
//! Every core module a component carries (nested components included) is
//! counted; imported functions cost nothing to compile and are not.
//!
//! The time half of the budget (a compile that runs too long is killed) is
//! the node's: `server/compile.rs`.

/// Most functions defined in all the component's core modules.
pub const DEFAULT_MAX_FUNCTIONS: u64 = 100_000;

/// Most locals one function may declare. wasmparser's own ceiling is 50,000;
/// compiled Rust, C, Python (componentize-py) and JavaScript
/// (componentize-js) stay far below this one.
pub const DEFAULT_MAX_FUNCTION_LOCALS: u64 = 20_000;

/// Most locals all functions together may declare.
pub const DEFAULT_MAX_LOCALS: u64 = 2_000_000;

/// The largest body of one function, in bytes.
pub const DEFAULT_MAX_FUNCTION_BYTES: u64 = 4 << 20;

/// The most code (function bodies) in all core modules, in bytes.
pub const DEFAULT_MAX_CODE_BYTES: u64 = 24 << 20;

/// What one component may ask the compiler to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileBudget {
    /// Functions defined in all core modules ([`DEFAULT_MAX_FUNCTIONS`]).
    pub max_functions: u64,
    /// Locals of one function ([`DEFAULT_MAX_FUNCTION_LOCALS`]).
    pub max_function_locals: u64,
    /// Locals of all functions ([`DEFAULT_MAX_LOCALS`]).
    pub max_locals: u64,
    /// Bytes of one function's body ([`DEFAULT_MAX_FUNCTION_BYTES`]).
    pub max_function_bytes: u64,
    /// Bytes of all function bodies ([`DEFAULT_MAX_CODE_BYTES`]).
    pub max_code_bytes: u64,
}

impl Default for CompileBudget {
    fn default() -> Self {
        CompileBudget {
            max_functions: DEFAULT_MAX_FUNCTIONS,
            max_function_locals: DEFAULT_MAX_FUNCTION_LOCALS,
            max_locals: DEFAULT_MAX_LOCALS,
            max_function_bytes: DEFAULT_MAX_FUNCTION_BYTES,
            max_code_bytes: DEFAULT_MAX_CODE_BYTES,
        }
    }
}

/// What a component asks the compiler to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeMeasure {
    /// Functions defined.
    pub functions: u64,
    /// Locals of all functions.
    pub locals: u64,
    /// The most locals of one function.
    pub most_function_locals: u64,
    /// The largest function body, in bytes.
    pub largest_function: u64,
    /// Bytes of all function bodies.
    pub code_bytes: u64,
}

/// Why a component is refused before compiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The bytes do not parse.
    #[error("the component is not valid: {0}")]
    Malformed(String),
    /// Over one of the limits.
    #[error(
        "the component is over the compile budget: {what} is {found}, the limit ({setting}) is {limit}; \
         nothing was compiled"
    )]
    Over {
        /// What was measured.
        what: &'static str,
        /// How much the component has.
        found: u64,
        /// The limit.
        limit: u64,
        /// The setting that sets it.
        setting: &'static str,
    },
}

/// Measures the code of every core module in `bytes`.
pub fn measure(bytes: &[u8]) -> Result<CodeMeasure, BudgetError> {
    let malformed = |e: wasmparser::BinaryReaderError| BudgetError::Malformed(e.to_string());
    let mut measure = CodeMeasure::default();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload.map_err(malformed)? {
            let mut locals = 0u64;
            let mut reader = body.get_locals_reader().map_err(malformed)?;
            for _ in 0..reader.get_count() {
                locals += u64::from(reader.read().map_err(malformed)?.0);
            }
            let size = body.range().len() as u64;
            measure.functions += 1;
            measure.locals += locals;
            measure.most_function_locals = measure.most_function_locals.max(locals);
            measure.largest_function = measure.largest_function.max(size);
            measure.code_bytes += size;
        }
    }
    Ok(measure)
}

impl CompileBudget {
    /// Measures `bytes` and refuses them when over any limit, naming it.
    pub fn check(&self, bytes: &[u8]) -> Result<CodeMeasure, BudgetError> {
        let m = measure(bytes)?;
        let limits = [
            ("the number of functions", m.functions, self.max_functions, "max-functions"),
            ("the locals of one function", m.most_function_locals, self.max_function_locals, "max-function-locals"),
            ("the number of locals in all functions", m.locals, self.max_locals, "max-locals"),
            ("the largest function body, in bytes,", m.largest_function, self.max_function_bytes, "max-function-bytes"),
            ("the code of all functions, in bytes,", m.code_bytes, self.max_code_bytes, "max-code-bytes"),
        ];
        for (what, found, limit, setting) in limits {
            if found > limit {
                return Err(BudgetError::Over { what, found, limit, setting });
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_ins_are_well_within_the_default_budget() {
        for name in crate::strategy::builtin::names() {
            let bytes = crate::strategy::builtin::component_bytes(name).unwrap();
            let m = CompileBudget::default().check(bytes).unwrap();
            assert!(m.functions > 10 && m.locals > 10, "{name}: {m:?}");
            assert!(m.most_function_locals * 10 < DEFAULT_MAX_FUNCTION_LOCALS, "{name}: {m:?}");
        }
    }

    #[test]
    fn each_limit_is_named() {
        let bytes = crate::strategy::builtin::component_bytes("least-shard").unwrap();
        let m = measure(bytes).unwrap();
        let tight = |f: fn(&mut CompileBudget)| {
            let mut budget = CompileBudget::default();
            f(&mut budget);
            budget.check(bytes).unwrap_err().to_string()
        };
        assert!(tight(|b| b.max_functions = 1).contains("max-functions"));
        assert!(tight(|b| b.max_function_locals = 1).contains("max-function-locals"));
        assert!(tight(|b| b.max_locals = 1).contains(&format!("locals in all functions is {}", m.locals)));
        assert!(tight(|b| b.max_function_bytes = 1).contains("max-function-bytes"));
        assert!(tight(|b| b.max_code_bytes = 1).contains("max-code-bytes"));
        assert!(matches!(CompileBudget::default().check(b"\0asm\x0d\0\x01\0\xff"), Err(BudgetError::Malformed(_))));
    }
}
