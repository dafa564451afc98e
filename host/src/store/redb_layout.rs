//! The redb file's layout: its tables, how a row of each is read at every
//! schema (1 and 2 to migrate, 3 as written), the whole state read in one
//! transaction ([`read_loaded`]), and the [`Writer`] that writes schema 3.
//! [`RedbStore`](super::redb::RedbStore) opens, checks and commits through
//! it; [`redb_migrate`](super::redb_migrate) reads an older schema and
//! writes the current one with it, so neither imports the other.
//!
//! Tables (keys are `(type, id)` tuples; values are the records of
//! [`records`](super::records), schema 3, unless noted; schema 1 wrote the
//! core's types as JSON and schema 2 postcard records with three more
//! tables, and `redb_migrate.rs` rewrites those):
//!
//! | table          | key                 | value                           |
//! |----------------|---------------------|---------------------------------|
//! | `meta`         | name                | u64 (`schema`, `revision`, `home-order`) |
//! | `types`        | type                | `records::TypeRow`: declaration, signal, next join order, highest epoch, freezes and drains |
//! | `regions`      | (type, address)     | `records::Region` without its shard list |
//! | `homes`        | (type, shard)       | `records::HomeRow`: the home (with its epoch) and its allocation order |
//! | `handoffs`     | (type, shard)       | owner address (text)            |
//! | `placements`   | (type, shard)       | `records::Placement` (tombstones too) |
//! | `queued`       | (type, shard)       | nothing                         |
//! | `loads`        | (type, shard)       | `records::ShardLoad`: kept apart from `homes` because it is rewritten at its own pace (every load save), not with the home |
//! | `attributes`   | (type, shard)       | `records::Attributes`: a shard's attributes, kept apart from `homes` because they outlive its home (a store written before them has no such table, and reads on) |
//! | `activations`  | (type, number)      | `records::Activation`           |
//! | `components`   | digest              | component bytes (the blobs)     |
//! | `component-info` | digest            | `records::Component`            |
//!
//! A region's shard list is not stored: it is rebuilt from `homes` in
//! allocation order, exactly as [`Durable::apply`] builds it.
//!
//! Schema 2 kept a type's freezes and drains in an `operations` table and
//! the epochs in `home-epochs` and `epochs`; they are read only from a
//! schema-2 file (`store check`, and to migrate it), and the migration
//! drops them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use super::records::{self, TypeValues, v1, v2};
use super::{ActivationRecord, ComponentRecord, Loaded, LoadedType, SCHEMA_VERSION, StoreError};
use crate::coordinator::{Change, Durable, Home, Interned, PlacementEntry, RegionRecord, ShardLoad};

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const TYPES: TableDefinition<&str, &[u8]> = TableDefinition::new("types");
pub(super) const REGIONS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("regions");
pub(super) const HOMES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("homes");
pub(super) const HANDOFFS: TableDefinition<(&str, &str), &str> = TableDefinition::new("handoffs");
pub(super) const PLACEMENTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("placements");
pub(super) const QUEUED: TableDefinition<(&str, &str), ()> = TableDefinition::new("queued");
pub(super) const LOADS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("loads");
pub(super) const ATTRIBUTES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("attributes");
/// Schema 2's: a type's freezes and drains (now in its `types` row).
pub(super) const V2_OPERATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("operations");
/// Schema 2's: the epoch of each shard's home (now in its `homes` row).
pub(super) const V2_HOME_EPOCHS: TableDefinition<(&str, &str), u64> = TableDefinition::new("home-epochs");
/// Schema 2's: the highest epoch of each type (now in its `types` row).
pub(super) const V2_EPOCHS: TableDefinition<&str, u64> = TableDefinition::new("epochs");
pub(super) const ACTIVATIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("activations");
pub(super) const COMPONENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("components");
pub(super) const COMPONENT_INFO: TableDefinition<&str, &[u8]> = TableDefinition::new("component-info");

/// The file name inside the data directory.
pub const FILE_NAME: &str = "shardalloc.redb";

/// The copy of a store of schema `schema`, in the data directory, that
/// migrating it keeps (`shardalloc.v1.redb`, `shardalloc.v2.redb`; delete
/// it to drop it: docs/operations.md).
pub fn kept_copy(schema: u64) -> String {
    format!("shardalloc.v{schema}.redb")
}

