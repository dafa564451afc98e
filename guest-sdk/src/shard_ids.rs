//! Shard ids by handle in one text: an id costs its bytes and 8 bytes of
//! span, not a `String` (24 bytes and an allocation of its own) per shard.
//! A component that reads ids keeps a million of them in a few tens of
//! MiB of its linear memory, and takes the host's packed ids
//! ([`crate::kept::ShardNames`]) without a copy per id.
//!
//! An id set again (a handle given to another shard) leaves its old bytes
//! behind; once the bytes left behind pass half the text (and
//! [`COMPACT_ABOVE`]), the text is written again without them.

/// Bytes left behind below which the text is never compacted.
pub const COMPACT_ABOVE: usize = 64 * 1024;

/// Shard ids by handle (see the module documentation).
#[derive(Clone, Debug, Default)]
pub(crate) struct IdTable {
    text: String,
    /// Each handle's id: its start in `text` and its length (0, 0 when
    /// the handle has none).
    spans: Vec<(u32, u32)>,
    /// Bytes of `text` no span covers.
    garbage: usize,
}

impl IdTable {
    /// The table of `names`' ids when `names` gives handles 0, 1, … in
    /// order: their text is taken as it is.
    pub(crate) fn adopt(text: String, ends: &[u32]) -> Self {
        let mut spans = Vec::with_capacity(ends.len());
        let mut start = 0u32;
        for &end in ends {
            spans.push((start, end - start));
            start = end;
        }
        IdTable { text, spans, garbage: 0 }
    }

    /// Handles the table spans (the highest named + 1).
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when no handle is named.
    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The id of `handle` ("" when it has none).
    pub(crate) fn get(&self, handle: u32) -> &str {
        match self.spans.get(handle as usize) {
            Some(&(start, len)) => &self.text[start as usize..(start + len) as usize],
            None => "",
        }
    }

    /// Gives `handle` the id `id`.
    pub(crate) fn set(&mut self, handle: u32, id: &str) {
        let h = handle as usize;
        if self.spans.len() <= h {
            self.spans.resize(h + 1, (0, 0));
        }
        self.garbage += self.spans[h].1 as usize;
        if self.garbage > COMPACT_ABOVE && self.garbage > self.text.len() / 2 {
            self.compact();
        }
        let start = u32::try_from(self.text.len()).expect("shard ids within 4 GiB: the memory limit is far below");
        self.text.push_str(id);
        self.spans[h] = (start, id.len() as u32);
    }

    /// Takes `handle`'s id away: its bytes are garbage.
    pub(crate) fn clear(&mut self, handle: u32) {
        if let Some(span) = self.spans.get_mut(handle as usize) {
            self.garbage += span.1 as usize;
            *span = (0, 0);
        }
    }

    /// Writes the text again with only the ids the spans cover.
    fn compact(&mut self) {
        let mut text = String::with_capacity(self.text.len() - self.garbage);
        for span in &mut self.spans {
            let (start, len) = *span;
            let at = text.len() as u32;
            text.push_str(&self.text[start as usize..(start + len) as usize]);
            *span = (if len == 0 { 0 } else { at }, len);
        }
        self.text = text;
        self.garbage = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_set_taken_and_adopted_in_one_text() {
        let mut ids = IdTable::adopt("ab-cd-e".into(), &[2, 5, 7]);
        assert_eq!((ids.get(0), ids.get(1), ids.get(2), ids.get(9)), ("ab", "-cd", "-e", ""));
        ids.set(1, "xyz");
        ids.clear(0);
        ids.set(5, "later");
        assert_eq!((ids.get(0), ids.get(1), ids.get(2), ids.get(4), ids.get(5)), ("", "xyz", "-e", "", "later"));
        assert_eq!(ids.garbage, 5);
    }

    #[test]
    fn ids_set_again_and_again_are_compacted_and_keep_their_values() {
        let mut ids = IdTable::default();
        for round in 0..40 {
            for h in 0..1_000u32 {
                ids.set(h, &format!("tenant-{round}-shard-{h}"));
            }
        }
        for h in 0..1_000u32 {
            assert_eq!(ids.get(h), format!("tenant-39-shard-{h}"));
        }
        let live: usize = (0..1_000u32).map(|h| ids.get(h).len()).sum();
        assert!(ids.text.len() <= 2 * live + COMPACT_ABOVE, "{} bytes of text for {live} of ids", ids.text.len());
    }
}
