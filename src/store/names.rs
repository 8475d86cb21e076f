//! The names table's reads: one image's repo tags and digests, those of a set of keys, and
//! what a detect writes, the names of the runtime's list that differ from the stored ones.
//! [`Store::names_that_differ`] looks each listed image up in one read transaction (the last
//! entry of a key winning); [`Store::for_names_that_differ_in_key_order`] walks the table
//! once, merged with a list already folded and sorted by record key, and refuses a list out of
//! key order ([`StoreError::UnorderedNames`]) rather than answer wrong. An image with no names
//! and none stored is not a difference. Names are written only inside a batch's write
//! transaction (`journal.rs`, `set_names`).

use std::sync::atomic::Ordering;

use redb::ReadableTable;

use super::codec::{self, Codec};
use super::tables::{Encoded, NAMES, Stored};
use super::{Store, StoreError};
use crate::model::{ImageNames, RecordKey};

/// Rows the names walk steps over towards a listed image's key before it seeks to it: a
/// listed image costs at most this many steps and one seek, however many journaled images'
/// names lie between it and the previous one.
const STEPS_BEFORE_A_SEEK: usize = 2;

impl Store {
    /// The names of `key`'s image, if stored.
    pub fn names(&self, key: &RecordKey) -> Result<Option<ImageNames>, StoreError> {
        self.guarded(|| self.point_get(NAMES, key))
    }