/// A row of `table` stored with `schema`: schema 1 read as the JSON record
/// `V1`, schema 2 as the postcard record `V2`, schema 3 as the record `V3`.
pub(super) fn row<V1, V2, V3, T>(schema: u64, table: &'static str, bytes: &[u8]) -> Result<T, StoreError>
where
    V1: serde::de::DeserializeOwned + Into<T>,
    V2: serde::de::DeserializeOwned + Into<T>,
    V3: for<'b> minicbor::Decode<'b, ()> + Into<T>,
{
    records::decode_as::<V1, V2, V3, T>(schema, bytes)
        .map_err(|detail| StoreError::Corrupt { what: format!("table {table}"), detail })
}

fn type_row(schema: u64, bytes: &[u8]) -> Result<TypeValues, StoreError> {
    row::<v1::TypeRow, v2::TypeRow, records::TypeRow, _>(schema, "types", bytes)
}

pub(super) fn home_row(schema: u64, bytes: &[u8]) -> Result<(Home, u64), StoreError> {
    row::<v1::HomeRow, v2::HomeRow, records::HomeRow, _>(schema, "homes", bytes)
}

pub(super) fn placement(schema: u64, bytes: &[u8]) -> Result<PlacementEntry, StoreError> {
    row::<v1::PlacementEntry, v2::Placement, records::Placement, _>(schema, "placements", bytes)
}

pub(super) fn region_row(schema: u64, bytes: &[u8]) -> Result<RegionRecord, StoreError> {
    row::<v1::Region, v2::Region, records::Region, _>(schema, "regions", bytes)
}

pub(super) fn activation_row(schema: u64, bytes: &[u8]) -> Result<ActivationRecord, StoreError> {
    row::<v1::Activation, v2::Activation, records::Activation, _>(schema, "activations", bytes)
}

pub(super) fn component_row(schema: u64, bytes: &[u8]) -> Result<ComponentRecord, StoreError> {
    row::<v1::Component, v2::Component, records::Component, _>(schema, "component-info", bytes)
}

pub(super) fn db<E: Into<redb::Error>>(error: E) -> StoreError {
    StoreError::Backend { backend: "redb", source: Box::new(error.into()) }
}

/// Everything [`Store::load`] answers, read in one transaction; a store of
/// a newer schema is refused first.
pub(super) fn read_loaded(txn: &redb::ReadTransaction) -> Result<Loaded, StoreError> {
    let meta = txn.open_table(META).map_err(db)?;
    let schema = meta.get("schema").map_err(db)?.map_or(0, |v| v.value());
    if schema > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: schema, supported: SCHEMA_VERSION });
    }
    let revision = meta.get("revision").map_err(db)?.map_or(0, |v| v.value());
    let types = read_types(txn, None, schema)?;
    let mut components = BTreeMap::new();
    for entry in txn.open_table(COMPONENT_INFO).map_err(db)?.iter().map_err(db)? {
        let (key, value) = entry.map_err(db)?;
        let record = component_row(schema, value.value())?;
        components.insert(key.value().to_owned(), record);
    }
    Ok(Loaded { revision, types, components })
}

/// The rows of a table keyed by (type, …): all of them, or one type's.
fn rows<V: redb::Value + 'static>(
    table: &redb::ReadOnlyTable<(&'static str, &'static str), V>,
    only: Option<&str>,
) -> Result<redb::Range<'static, (&'static str, &'static str), V>, StoreError> {
    match only {
        None => table.range::<(&str, &str)>(..).map_err(db),
        Some(t) => {
            let next = format!("{t}\0");
            table.range((t, "")..(next.as_str(), "")).map_err(db)
        }
    }
}

/// The rows of a table keyed by type name: every row, or the one of type
/// `only`.
fn named_rows<V: redb::Value + 'static>(
    table: &redb::ReadOnlyTable<&'static str, V>,
    only: Option<&str>,
) -> Result<redb::Range<'static, &'static str, V>, StoreError> {
    match only {
        None => table.range::<&str>(..).map_err(db),
        Some(t) => table.range(t..=t).map_err(db),
    }
}

