//! `shardalloc attributes set|write|show`: shard attributes on a running
//! node. `set` writes one shard's, `write` many from a JSON file (checked
//! whole before anything is sent, then sent 10,000 shards a request with
//! progress), `show` prints one shard's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::protocol::check_shard_id;

use super::admin::{NodeArgs, print_json, runtime};
use super::shown;

/// Shards one request writes: the node's limit.
const PER_REQUEST: usize = 10_000;

/// `shardalloc attributes …`
#[derive(Debug, Subcommand)]
pub enum AttributesCommand {
    /// Sets one shard's attributes: `set TYPE SHARD KEY=VALUE…`; with no
    /// pairs, clears them.
    Set {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// The shard.
        shard: String,
        /// Its attributes, each `KEY=VALUE` (all of them: those not given are removed).
        pairs: Vec<String>,
    },
    /// Writes many shards' attributes from a JSON file (`-`: standard
    /// input) of `{"SHARD": {"KEY": "VALUE", …}, …}`: every shard's whole
    /// map, `{}` to clear. The file is checked whole first; then it is sent
    /// 10,000 shards a request, each request all or nothing.
    Write {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// The JSON file.
        file: PathBuf,
    },
    /// Shows one shard's attributes.
    Show {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// The shard.
        shard: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Pairs given as `KEY=VALUE` words, checked.
fn parsed(pairs: &[String]) -> anyhow::Result<ShardAttributes> {
    let mut map = BTreeMap::new();
    for pair in pairs {
        let (key, value) = pair.split_once('=').with_context(|| format!("{} is not KEY=VALUE", shown(pair)))?;
        if map.insert(key.to_owned(), value.to_owned()).is_some() {
            anyhow::bail!("attribute {} is given twice", shown(key));
        }
    }
    Ok(ShardAttributes::from_map(map)?)
}

/// A file of shards' attributes, every shard and pair checked.
fn read_file(file: &PathBuf) -> anyhow::Result<Vec<(String, ShardAttributes)>> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("read standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?
    };
    let raw: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON object of shards, each an object of strings", file.display()))?;
    raw.into_iter()
        .map(|(shard, pairs)| {
            check_shard_id(&shard).map_err(|e| anyhow::anyhow!("shard {}: {e}", shown(&shard)))?;
            let attributes = ShardAttributes::from_map(pairs).with_context(|| format!("shard {}", shown(&shard)))?;
            Ok((shard, attributes))
        })
        .collect()
}

/// Runs `shardalloc attributes …`.
pub fn run(command: AttributesCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match command {
            AttributesCommand::Set { node, entity_type, shard, pairs } => {
                let attributes = parsed(&pairs)?;
                let written = node.client()?.set_shard_attributes(&entity_type, &shard, &attributes).await?;
                let what = if written.changed.is_empty() { "unchanged" } else { "written" };
                println!("attributes of {} {what}: {attributes:?}", shown(&shard));
            }
            AttributesCommand::Write { node, entity_type, file } => {
                let writes = read_file(&file)?;
                anyhow::ensure!(!writes.is_empty(), "{} names no shards", file.display());
                let client = node.client()?;
                let (total, mut sent, mut changed) = (writes.len(), 0, 0);
                let mut writes = writes.into_iter().peekable();
                while writes.peek().is_some() {
                    let chunk: BTreeMap<_, _> = writes.by_ref().take(PER_REQUEST).collect();
                    let size = chunk.len();
                    let written = client.write_attributes(&entity_type, chunk).await.with_context(|| {
                        format!("after {sent} of {total} shards were written ({changed} changed), a request failed")
                    })?;
                    sent += size;
                    changed += written.changed.len();
                    if total > PER_REQUEST {
                        eprintln!("{sent} of {total} shards written");
                    }
                }
                println!("{total} shard(s) written; {changed} changed");
            }
            AttributesCommand::Show { node, entity_type, shard, json } => {
                let state = node.client()?.shard(&entity_type, &shard).await?;
                if json {
                    return print_json(&state.attributes);
                }
                for (key, value) in state.attributes.iter() {
                    println!("{}={}", shown(key), shown(value));
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_read_as_key_equals_value_and_checked() {
        let attributes = parsed(&["tenant=acme".into(), "note=a=b".into(), "empty=".into()]).unwrap();
        assert_eq!(attributes.get("note"), Some("a=b"));
        assert_eq!(attributes.get("empty"), Some(""));
        assert!(parsed(&[]).unwrap().is_empty());
        let cases = [
            (vec!["tenant"], "tenant is not KEY=VALUE"),
            (vec!["a=1", "a=2"], "attribute a is given twice"),
            (vec!["a b=1"], "an attribute key is 1 to 64 bytes"),
        ];
        for (pairs, expected) in cases {
            let pairs: Vec<String> = pairs.into_iter().map(String::from).collect();
            let error = format!("{:#}", parsed(&pairs).unwrap_err());
            assert!(error.contains(expected), "{pairs:?}: {error}");
        }
    }

    #[test]
    fn a_file_is_checked_whole_naming_the_shard() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("attributes.json");
        std::fs::write(&file, r#"{"a": {"tenant": "acme"}, "b": {}}"#).unwrap();
        let writes = read_file(&file).unwrap();
        assert_eq!(writes.len(), 2);
        assert!(writes[1].1.is_empty());
        for (text, expected) in [
            (r#"{"a": {"bad key": "x"}}"#, "shard a: an attribute key"),
            (r#"{"": {"k": "v"}}"#, "shard : a shard id is empty"),
            (r#"{"a": {"k": 1}}"#, "is not a JSON object of shards"),
            ("[]", "is not a JSON object of shards"),
        ] {
            std::fs::write(&file, text).unwrap();
            let error = format!("{:#}", read_file(&file).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
