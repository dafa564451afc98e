//! `shardalloc serve`'s settings for uploaded components: the quota, the
//! retention of unused ones and the compile budget (flags, then
//! `SHARDALLOC_*`, then the settings file's `[uploads]` table, then the
//! defaults of `server/uploads.rs` and `engine/budget.rs`).

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use serde::Deserialize;
use shardalloc::server::uploads::UploadSettings;

/// The upload flags of `shardalloc serve`.
#[derive(Debug, Args)]
pub struct UploadArgs {
    /// Most uploaded components the node stores (default 100).
    #[arg(long, env = "SHARDALLOC_MAX_COMPONENTS")]
    max_components: Option<usize>,
    /// Most MiB of uploaded components the node stores (default 512).
    #[arg(long, env = "SHARDALLOC_MAX_COMPONENT_BYTES_MIB")]
    max_component_bytes_mib: Option<u64>,
    /// Seconds an uploaded component no type uses is kept before it is
    /// collected (default 604800, a week).
    #[arg(long, env = "SHARDALLOC_COMPONENT_RETENTION_S")]
    component_retention_s: Option<u64>,
    /// Milliseconds one upload's compile may run before it is killed (default 60000).
    #[arg(long, env = "SHARDALLOC_COMPILE_TIMEOUT_MS")]
    compile_timeout_ms: Option<u64>,
    /// Uploads compiled at once (default 2).
    #[arg(long, env = "SHARDALLOC_CONCURRENT_COMPILES")]
    concurrent_compiles: Option<usize>,
}

impl UploadArgs {
    /// The flags (and their environment variables) as a layer of `[uploads]`.
    pub fn layer(&self) -> UploadsFile {
        UploadsFile {
            max_components: self.max_components,
            max_component_bytes_mib: self.max_component_bytes_mib,
            component_retention_s: self.component_retention_s,
            compile_timeout_ms: self.compile_timeout_ms,
            concurrent_compiles: self.concurrent_compiles,
            ..UploadsFile::default()
        }
    }
}

/// The settings file's `[uploads]` table.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UploadsFile {
    max_components: Option<usize>,
    max_component_bytes_mib: Option<u64>,
    component_retention_s: Option<u64>,
    compile_timeout_ms: Option<u64>,
    concurrent_compiles: Option<usize>,
    max_functions: Option<u64>,
    max_function_locals: Option<u64>,
    max_locals: Option<u64>,
    max_function_bytes: Option<u64>,
    max_code_bytes: Option<u64>,
}

/// The upload settings from the layered `[uploads]` (the flags over the
/// file); compiles run in this binary's compiler process.
pub fn settings(file: &UploadsFile) -> anyhow::Result<UploadSettings> {
    let mut uploads = UploadSettings::default();
    if let Some(count) = file.max_components {
        uploads.max_components = count;
    }
    if let Some(mib) = file.max_component_bytes_mib {
        uploads.max_bytes = mib << 20;
    }
    if let Some(s) = file.component_retention_s {
        uploads.retention = Duration::from_secs(s);
    }
    let compile = &mut uploads.compile;
    if let Some(ms) = file.compile_timeout_ms {
        compile.timeout = Duration::from_millis(ms);
    }
    if let Some(count) = file.concurrent_compiles {
        compile.concurrent = count;
    }
    let budget = &mut compile.budget;
    let limits = [
        ("max-functions", &mut budget.max_functions, file.max_functions),
        ("max-function-locals", &mut budget.max_function_locals, file.max_function_locals),
        ("max-locals", &mut budget.max_locals, file.max_locals),
        ("max-function-bytes", &mut budget.max_function_bytes, file.max_function_bytes),
        ("max-code-bytes", &mut budget.max_code_bytes, file.max_code_bytes),
    ];
    for (key, limit, value) in limits {
        if let Some(value) = value {
            if value == 0 {
                bail!("[uploads] {key} = 0 would refuse every upload; it must be at least 1");
            }
            *limit = value;
        }
    }
    if compile.timeout.is_zero() || compile.concurrent == 0 {
        bail!("--compile-timeout-ms and --concurrent-compiles must be greater than zero");
    }
    compile.program = Some(std::env::current_exe()?);
    Ok(uploads)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: UploadArgs,
    }

    #[test]
    fn a_zero_compile_limit_is_refused_naming_its_key() {
        let file: UploadsFile = toml::from_str("max-functions = 0").unwrap();
        let error = settings(&file).unwrap_err().to_string();
        assert_eq!(error, "[uploads] max-functions = 0 would refuse every upload; it must be at least 1");
        let file: UploadsFile = toml::from_str("max-code-bytes = 1").unwrap();
        assert_eq!(settings(&file).unwrap().compile.budget.max_code_bytes, 1);
    }

    #[test]
    fn the_flags_layer_holds_what_they_set() {
        let args = Cli::try_parse_from(["serve", "--max-components", "7"]).unwrap().args;
        let layer = args.layer();
        assert_eq!((layer.max_components, layer.compile_timeout_ms), (Some(7), None));
    }
}