/// One type's homes as a start reads them, row by row in shard order, into
/// the map and the regions' shard lists (in allocation order) that
/// [`Durable::apply`] would have built. The map is built in one go from
/// the sorted rows, which fills every B-tree node (inserting the homes one
/// by one in allocation order left the nodes about two thirds full); each
/// row is read in place, and only its shard id is copied.
struct TypeHomes {
    /// The type's regions: each address (shared) and its index.
    regions: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    interned: Interned,
    /// The homes, in shard order.
    kept: Vec<(String, Home)>,
    /// Per region, its homes' (allocation order, index in `kept`).
    placed: Vec<Vec<(u64, usize)>>,
}

impl TypeHomes {
    fn new(durable: &Durable, capacity: usize) -> Self {
        let mut interned = Interned::default();
        let regions: HashMap<_, _, _> =
            durable.regions.keys().enumerate().map(|(i, address)| (interned.address(address), i)).collect();
        let placed = vec![Vec::new(); regions.len()];
        TypeHomes { regions, interned, kept: Vec::with_capacity(capacity), placed }
    }

    /// Reads the row of `shard`; a home whose region is gone went with it
    /// (as in `Durable::apply`).
    fn read(&mut self, schema: u64, shard: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let (home, order, index) = if schema == SCHEMA_VERSION {
            let (address, read) = records::read_home_row(bytes, &mut self.interned)
                .map_err(|detail| StoreError::Corrupt { what: "table homes".into(), detail })?;
            let Some((region, &index)) = self.regions.get_key_value(address) else { return Ok(()) };
            (Home { region: region.clone(), reason: read.reason, at: read.at, epoch: read.epoch }, read.order, index)
        } else {
            let (home, order) = home_row(schema, bytes)?;
            let Some(&index) = self.regions.get(&*home.region) else { return Ok(()) };
            (self.interned.home(home), order, index)
        };
        self.placed[index].push((order, self.kept.len()));
        self.kept.push((shard.to_owned(), home));
        Ok(())
    }

    fn finish(self, durable: &mut Durable) {
        let TypeHomes { interned, kept, placed, .. } = self;
        // Sorting a thousand short lists is about twice as fast as one long one.
        for (region, mut placed) in durable.regions.values_mut().zip(placed) {
            placed.sort_unstable();
            region.shards = placed.into_iter().map(|(_, at)| kept[at].0.clone()).collect();
        }
        durable.interned = interned;
        durable.homes = kept.into_iter().collect();
    }
}

/// The loaded type `name`, empty when first met: its name is copied once,
/// not once per row (a start reads a million rows of one type).
fn of<'m>(types: &'m mut BTreeMap<String, LoadedType>, name: &str) -> &'m mut LoadedType {
    if !types.contains_key(name) {
        types.insert(name.to_owned(), LoadedType::default());
    }
    types.get_mut(name).expect("inserted above")
}

