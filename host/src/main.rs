//! The `shardalloc` binary.

mod cli;

use clap::Parser;

/// jemalloc, with its background threads, returns freed memory to the
/// system within seconds; glibc's allocator kept ~110 MiB after a flood of
/// 4,000 connections had closed, and mimalloc most of it (measured in
/// docs/performance.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHARDALLOC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", cli::shown(&format!("{error:#}")));
            std::process::ExitCode::FAILURE
        }
    }
}
