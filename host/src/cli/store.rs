//! `shardalloc store`: looks at a node's data directory while the node is
//! stopped, copies it into etcd (moving a node alone to several nodes), and
//! drops the copy of a schema-1 store a migration kept.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use shardalloc::store::redb::{Checked, FILE_NAME, V1_COPY};
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
    /// Delete the copy of the schema-1 store a migration kept (the data
    /// directory's `shardalloc.v1.redb`, or etcd's `{prefix}v1/` keys):
    /// after it, the store cannot go back to a shardalloc of schema 1.
    #[command(name = "drop-v1")]
    DropV1(DropV1Args),
}

/// `shardalloc store drop-v1` flags: one store, embedded or etcd.
#[derive(Debug, Args)]
#[group(skip)]
#[command(group = clap::ArgGroup::new("store").required(true).args(["data", "etcd"]))]
pub struct DropV1Args {
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
        StoreCommand::DropV1(args) => drop_v1(&args),
    }
}

fn drop_v1(args: &DropV1Args) -> anyhow::Result<()> {
    if let Some(dir) = &args.data {
        let copy = super::shown(&dir.join(V1_COPY).display().to_string()).to_string();
        match shardalloc::store::redb::drop_v1_copy(dir)? {
            Some(bytes) => println!("dropped {copy} ({bytes} bytes): the store can no longer go back to schema 1"),
            None => println!("no copy of a schema-1 store is kept in {}: nothing to drop", dir.display()),
        }
    }
    if let Some(endpoints) = &args.etcd {
        // Not migrated here: a store of schema 1 is refused, naming both
        // versions (its schema-1 keys are the store itself, not a copy).
        let config =
            EtcdConfig { prefix: args.etcd_prefix.clone(), migrate: false, ..EtcdConfig::new(endpoints.clone()) };
        let store = EtcdStore::open(&config)?;
        let copy = store.keys().v1_copy();
        match store.drop_v1_copy()? {
            0 => println!("no copy of a schema-1 store is kept under {copy} in {}: nothing to drop", store.describe()),
            keys => println!(
                "dropped {keys} keys under {copy} in {}: the store can no longer go back to schema 1",
                store.describe()
            ),
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
                     (keeping a copy as {V1_COPY}), or refuses it with --no-migrate",
                    c.schema
                );
            } else {
                println!("schema {}: current", c.schema);
            }
            if c.v1_copy {
                println!(
                    "a copy of the store before its migration is kept: {}; delete it once you no longer need to go back",
                    super::shown(&args.data.join(V1_COPY).display().to_string())
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
