//! What the warm plan and restore read of the store's history: the sizes the node's records
//! and journal know by name ([`HistorySizes`], the plan's `known_size`) and the warm entries
//! `[warmFromHistory]` adds ([`history_warm_entries`]) and what `restore` pulls back
//! ([`restore_candidates_in`]). Reads only.

use std::collections::BTreeMap;

use crate::model::{ImageNames, JournalEntry, RecordKey, RuntimeImage, UnixNanos};
use crate::reference::MatchIndex;
use crate::store::{JournalKey, Store, StoreError};

use super::{FromHistory, RestoreCandidate, WarmEntry, history_entries, restore_candidates};

/// The sizes this node's history knows: each stored record's and each journaled removal's,
/// by the names stored for its key.
pub struct HistorySizes {
    known: Vec<(RuntimeImage, u64)>,
    /// `known`'s images by their names, so an entry's size is one lookup of its name.
    index: MatchIndex,
}

impl HistorySizes {
    /// Reads the sizes from `store`'s journal, records and stored names.
    pub fn read(store: &Store) -> Result<HistorySizes, StoreError> {
        let mut sizes: BTreeMap<RecordKey, u64> = BTreeMap::new();
        // The journal first (oldest first), then the records: a present record's size wins.
        for (jk, entry) in store.journal()? {
            sizes.insert(jk.key, entry.size);
        }
        for record in store.records()? {
            sizes.insert(record.key, record.record.size);
        }
        let known: Vec<(RuntimeImage, u64)> = store
            .all_names()?
            .into_iter()
            .filter_map(|(key, names)| {
                let size = *sizes.get(&key)?;
                Some((
                    RuntimeImage {
                        id: key.image_id,
                        repo_tags: names.repo_tags,
                        repo_digests: names.repo_digests,
                        runtime_handler: key.runtime_handler,
                        ..RuntimeImage::default()
                    },
                    size,
                ))
            })
            .collect();
        let index = MatchIndex::of_images(known.iter().map(|(image, _)| image));
        Ok(HistorySizes { known, index })
    }

    /// The size of the largest image the history knows by `entry`'s name and handler.
    pub fn size_of(&self, entry: &WarmEntry) -> Option<u64> {
        self.index
            .named_by(&entry.image, &entry.runtime_handler)
            .into_iter()
            .filter_map(|at| self.known.get(at))
            .map(|(_, size)| *size)
            .max()
    }
}

/// The warm entries `[warmFromHistory]` adds at `now` (those back too: the plan finds them
/// present, and the GC keeps them, `WarmSet::from_history`).
pub fn history_warm_entries(
    store: &Store,
    window: FromHistory,
    now: UnixNanos,
) -> Result<Vec<WarmEntry>, StoreError> {
    let (journal, stored_names) = journal_with_names(store)?;
    let names = |key: &RecordKey| stored_names.get(key).cloned();
    Ok(history_entries(&journal, &names, now, window))
}

/// What `restore` pulls back at `now` within `window` ([`restore_candidates`] of the store's
/// journal and the names stored for its keys), most recently used first.
pub fn restore_candidates_in(
    store: &Store,
    now: UnixNanos,
    window: FromHistory,
) -> Result<Vec<RestoreCandidate>, StoreError> {
    let (journal, stored_names) = journal_with_names(store)?;
    let names = |key: &RecordKey| stored_names.get(key).cloned();
    Ok(restore_candidates(&journal, &names, now, window))
}

/// The store's journal and the names stored for the keys it names.
type JournalWithNames = (
    Vec<(JournalKey, JournalEntry)>,
    BTreeMap<RecordKey, ImageNames>,
);

/// The journal, oldest first, and the names the store keeps for its keys (one read each).
fn journal_with_names(store: &Store) -> Result<JournalWithNames, StoreError> {
    let journal = store.journal()?;
    let names = store.names_of_keys(journal.iter().map(|(k, _)| &k.key))?;
    Ok((journal, names))
}
