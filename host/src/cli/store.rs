//! `shardalloc store`: looks at a node's data directory while the node is
//! stopped.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use shardalloc::store::RedbStore;
use shardalloc::store::StoreError;
use shardalloc::store::redb::{Checked, FILE_NAME};

/// `shardalloc store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Read the whole store without writing to it: says whether it is sound,
    /// left by a crash (the node recovers it at start) or damaged (exit 1).
    Check(CheckArgs),
}

/// `shardalloc store check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The node's data directory.
    #[arg(long, env = "SHARDALLOC_DATA")]
    data: PathBuf,
}

/// Runs a `shardalloc store` command.
pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    match command {
        StoreCommand::Check(args) => check(&args),
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let file = args.data.join(FILE_NAME);
    let file = super::shown(&file.display().to_string());
    match RedbStore::check(&args.data) {
        Ok(Checked::Empty) => println!(
            "empty: no store in {} yet; a node started there creates one",
            super::shown(&args.data.display().to_string())
        ),
        Ok(Checked::Sound(c)) => println!(
            "sound: {file} ({} bytes, schema {}, revision {}): {} types, {} regions, {} homed shards, {} placements, {} components",
            c.file_bytes, c.schema, c.revision, c.types, c.regions, c.homes, c.placements, c.components
        ),
        Ok(Checked::NeedsRecovery) => println!(
            "needs recovery: {file} was not closed cleanly (the node was killed or the machine stopped); \
             the node recovers it when it next starts"
        ),
        Err(StoreError::Damaged { problem, .. }) => {
            bail!("damaged: {file}: {problem}. Nothing was written to it; restore the data directory from a backup")
        }
        Err(StoreError::InUse { .. }) => bail!("{file} is in use by a running node: stop the node first"),
        Err(other) => return Err(other.into()),
    }
    Ok(())
}
