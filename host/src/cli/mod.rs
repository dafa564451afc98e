//! The `shardalloc` command line.

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
}

/// Runs a parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Strategy(command) => strategy::run(command),
    }
}
