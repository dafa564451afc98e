//! The `shardalloc` command line.

pub mod admin;
pub mod artifacts;
pub mod attributes;
pub mod compile;
pub mod drain;
pub mod events;
pub mod freeze;
pub mod plan;
pub mod regions;
pub mod serve;
pub mod store;
pub mod strategy;

pub mod uploads;

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
    Serve(Box<serve::ServeArgs>),
    /// List and delete entity types on a running node.
    #[command(subcommand)]
    Types(admin::TypesCommand),
    /// Pin shards to regions on a running node.
    #[command(subcommand)]
    Placements(admin::PlacementsCommand),
    /// Give shards attributes (`tenant=acme`) strategies read, on a running node.
    #[command(subcommand)]
    Attributes(attributes::AttributesCommand),
    /// Move shards now (or at the next rebalance tick) on a running node.
    Rebalance(admin::RebalanceArgs),
    /// Upload, activate, roll back and list strategies on a running node.
    #[command(subcommand)]
    Strategies(admin::StrategiesCommand),
    /// Drain a region on a running node: it gets no new shard and its shards
    /// are handed off; --wait waits until it holds none.
    Drain(drain::DrainArgs),
    /// What a strategy would do on a running node's type with regions added,
    /// removed or drained, or shards given other loads. Nothing changes.
    Plan(plan::PlanArgs),
    /// Freeze a type (or every type) on a running node, lift a freeze, or
    /// show the freezes: while frozen, the strategy moves no shard.
    #[command(subcommand)]
    Freeze(freeze::FreezeCommand),
    /// Tail the node's decision event stream: every shard homed, hand-off,
    /// placement, strategy change and region change, as it happens.
    Events(events::EventsArgs),
    /// Simulate regions: connect N regions to a node and route traffic between them.
    Regions(regions::RegionsArgs),
    /// Check a stopped node's store.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// The node's compiler process (internal: bytes on stdin, artifact on stdout).
    #[command(name = "internal-compile", hide = true)]
    InternalCompile,
}

/// Runs a parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Strategy(command) => strategy::run(command),
        Command::Serve(args) => serve::run(*args),
        Command::Types(command) => admin::types(command),
        Command::Placements(command) => admin::placements(command),
        Command::Attributes(command) => attributes::run(command),
        Command::Rebalance(args) => admin::rebalance(args),
        Command::Strategies(command) => admin::strategies(command),
        Command::Drain(args) => drain::run(args),
        Command::Freeze(command) => freeze::run(command),
        Command::Plan(args) => plan::run(args),
        Command::Regions(args) => regions::run(args),
        Command::Events(args) => events::run(args),
        Command::Store(command) => store::run(command),
        Command::InternalCompile => compile::run(),
    }
}

/// `text` as a terminal may show it: control characters (an escape
/// sequence, a newline that would fake a row) are written as escapes.
pub fn shown(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM: how long-running commands stop.
pub async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(super::shown("cart"), "cart");
        assert_eq!(super::shown("a\u{1b}[2Jb\nc\td\0"), "a\\u{1b}[2Jb\\nc\\td\\u{0}");
        assert_eq!(super::shown("zoné ✓"), "zoné ✓");
    }
}