    /// The stored names of `keys` (each read once; a key without names is absent): what the
    /// warm set's history entries and restore match the journal's removals against. A read
    /// error is an error, never "no names" (which would drop a warm image's protection).
    pub fn names_of_keys<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a RecordKey>,
    ) -> Result<std::collections::BTreeMap<RecordKey, ImageNames>, StoreError> {
        let mut out = std::collections::BTreeMap::new();
        for key in keys {
            if out.contains_key(key) {
                continue;
            }
            if let Some(names) = self.names(key)? {
                out.insert(key.clone(), names);
            }
        }
        Ok(out)
    }

    /// The names of `images` (the runtime's list, the last entry of a key winning) that differ
    /// from the stored ones, read in one transaction without loading the names table: what a
    /// detect writes. An image with no names and none stored is not a difference.
    pub fn names_that_differ(
        &self,
        images: &[crate::model::RuntimeImage],
    ) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, NAMES)?;
            // Last entry of a key wins: walk the list backwards and skip keys already seen
            // (borrowed, so no key is copied for a list that changed nothing).
            let mut seen: std::collections::HashSet<(&str, &str)> =
                std::collections::HashSet::with_capacity(images.len());
            let mut out = Vec::new();
            for image in images.iter().rev() {
                if !seen.insert((image.id.as_str(), image.runtime_handler.as_str())) {
                    continue;
                }
                let key = image.record_key();
                let encoded = key.encode();
                let stored = match table
                    .get(Encoded::new(&encoded))
                    .map_err(|e| self.redb_err(e))?
                {
                    Some(g) => Some(g.value().decode().map_err(|e| self.decode_err(e))?),
                    None => None,
                };
                let same = match &stored {
                    Some(n) => {
                        n.repo_tags == image.repo_tags && n.repo_digests == image.repo_digests
                    }
                    None => image.repo_tags.is_empty() && image.repo_digests.is_empty(),
                };
                if !same {
                    out.push((key, ImageNames::of(image)));
                }
            }
            // In list order, as detect's other writes.
            out.reverse();
            Ok(out)
        })
    }

    /// [`Store::names_that_differ`] for a list already folded and sorted by record key (one
    /// image per key, in key order: `gc::ListedImages::iter`): one walk of the names table
    /// merged with the list, no point lookup and no set of the keys seen. The differences
    /// come back in key order. A list out of key order is an error, never a wrong answer.
    pub fn names_that_differ_in_key_order<I: crate::model::ImageLike>(
        &self,
        images: impl Iterator<Item = I> + Clone,
    ) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        let mut out = Vec::new();
        self.for_names_that_differ_in_key_order(images, |key, names| out.push((key, names)))?;
        Ok(out)
    }

    /// [`Store::names_that_differ_in_key_order`] handing each difference to `differs` as it
    /// is found, in key order (detect puts them straight into its batch: a first detect at
    /// 100k holds no list of 100k differences beside the batch). Returns how many differ. A
    /// walk retried after a reopen (`guarded`) may hand a difference twice, the same key with
    /// the same names: a batch keeps the last.
    pub fn for_names_that_differ_in_key_order<I: crate::model::ImageLike>(
        &self,
        images: impl Iterator<Item = I> + Clone,
        differs: impl FnMut(RecordKey, ImageNames),
    ) -> Result<usize, StoreError> {
        let differs = std::cell::RefCell::new(differs);
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, NAMES)?;
            let mut stored = table.iter().map_err(|e| self.redb_err(e))?;
            // The entry the walk is at: its key's image id length (the key checked as a
            // record key's decode checks it, see `stored_key`) and its raw key and names,
            // compared in place: no key or name is copied for an image whose names did not
            // change.
            let mut current: Option<(usize, NamesRow<'_>)> = None;
            let mut count = 0;
            let mut previous: Option<I> = None;
            for image in images.clone() {
                let want = (image.id(), image.runtime_handler());
                if let Some(previous) = previous
                    .as_ref()
                    .filter(|p| (p.id(), p.runtime_handler()) >= want)
                {
                    return Err(StoreError::UnorderedNames {
                        previous: previous.record_key(),
                        next: image.record_key(),
                    });
                }
                let want = (want.0.as_bytes(), want.1.as_bytes());
                self.advance_names_walk(&table, &mut stored, &mut current, want, || {
                    image.record_key()
                })?;
                let same = match &current {
                    Some((id_len, (k, v))) if stored_key(k.value().bytes(), *id_len) == want => {
                        codec::names_equal_encoded(
                            v.value().bytes(),
                            image.repo_tags(),
                            image.repo_digests(),
                        )
                        .map_err(|e| self.decode_err(e))?
                    }
                    _ => {
                        image.repo_tags().next().is_none() && image.repo_digests().next().is_none()
                    }
                };
                if !same {
                    (differs.borrow_mut())(image.record_key(), ImageNames::of(&image));
                    count += 1;
                }
                previous = Some(image);
            }
            Ok(count)
        })
    }

    /// Advances the names walk (`stored`, at `current`) to the first row at or after `want`:
    /// a few steps, then a seek to `from()` (the table also holds the names of journaled
    /// images no list has: stepping over them cost every detect in proportion to the
    /// history, issue 53 item 4).
    fn advance_names_walk<'t>(
        &self,
        table: &'t redb::ReadOnlyTable<Stored<RecordKey>, Stored<ImageNames>>,
        stored: &mut redb::Range<'t, Stored<RecordKey>, Stored<ImageNames>>,
        current: &mut Option<(usize, NamesRow<'t>)>,
        want: (&[u8], &[u8]),
        from: impl Fn() -> RecordKey,
    ) -> Result<(), StoreError> {
        let mut steps = 0;
        loop {
            if let Some((id_len, (k, _))) = &*current
                && stored_key(k.value().bytes(), *id_len) >= want
            {
                return Ok(());
            }
            steps += 1;
            if steps > STEPS_BEFORE_A_SEEK {
                let from = from().encode();
                *stored = table
                    .range::<Encoded<RecordKey>>(Encoded::new(&from)..)
                    .map_err(|e| self.redb_err(e))?;
                steps = 0;
            }
            self.history_rows_read.fetch_add(1, Ordering::Relaxed);
            match stored.next() {
                None => {
                    *current = None;
                    return Ok(());
                }
                Some(entry) => {
                    let (k, v) = entry.map_err(|e| self.redb_err(e))?;
                    let (id, _) = codec::record_key_parts(k.value().bytes())
                        .map_err(|e| self.decode_err(e))?;
                    *current = Some((id.len(), (k, v)));
                }
            }
        }
    }

    /// Every image's names, by record key.
    pub fn all_names(&self) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        self.guarded(|| self.scan_all(NAMES))
    }
}

/// One entry of the names table as the walk holds it: its key and value, undecoded.
type NamesRow<'a> = (
    redb::AccessGuard<'a, Stored<RecordKey>>,
    redb::AccessGuard<'a, Stored<ImageNames>>,
);

/// An encoded record key (`[1][id][0x00][handler]`, already checked by
/// `codec::record_key_parts`, whose id is `id_len` bytes) as (id, handler) bytes: the order of
/// `(image id, runtime handler)` as strings.
fn stored_key(raw: &[u8], id_len: usize) -> (&[u8], &[u8]) {
    (
        raw.get(1..1 + id_len).unwrap_or_default(),
        raw.get(2 + id_len..).unwrap_or_default(),
    )
}
