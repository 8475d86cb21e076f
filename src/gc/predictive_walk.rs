//! The predictive order as the space walk reads it, once per walk (`imageGCPolicy =
//! "predictive"`): the cycle's detect list ranked by `predictive.rs`'s [`rank_positions`], the
//! walk's own reads of the store shaped so that nothing is paid per listed image but one
//! record decoded and one estimate. The listed images' keys and repo tags are borrowed from the
//! detect's list (sorted by key once by detect), never copied, and read in the list's own order
//! (its memory's), each placed at its key's index: at 100k images a pass through the list in
//! key order is a cache miss per image, and the walk used to make several. The returns are
//! found among the keys by binary search per returning id. The records come from one range
//! scan of the records table merged with those keys; the ranked images' history rows and the
//! journal's re-pulled entries counted by id from the store's history mirror, kept in memory
//! between walks and updated by every transaction (`store/history_mirror.rs`; issue 53: one
//! scan of each history table and of the journal per walk made `predictive` cost 4x the
//! kubelet's order in `simulate`); a victim's `RecordKey` is built only when the walk reaches
//! it.
//!
//! Invariants: the order is exactly [`rank_listed`]'s (`gc::predictive`) for the listed images
//! that have a record, with the journal's re-pulled entries and the tables' rows of those images
//! (`the_walks_order_is_rank_listed_over_the_stores_tables`); the walk's records are the ones
//! read in the ranking's read transaction, as before.

use std::collections::BTreeMap;

use super::adaptive::ListedTags;
use super::detect::ListedImages;
#[cfg(doc)]
use super::predictive::rank_listed;
use super::predictive::{Listing, histories_of_rows, rank_positions};
use super::signals::{KnownIndex, KnownUse, KnownUses};
use crate::model::{ImageId, ImageLike, ImageRecord, UnixNanos};
use crate::store::{KeyParts, Store, StoreError, StoredRecord};

/// The listed images with a record in the predictive order: each one's place in the detect's
/// list (in key order) and its record.
#[derive(Clone, Debug, Default)]
pub struct PredictiveWalk {
    order: Vec<(u32, ImageRecord)>,
}

impl PredictiveWalk {
    /// How many images it ranks.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it ranks none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The ranked images from the `skip`-th on, in order, each key read from `listed` (the
    /// list it was ranked from) only when reached.
    pub fn records_from<'a>(
        &'a self,
        listed: &'a ListedImages,
        skip: usize,
    ) -> impl Iterator<Item = StoredRecord> + 'a {
        self.order
            .iter()
            .skip(skip)
            .filter_map(move |&(position, record)| {
                listed
                    .nth_in_key_order(position as usize)
                    .map(|image| StoredRecord {
                        key: image.record_key(),
                        record,
                    })
            })
    }
}

/// The space walk's predictive order at `now` of `listed` (the cycle's detect list): the
/// listed images with a record, furthest estimated next use first. One read of the records
/// table (a range scan); the ranked images' histories and the returns from the store's
/// history mirror (built by the first walk: one read of each history table and the journal).
pub fn predictive_walk(
    store: &Store,
    listed: &ListedImages,
    now: UnixNanos,
) -> Result<PredictiveWalk, StoreError> {
    predictive_walk_with(store, listed, &KnownUses::default(), now)
}