/// Every type's state (or only `only`'s) as one read transaction sees it,
/// its rows of `schema`.
pub(super) fn read_types(
    txn: &redb::ReadTransaction,
    only: Option<&str>,
    schema: u64,
) -> Result<BTreeMap<String, LoadedType>, StoreError> {
    let mut types: BTreeMap<String, LoadedType> = BTreeMap::new();
    for entry in named_rows(&txn.open_table(TYPES).map_err(db)?, only)? {
        let (name, value) = entry.map_err(db)?;
        let row = type_row(schema, value.value())?;
        let loaded = of(&mut types, name.value());
        loaded.record = row.record;
        loaded.durable.signal = row.signal;
        loaded.durable.next_join_order = row.next_join_order;
        loaded.durable.epoch = row.epoch;
        loaded.durable.operations = row.operations;
    }
    for entry in rows(&txn.open_table(REGIONS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, address) = key.value();
        let record = region_row(schema, value.value())?;
        of(&mut types, t).durable.regions.insert(address.to_owned(), record);
    }
    let homes_table = txn.open_table(HOMES).map_err(db)?;
    // Every row is read when reading every type; for one type, the table's
    // length would overstate its share.
    let mut unread = match only {
        None => usize::try_from(homes_table.len().map_err(db)?).unwrap_or(0),
        Some(_) => 0,
    };
    // The rows come sorted by type: only a row of a new type starts one.
    let mut homes: Vec<(String, TypeHomes)> = Vec::new();
    for entry in rows(&homes_table, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        if homes.last().is_none_or(|(last, _)| last != t) {
            // Sized for all the rows left, so a million homes of one type
            // are not copied as its list grows.
            homes.push((t.to_owned(), TypeHomes::new(&of(&mut types, t).durable, unread)));
        }
        let (_, read) = homes.last_mut().expect("pushed above");
        read.read(schema, shard, value.value())?;
        unread = unread.saturating_sub(1);
    }
    for (t, read) in homes {
        read.finish(&mut of(&mut types, &t).durable);
    }
    for entry in rows(&txn.open_table(HANDOFFS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        of(&mut types, t).durable.handoffs.insert(shard.to_owned(), value.value().to_owned());
    }
    for entry in rows(&txn.open_table(PLACEMENTS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        let placement = placement(schema, value.value())?;
        of(&mut types, t).durable.placements.insert(shard.to_owned(), placement);
    }
    for entry in rows(&txn.open_table(QUEUED).map_err(db)?, only)? {
        let (key, _) = entry.map_err(db)?;
        let (t, shard) = key.value();
        of(&mut types, t).durable.queued.insert(shard.to_owned());
    }
    // A file checked without being opened for writing may predate the table.
    match txn.open_table(LOADS) {
        Ok(table) => {
            for entry in rows(&table, only)? {
                let (key, value) = entry.map_err(db)?;
                let (t, shard) = key.value();
                let load = match schema {
                    records::SCHEMA_V2 => v2::decode::<v2::ShardLoad>(value.value()).map(Into::into),
                    _ => records::decode::<records::ShardLoad>(value.value()).map(Into::into),
                };
                let load = load.map_err(|detail| StoreError::Corrupt { what: "table loads".to_owned(), detail })?;
                of(&mut types, t).durable.loads.insert(shard.to_owned(), load);
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(db(error)),
    }
    // Schema 3 stores written before attributes were kept have no table.
    match txn.open_table(ATTRIBUTES) {
        Ok(table) => {
            for entry in rows(&table, only)? {
                let (key, value) = entry.map_err(db)?;
                let (t, shard) = key.value();
                let attributes = records::decode::<records::Attributes>(value.value())
                    .map_err(|detail| StoreError::Corrupt { what: "table attributes".to_owned(), detail })?;
                of(&mut types, t).durable.attributes.insert(shard.to_owned(), attributes.into());
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(db(error)),
    }
    if schema == records::SCHEMA_V2 {
        read_v2_side_tables(txn, only, &mut types)?;
    }
    let activations = txn.open_table(ACTIVATIONS).map_err(db)?;
    let activation_rows = match only {
        None => activations.iter().map_err(db)?,
        Some(t) => activations.range((t, 0)..=(t, u64::MAX)).map_err(db)?,
    };
    for entry in activation_rows {
        let (key, value) = entry.map_err(db)?;
        let (t, _) = key.value();
        let activation = activation_row(schema, value.value())?;
        of(&mut types, t).activations.push(activation);
    }
    Ok(types)
}

/// What a schema-2 file keeps in its side tables (after the homes): the
/// types' freezes and drains, their highest epochs and their homes' epochs.
/// A table the file predates reads as empty.
fn read_v2_side_tables(
    txn: &redb::ReadTransaction,
    only: Option<&str>,
    types: &mut BTreeMap<String, LoadedType>,
) -> Result<(), StoreError> {
    match txn.open_table(V2_OPERATIONS) {
        Ok(table) => {
            for entry in named_rows(&table, only)? {
                let (name, value) = entry.map_err(db)?;
                let row: v2::Operations = v2::decode(value.value())
                    .map_err(|detail| StoreError::Corrupt { what: "table operations".to_owned(), detail })?;
                of(types, name.value()).durable.operations = row.into();
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(db(error)),
    }
    match txn.open_table(V2_EPOCHS) {
        Ok(table) => {
            for entry in named_rows(&table, only)? {
                let (name, epoch) = entry.map_err(db)?;
                of(types, name.value()).durable.epoch = epoch.value();
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(error) => return Err(db(error)),
    }
    let table = match txn.open_table(V2_HOME_EPOCHS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(error) => return Err(db(error)),
    };
    for entry in rows(&table, only)? {
        let (key, epoch) = entry.map_err(db)?;
        let (t, shard) = key.value();
        if let Some(home) = types.get_mut(t).and_then(|loaded| loaded.durable.homes.get_mut(shard)) {
            home.epoch = epoch.value();
        }
    }
    Ok(())
}

/// Applies one coordinator change to the tables. The `types` rows a turn
/// touches are read once, changed in memory and written once at its end
/// ([`Writer::finish`]): a turn that homes 10,000 shards raises its type's
/// highest epoch 10,000 times.
pub(super) struct Writer<'t> {
    pub(super) types: redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) regions: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) homes: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) handoffs: redb::Table<'t, (&'static str, &'static str), &'static str>,
    pub(super) placements: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) queued: redb::Table<'t, (&'static str, &'static str), ()>,
    pub(super) loads: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) attributes: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) home_order: u64,
    /// The `types` rows read or changed in this turn (`None`: deleted).
    rows: BTreeMap<String, Option<TypeValues>>,
}

impl<'t> Writer<'t> {
    /// A writer of the tables of `txn`, the next home order after
    /// `home_order`.
    pub(super) fn open(txn: &'t redb::WriteTransaction, home_order: u64) -> Result<Self, StoreError> {
        Ok(Writer {
            types: txn.open_table(TYPES).map_err(db)?,
            regions: txn.open_table(REGIONS).map_err(db)?,
            homes: txn.open_table(HOMES).map_err(db)?,
            handoffs: txn.open_table(HANDOFFS).map_err(db)?,
            placements: txn.open_table(PLACEMENTS).map_err(db)?,
            queued: txn.open_table(QUEUED).map_err(db)?,
            loads: txn.open_table(LOADS).map_err(db)?,
            attributes: txn.open_table(ATTRIBUTES).map_err(db)?,
            home_order,
            rows: BTreeMap::new(),
        })
    }

    /// Type `name`'s row, as this turn has it so far (empty when new: it is
    /// written at the end of the turn either way).
    pub(super) fn type_row(&mut self, name: &str) -> Result<&mut TypeValues, StoreError> {
        if !matches!(self.rows.get(name), Some(Some(_))) {
            let stored = match self.types.get(name).map_err(db)? {
                Some(v) if !self.rows.contains_key(name) => type_row(SCHEMA_VERSION, v.value())?,
                _ => TypeValues::default(),
            };
            self.rows.insert(name.to_owned(), Some(stored));
        }
        Ok(self.rows.get_mut(name).and_then(Option::as_mut).expect("inserted above"))
    }

    /// Writes the `types` rows this turn changed.
    pub(super) fn finish(mut self) -> Result<u64, StoreError> {
        for (name, row) in std::mem::take(&mut self.rows) {
            match row {
                Some(row) => {
                    let bytes = records::encode(&records::type_row(&row));
                    self.types.insert(name.as_str(), bytes.as_slice()).map_err(db)?;
                }
                None => {
                    self.types.remove(name.as_str()).map_err(db)?;
                }
            }
        }
        Ok(self.home_order)
    }

    fn region(&self, t: &str, address: &str) -> Result<Option<RegionRecord>, StoreError> {
        self.regions.get((t, address)).map_err(db)?.map(|v| region_row(SCHEMA_VERSION, v.value())).transpose()
    }

    pub(super) fn put_region(&mut self, t: &str, record: &RegionRecord) -> Result<(), StoreError> {
        let mut row = records::Region::from(record);
        row.shards.clear();
        self.regions.insert((t, record.address.as_str()), records::encode(&row).as_slice()).map_err(db)?;
        Ok(())
    }

    /// Writes `home` as shard's, in the next allocation order.
    pub(super) fn put_home(&mut self, t: &str, shard: &str, home: &Home) -> Result<(), StoreError> {
        self.home_order += 1;
        let row = records::encode(&records::home_row(home, self.home_order));
        self.homes.insert((t, shard), row.as_slice()).map_err(db)?;
        Ok(())
    }

    /// Writes shard's load (none: forgotten).
    pub(super) fn put_load(&mut self, t: &str, shard: &str, load: Option<ShardLoad>) -> Result<(), StoreError> {
        match load.filter(|l| !l.is_empty()) {
            Some(load) => {
                let row = records::encode(&records::ShardLoad::from(load));
                self.loads.insert((t, shard), row.as_slice()).map_err(db)?;
            }
            None => {
                self.loads.remove((t, shard)).map_err(db)?;
            }
        }
        Ok(())
    }

    /// Deletes every row of type `t`.
    pub(super) fn remove_type(&mut self, t: &str) -> Result<(), StoreError> {
        // Every (t, …) key sorts before (t + "\0", ""), and after (t, "").
        let next = format!("{t}\0");
        let range = || (t, "")..(next.as_str(), "");
        self.rows.insert(t.to_owned(), None);
        self.regions.retain_in(range(), |_, _| false).map_err(db)?;
        self.homes.retain_in(range(), |_, _| false).map_err(db)?;
        self.handoffs.retain_in(range(), |_, _| false).map_err(db)?;
        self.placements.retain_in(range(), |_, _| false).map_err(db)?;
        self.queued.retain_in(range(), |_, _| false).map_err(db)?;
        self.loads.retain_in(range(), |_, _| false).map_err(db)?;
        self.attributes.retain_in(range(), |_, _| false).map_err(db)?;
        Ok(())
    }

    pub(super) fn apply(&mut self, t: &str, change: &Change) -> Result<(), StoreError> {
        match change {
            Change::RegionRegistered(record) => {
                self.put_region(t, record)?;
                let row = self.type_row(t)?;
                row.next_join_order = row.next_join_order.max(record.join_order + 1);
            }
            Change::RegionRemoved { address } => {
                self.regions.remove((t, address.as_str())).map_err(db)?;
                self.type_row(t)?.operations.apply(change);
            }
            Change::RegionDraining { address, draining } => {
                self.type_row(t)?.operations.apply(change);
                if let Some(mut record) = self.region(t, address)? {
                    record.draining = *draining;
                    self.put_region(t, &record)?;
                }
            }
            Change::RegionLeaving { address } => {
                if let Some(mut record) = self.region(t, address)? {
                    record.leaving = true;
                    self.put_region(t, &record)?;
                }
            }
            Change::HomeSet { shard, home } => {
                self.put_home(t, shard, home)?;
                let row = self.type_row(t)?;
                row.epoch = row.epoch.max(home.epoch);
            }
            Change::HomeRemoved { shard } => {
                self.homes.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::HandOffStarted { shard, from } => {
                self.queued.remove((t, shard.as_str())).map_err(db)?;
                self.handoffs.insert((t, shard.as_str()), from.as_str()).map_err(db)?;
            }
            Change::HandOffEnded { shard } => {
                self.handoffs.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::PlacementWritten { shard, entry } => {
                let row = records::encode(&records::Placement::from(entry));
                self.placements.insert((t, shard.as_str()), row.as_slice()).map_err(db)?;
            }
            Change::PlacementPurged { shard } => {
                self.placements.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::RebalanceQueued { shard } => {
                self.queued.insert((t, shard.as_str()), ()).map_err(db)?;
            }
            Change::RebalanceUnqueued { shard } => {
                self.queued.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::SignalSet { signal } => {
                self.type_row(t)?.signal = signal.clone();
            }
            Change::FreezeSet { .. } | Change::FreezeLifted { .. } | Change::DrainStarted { .. } => {
                self.type_row(t)?.operations.apply(change);
            }
            Change::LoadsSaved { loads } => {
                for (shard, load) in loads {
                    self.put_load(t, shard, *load)?;
                }
            }
            Change::AttributesSet { shard, attributes } => {
                if attributes.is_empty() {
                    self.attributes.remove((t, shard.as_str())).map_err(db)?;
                } else {
                    let row = records::encode(&records::Attributes::from(attributes));
                    self.attributes.insert((t, shard.as_str()), row.as_slice()).map_err(db)?;
                }
            }
        }
        Ok(())
    }
}
