//! Checks of a redb file before redb opens it. redb panics on some damage
//! (a truncated file trips an assertion, stray bytes reach `unreachable!`)
//! and its repair pass writes to the file, so the node looks first and
//! opens only a file that passes, and never repairs one that does not:
//!
//! - the header: redb's magic number, a plausible page size and region
//!   layout, a file-format version this redb reads, known flags, and a
//!   commit slot whose checksum holds: the current one for a file closed
//!   cleanly (redb trusts it without looking), either for one that needs
//!   crash recovery (redb falls back to the other);
//! - the length: at least what the header's layout says;
//! - the directory's marker ([`MARKER`]): written when the directory gets
//!   its store, so a store file that went missing or empty is refused
//!   rather than silently started afresh.
//!
//! Then [`quietly`] runs redb's own open and a full read with any panic
//! caught and kept off stderr, so what is left is reported as damage.
//!
//! The layout below is redb 3's file format (version 3), as written by the
//! redb this node is built with; a test checks it against a real file.

use std::io::Read;
use std::path::Path;

/// The file in a data directory that says it holds a store.
pub const MARKER: &str = "shardalloc-data";

const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
const GOD_BYTE_OFFSET: usize = 9;
const PRIMARY_BIT: u8 = 1;
const RECOVERY_REQUIRED: u8 = 2;
const TWO_PHASE_COMMIT: u8 = 4;
const PAGE_SIZE_OFFSET: usize = 12;
const REGION_HEADER_PAGES_OFFSET: usize = 16;
const REGION_MAX_DATA_PAGES_OFFSET: usize = 20;
const FULL_REGIONS_OFFSET: usize = 24;
const TRAILING_PAGES_OFFSET: usize = 28;
const SLOTS: [usize; 2] = [64, 192];
const SLOT_SIZE: usize = 128;
const SLOT_CHECKSUM_OFFSET: usize = SLOT_SIZE - 16;
/// The bytes of redb's header: 64 of settings, then two 128-byte commit slots.
pub const HEADER_BYTES: usize = 320;
const FILE_FORMAT_VERSION: u8 = 3;

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

/// What a data directory's store file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// No store yet: neither a store file (or an empty one) nor the marker.
    New,
    /// A store file that passes the checks.
    Intact,
}

/// Checks the store file `path` in a directory whose marker is `marker`:
/// `Err` names what is wrong.
pub fn check(path: &Path, marker: &Path) -> Result<FileState, String> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return if marker.exists() {
                Err("the store file is missing, but this directory held a store".into())
            } else {
                Ok(FileState::New)
            };
        }
        Err(error) => return Err(format!("cannot read it: {error}")),
    };
    if metadata.len() == 0 {
        // Without the marker: a store created but not yet initialised (the
        // marker is written once it is).
        return if marker.exists() { Err("the store file is empty".into()) } else { Ok(FileState::New) };
    }
    let mut header = Vec::with_capacity(HEADER_BYTES);
    std::fs::File::open(path)
        .and_then(|file| file.take(HEADER_BYTES as u64).read_to_end(&mut header))
        .map_err(|e| format!("cannot read it: {e}"))?;
    check_header(&header, metadata.len())?;
    Ok(FileState::Intact)
}

/// Checks redb's header of a file of `len` bytes.
pub fn check_header(header: &[u8], len: u64) -> Result<(), String> {
    if header.len() < HEADER_BYTES {
        return Err(format!("it is {len} bytes, shorter than a store's header ({HEADER_BYTES} bytes)"));
    }
    if header[..MAGIC.len()] != MAGIC {
        return Err("it is not a shardalloc store (no redb header)".into());
    }
    let page_size = u32_at(header, PAGE_SIZE_OFFSET);
    if !page_size.is_power_of_two() || !(512..=1 << 20).contains(&page_size) {
        return Err(format!("its header is damaged (page size {page_size})"));
    }
    let header_pages = u32_at(header, REGION_HEADER_PAGES_OFFSET);
    let max_data_pages = u32_at(header, REGION_MAX_DATA_PAGES_OFFSET);
    let full_regions = u32_at(header, FULL_REGIONS_OFFSET);
    let trailing_pages = u32_at(header, TRAILING_PAGES_OFFSET);
    if max_data_pages == 0 || (full_regions == 0 && trailing_pages == 0) {
        return Err("its header is damaged (no regions)".into());
    }
    let god_byte = header[GOD_BYTE_OFFSET];
    if god_byte & !(PRIMARY_BIT | RECOVERY_REQUIRED | TWO_PHASE_COMMIT) != 0 {
        return Err(format!("its header is damaged (flags {god_byte:#04x})"));
    }
    let mut slot_holds = [false; 2];
    for (holds, at) in slot_holds.iter_mut().zip(SLOTS) {
        let slot = &header[at..at + SLOT_SIZE];
        if slot[0] != FILE_FORMAT_VERSION {
            return Err(format!("its header is damaged or of another redb format (version {})", slot[0]));
        }
        let stored = u128::from_le_bytes(slot[SLOT_CHECKSUM_OFFSET..].try_into().expect("sixteen bytes"));
        *holds = stored == xxhash_rust::xxh3::xxh3_128_with_seed(&slot[..SLOT_CHECKSUM_OFFSET], 0);
    }
    let primary = usize::from(god_byte & PRIMARY_BIT != 0);
    if god_byte & RECOVERY_REQUIRED == 0 {
        // Closed cleanly: redb reads the primary slot without looking at
        // the other (which only a crash recovery falls back to).
        if !slot_holds[primary] {
            return Err("its header is damaged (the checksum of its current commit fails)".into());
        }
    } else if !slot_holds.contains(&true) {
        return Err("its header is damaged (the checksums of both commit slots fail)".into());
    }
    let page = u64::from(page_size);
    let region = |data_pages: u32| (u64::from(header_pages) + u64::from(data_pages)) * page;
    let expected = page
        + u64::from(full_regions) * region(max_data_pages)
        + if trailing_pages > 0 { region(trailing_pages) } else { 0 };
    if len < expected {
        return Err(format!("it is truncated: {len} bytes of the {expected} its header describes"));
    }
    Ok(())
}

/// Runs `work` with panics caught and kept off stderr (redb panics on some
/// damage); a panic becomes its message.
pub fn quietly<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    std::panic::set_hook(hook);
    result.map_err(|payload| panic_text(payload.as_ref()))
}

/// A caught panic's message.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "redb stopped on damage it did not expect".into())
}
