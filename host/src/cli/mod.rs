//! The `shardalloc` command line.

pub mod serve;
pub mod strategy;

use clap::{Parser, Subcommand};

/// shardalloc: shard placement with programmable, hot-swappable strategies.
#[derive(Debug, Parser)]
#[command(name = "shardalloc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect, evaluate and simulate allocation strategies offline.
    #[command(subcommand)]
    Strategy(strategy::StrategyCommand),
    /// Run the node: coordinator, admin REST API and region sessions on one port.
    Serve(serve::ServeArgs),
}

/// Runs a parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Strategy(command) => strategy::run(command),
        Command::Serve(args) => serve::run(args),
    }
}
