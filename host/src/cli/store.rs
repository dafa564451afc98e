//! `shardalloc store`: looks at a node's data directory while the node is
//! stopped, copies it into etcd (moving a node alone to several nodes), and
//! drops the copies of older schemas' stores that migrations kept.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use shardalloc::store::redb::{Checked, FILE_NAME, kept_copy};
use shardalloc::store::{EtcdConfig, EtcdStore, RedbStore, SCHEMA_VERSION, Store, StoreError};

/// `shardalloc store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Read the whole store without writing to it: says whether it is sound,
    /// left by a crash (the node recovers it at start) or damaged (exit 1).
    Check(CheckArgs),
    /// Copy a stopped node's embedded store into an empty etcd prefix, with
    /// every uploaded component: then start nodes with `--etcd`.
    Copy(CopyArgs),
    /// Delete the copies of older schemas' stores that migrations kept (the
    /// data directory's `shardalloc.v1.redb` and `shardalloc.v2.redb`, or
    /// etcd's `{prefix}v1/` and `{prefix}v2/` keys): after it, the store
    /// cannot go back to an older shardalloc. (`drop-v1` is its older name.)
    #[command(name = "drop-copies", alias = "drop-v1")]
    DropCopies(DropCopiesArgs),
}

/// `shardalloc store drop-copies` flags: one store, embedded or etcd.
#[derive(Debug, Args)]
#[group(skip)]
#[command(group = clap::ArgGroup::new("store").required(true).args(["data", "etcd"]))]
pub struct DropCopiesArgs {
    /// The node's data directory (embedded store).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// etcd client URLs, comma-separated.
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',')]
    etcd: Option<Vec<String>>,
    /// The store's key prefix in etcd.
    #[arg(long, default_value = shardalloc::store::etcd::DEFAULT_PREFIX, requires = "etcd")]
    etcd_prefix: String,
}

/// `shardalloc store copy` flags.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The stopped node's data directory.
    #[arg(long = "from", value_name = "DIR")]
    from: PathBuf,
    /// etcd client URLs, comma-separated.
    #[arg(long = "to-etcd", value_name = "URL[,URL…]", value_delimiter = ',', required = true)]
    to_etcd: Vec<String>,
    /// The key prefix to copy into (must hold no store yet).
    #[arg(long, default_value = shardalloc::store::etcd::DEFAULT_PREFIX)]
    etcd_prefix: String,
}

/// `shardalloc store check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The node's data directory.
    #[arg(long, env = "SHARDALLOC_DATA")]
    data: PathBuf,
    /// Fail (exit 1) on a store of an older schema, which a node started
    /// with `--no-migrate` refuses; without it, such a store is reported
    /// as sound and to be migrated when the node starts.
    #[arg(long)]
    no_migrate: bool,
}

/// Runs a `shardalloc store` command.
pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    match command {
        StoreCommand::Check(args) => check(&args),
        StoreCommand::Copy(args) => copy(&args),
        StoreCommand::DropCopies(args) => drop_copies(&args),
    }
}

fn drop_copies(args: &DropCopiesArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.data {
        let dropped = shardalloc::store::redb::drop_kept_copies(dir)?;
        if dropped.is_empty() {
            println!("no copy of an older store is kept in {}: nothing to drop", dir.display());
        }
        for (copy, bytes) in dropped {
            let copy = super::shown(&copy.display().to_string()).to_string();
            println!("dropped {copy} ({bytes} bytes): the store can no longer go back to the schema it holds");
        }
    }
    if let Some(endpoints) = &args.etcd {
        // Not migrated here: a store of an older schema is refused, naming
        // both versions (its keys are the store itself, not a copy).
        let config =
            EtcdConfig { prefix: args.etcd_prefix.clone(), migrate: false, ..EtcdConfig::new(endpoints.clone()) };
        let store = EtcdStore::open(&config)?;
        let dropped: Vec<(String, i64)> = store.drop_kept_copies()?.into_iter().filter(|(_, keys)| *keys > 0).collect();
        if dropped.is_empty() {
            println!("no copy of an older store is kept in {}: nothing to drop", store.describe());
        }
        for (copy, keys) in dropped {
            println!(
                "dropped {keys} keys under {copy} in {}: the store can no longer go back to the schema they hold",
                store.describe()
            );
        }
    }
    Ok(())
}

fn copy(args: &CopyArgs) -> anyhow::Result<()> {
    let from = match RedbStore::open(&args.from) {
        Ok(store) => store,
        Err(StoreError::InUse { .. }) => {
            bail!("{} is in use by a running node: stop the node first", args.from.display())
        }
        Err(other) => return Err(other.into()),
    };
    let loaded = from.load()?;
    let config = EtcdConfig { prefix: args.etcd_prefix.clone(), ..EtcdConfig::new(args.to_etcd.clone()) };
    let to = EtcdStore::open(&config)?;
    let digests = from.blob_digests()?;
    for (i, digest) in digests.iter().enumerate() {
        let bytes = from.blob(digest)?.ok_or_else(|| anyhow::anyhow!("component {digest} vanished"))?;
        to.put_blob(digest, &bytes)?;
        eprintln!("component {}/{}: {digest} ({} bytes)", i + 1, digests.len(), bytes.len());
    }
    let (revision, types) = (loaded.revision, loaded.types.len());
    let (placements, homes): (usize, usize) = loaded
        .types
        .values()
        .map(|t| (t.durable.placements.len(), t.durable.homes.len()))
        .fold((0, 0), |(p, h), (tp, th)| (p + tp, h + th));
    to.import(loaded)?;
    let check = EtcdStore::open(&config)?.load()?;
    if check.revision != revision || check.types.len() != types {
        bail!("the copy reads back differently (revision {}, {} types)", check.revision, check.types.len());
    }
    println!(
        "copied {} (revision {revision}: {types} types, {homes} homed shards, {placements} placements, {} components) to {}",
        args.from.display(),
        digests.len(),
        to.describe()
    );
    Ok(())
}

fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let file = args.data.join(FILE_NAME);
    let file = super::shown(&file.display().to_string());
    match RedbStore::check(&args.data) {
        Ok(Checked::Empty) => println!(
            "empty: no store in {} yet; a node started there creates one",
            super::shown(&args.data.display().to_string())
        ),
        Ok(Checked::Sound(c)) if c.schema < SCHEMA_VERSION && args.no_migrate => {
            bail!("{}", StoreError::NotMigrated { what: file.to_string(), found: c.schema, current: SCHEMA_VERSION })
        }
        Ok(Checked::Sound(c)) => {
            println!(
                "sound: {file} ({} bytes, schema {}, revision {}): {} types, {} regions, {} homed shards, {} placements, {} components",
                c.file_bytes, c.schema, c.revision, c.types, c.regions, c.homes, c.placements, c.components
            );
            if c.schema < SCHEMA_VERSION {
                println!(
                    "schema {} is older than this shardalloc's ({SCHEMA_VERSION}): a node started here migrates it \
                     (keeping a copy as {}), or refuses it with --no-migrate",
                    c.schema,
                    kept_copy(c.schema)
                );
            } else {
                println!("schema {}: current", c.schema);
            }
            for copy in &c.kept_copies {
                println!(
                    "a copy of the store before a migration is kept: {}; delete it (`shardalloc store drop-copies`) \
                     once you no longer need to go back",
                    super::shown(&copy.display().to_string())
                );
            }
        }
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