/// [`predictive_walk`] with what the cluster knows of the images' next uses (`known`, by the
/// names the cluster gives them): each listed image a known name names is placed by its known
/// use instead of its estimate (`signals.rs`).
pub fn predictive_walk_with(
    store: &Store,
    listed: &ListedImages,
    known: &KnownUses,
    now: UnixNanos,
) -> Result<PredictiveWalk, StoreError> {
    // The keys and the tags are read in two passes over the list in its own order (its memory's
    // order), each image's placed at its key's index: in key order they would be one jump
    // through the list per image.
    let index_of = listed.key_indexes_in_list_order();
    let mut listed_keys: Vec<KeyParts<'_>> = vec![(&[], &[]); listed.len()];
    let mut tag_counts: Vec<u32> = vec![0; listed.len()];
    for (image, index) in listed.as_listed().iter().zip(&index_of) {
        if let &Some(index) = index {
            listed_keys[index as usize] = image.key_bytes();
            tag_counts[index as usize] =
                u32::try_from(image.tags().len()).expect("fewer than 4G tags an image");
        }
    }
    let found = store.get_sorted(&listed_keys)?;
    // The ranked images, by position: the listed ones with a record, and where each one's tags
    // start among the ranked images' tags (`None`: not ranked).
    let mut positions: Vec<u32> = Vec::with_capacity(found.len());
    let mut records: Vec<ImageRecord> = Vec::with_capacity(found.len());
    let mut keys: Vec<KeyParts<'_>> = Vec::with_capacity(found.len());
    let mut tags_at: Vec<Option<u32>> = vec![None; found.len()];
    let mut ends: Vec<usize> = Vec::with_capacity(found.len());
    let mut tag_total = 0usize;
    for (position, ((key, record), count)) in listed_keys
        .into_iter()
        .zip(found)
        .zip(tag_counts)
        .enumerate()
    {
        if let Some(record) = record {
            positions.push(u32::try_from(position).expect("fewer than 4G listed images"));
            records.push(record);
            keys.push(key);
            tags_at[position] = Some(u32::try_from(tag_total).expect("fewer than 4G tags"));
            tag_total += count as usize;
            ends.push(tag_total);
        }
    }
    let mut names: Vec<&str> = vec![""; tag_total];
    for (image, index) in listed.as_listed().iter().zip(&index_of) {
        if let Some(at) = index.and_then(|index| tags_at.get(index as usize).copied().flatten()) {
            for (slot, tag) in names[at as usize..].iter_mut().zip(image.tags()) {
                *slot = tag;
            }
        }
    }
    let tags = ListedTags::from_ends(names, ends);
    // Only what the ranking reads: the re-pulled journal entries' count by id (the returns)
    // and the times of the ranked images' history rows, from the store's history mirror.
    let returns = store.with_repulled_counts(|by_id| returns_by_position(&keys, by_id))?;
    let rows = store.histories_of_sorted_keys(&keys)?;
    let (history_of, histories) = histories_of_rows(keys.len(), &rows);
    drop(rows);
    let known = known_by_position(listed, &positions, known);
    let listing = Listing {
        keys: &keys,
        tags: &tags,
        history_of: &history_of,
        histories: &histories,
        returns: &returns,
        known: &known,
    };
    let order = rank_positions(&listing, |i| records[i], now, None);
    Ok(PredictiveWalk {
        order: order
            .into_iter()
            .map(|at| (positions[at as usize], records[at as usize]))
            .collect(),
    })
}

/// What the cluster knows of the next use of each ranked image (`positions`: their places in
/// `listed`'s key order), by rank position; empty when nothing is known (no lookup is made).
fn known_by_position(
    listed: &ListedImages,
    positions: &[u32],
    known: &KnownUses,
) -> Vec<Option<KnownUse>> {
    if known.is_empty() {
        return Vec::new();
    }
    let index = KnownIndex::of(known);
    positions
        .iter()
        .map(|&at| {
            listed
                .nth_in_key_order(at as usize)
                .and_then(|image| index.of_image(&image))
        })
        .collect()
}

/// How many times the journal saw each of `keys`' image ids come back (`by_id`), by position:
/// each returning id found among the keys by binary search (they are in key order, so one id's
/// keys are adjacent), not each key looked up among the returns.
fn returns_by_position(keys: &[KeyParts<'_>], by_id: &BTreeMap<ImageId, u32>) -> Vec<u32> {
    debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys in key order");
    let mut out = vec![0; keys.len()];
    for (id, &returns) in by_id {
        let id = id.as_str().as_bytes();
        let first = keys.partition_point(|(key_id, _)| *key_id < id);
        for (slot, _) in out[first..]
            .iter_mut()
            .zip(&keys[first..])
            .take_while(|(_, (key_id, _))| *key_id == id)
        {
            *slot = returns;
        }
    }
    out
}
