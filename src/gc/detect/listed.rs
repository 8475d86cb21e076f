//! The runtime's image list, sorted once by record key: the list as the runtime returned it
//! (owned, never copied) plus one index per distinct key, in key order.
//!
//! Invariants: the index holds, for each record key, the position of the list's last entry
//! of that key (the kubelet's detectImages assigns every entry in list order, so its last one
//! stands); positions are in record key order ((image id, runtime handler), the order of
//! `RecordKey`'s `Ord` and of the store's key scan). Lookups compare borrowed strings: no key
//! is allocated to sort, iterate or find.

use std::cmp::{Ordering, Reverse};

use crate::model::{ImageList, ImageRef, RecordKey};

/// How many keys ahead of a key-order walk the list's entries are prefetched (their ids half
/// as far).
const PREFETCH_AHEAD: usize = 16;

/// An image's record key as bytes: (image id, runtime handler). UTF-8 bytes order as the
/// strings do, so this is `RecordKey`'s order.
pub(crate) fn key_of(image: ImageRef<'_>) -> (&[u8], &[u8]) {
    image.key_bytes()
}

/// A record key, borrowed as [`key_of`] borrows an image's.
pub(crate) fn borrowed(key: &RecordKey) -> (&[u8], &[u8]) {
    (
        key.image_id.as_str().as_bytes(),
        key.runtime_handler.as_bytes(),
    )
}

/// The runtime's images, folded by record key (the last entry of a key wins) and in key order.
#[derive(Clone, Debug, Default)]
pub struct ListedImages {
    images: ImageList,
    /// Positions in `images`: one per distinct key, in key order.
    order: Vec<u32>,
}

impl ListedImages {
    /// Sorts `images` (as ListImages returned them) by record key, once.
    pub fn new(images: impl Into<ImageList>) -> ListedImages {
        let images: ImageList = images.into();
        let at = |i: u32| {
            images
                .get(i as usize)
                .expect("an order position is below the list's length")
        };
        let len = u32::try_from(images.len()).expect("a runtime lists fewer than 4G images");
        // Every id shares a prefix (`sha256:`): the sort compares first the 8 bytes after it
        // as one integer (the bytes big-endian, zero-padded: an order that never contradicts
        // the ids' byte order), then the whole keys only where those are equal.
        let shared = shared_prefix(images.iter().map(|i| key_of(i).0));
        let head = |i: u32| {
            let rest = key_of(at(i)).0.get(shared..).unwrap_or_default();
            let mut eight = [0u8; 8];
            let n = rest.len().min(8);
            eight[..n].copy_from_slice(&rest[..n]);
            u64::from_be_bytes(eight)
        };
        let mut keyed: Vec<(u64, u32)> = (0..len).map(|i| (head(i), i)).collect();
        // Equal keys: the later entry first, so the dedup below keeps the last one listed.
        keyed.sort_unstable_by(|&(ha, a), &(hb, b)| {
            ha.cmp(&hb)
                .then_with(|| (key_of(at(a)), Reverse(a)).cmp(&(key_of(at(b)), Reverse(b))))
        });
        // Neighbours with different heads have different keys: only equal heads read the
        // keys (a pass in key order through the list's memory would miss the cache at every
        // image of a large list).
        keyed
            .dedup_by(|later, kept| later.0 == kept.0 && key_of(at(later.1)) == key_of(at(kept.1)));
        let order: Vec<u32> = keyed.into_iter().map(|(_, i)| i).collect();
        ListedImages { images, order }
    }

    /// For each entry of the list, in the runtime's order ([`ListedImages::as_listed`]), the
    /// index of its key in key order ([`ListedImages::iter`]'s), or `None` for an entry that a
    /// later one of the same key stands for. Reading the list in its own order and placing
    /// what is read by this index visits the list's memory front to back, where a walk in key
    /// order jumps through it.
    pub fn key_indexes_in_list_order(&self) -> Vec<Option<u32>> {
        let mut out = vec![None; self.images.len()];
        for (index, &position) in self.order.iter().enumerate() {
            out[position as usize] =
                Some(u32::try_from(index).expect("a runtime lists fewer than 4G images"));
        }
        out
    }

    /// The list as the runtime returned it, duplicates and order included.
    pub fn as_listed(&self) -> &ImageList {
        &self.images
    }

    /// How many distinct record keys the list holds.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    fn at(&self, position: u32) -> ImageRef<'_> {
        self.images
            .get(position as usize)
            .expect("an order position is below the list's length")
    }

    /// The image that stands for each key, in key order.
    pub fn iter(&self) -> impl Iterator<Item = ImageRef<'_>> + Clone {
        self.iter_with_positions().map(|(_, image)| image)
    }

    /// Each key's image with its position in [`ListedImages::as_listed`], in key order.
    ///
    /// Key order is a random order through the list's memory: at 100k images every image
    /// would be a cache miss waited for in turn. So the walk asks the CPU for the entries
    /// [`PREFETCH_AHEAD`] keys ahead and, half that far, their ids (`ImageList::prefetch_entry`,
    /// `prefetch_id`): the misses overlap. What it yields is unchanged.
    pub fn iter_with_positions(&self) -> impl Iterator<Item = (usize, ImageRef<'_>)> + Clone {
        self.order.iter().enumerate().map(|(index, &i)| {
            if let Some(&ahead) = self.order.get(index + PREFETCH_AHEAD) {
                self.images.prefetch_entry(ahead as usize);
            }
            if let Some(&nearer) = self.order.get(index + PREFETCH_AHEAD / 2) {
                self.images.prefetch_id(nearer as usize);
            }
            (i as usize, self.at(i))
        })
    }

    /// The image that stands for the `index`-th key in key order ([`ListedImages::iter`]'s
    /// `index`-th), found without walking the ones before it.
    pub fn nth_in_key_order(&self, index: usize) -> Option<ImageRef<'_>> {
        self.order.get(index).map(|&i| self.at(i))
    }

    /// The image listed under `key` (the last entry of that key).
    pub fn get(&self, key: &RecordKey) -> Option<ImageRef<'_>> {
        let want = borrowed(key);
        self.order
            .binary_search_by(|&i| key_of(self.at(i)).cmp(&want))
            .ok()
            .map(|at| self.at(self.order[at]))
    }

    pub fn contains(&self, key: &RecordKey) -> bool {
        self.get(key).is_some()
    }
}

/// The length of the prefix every one of `ids` starts with (0 for no ids).
fn shared_prefix<'a>(mut ids: impl Iterator<Item = &'a [u8]>) -> usize {
    let Some(first) = ids.next() else {
        return 0;
    };
    let mut len = first.len();
    for id in ids {
        len = first[..len]
            .iter()
            .zip(id)
            .take_while(|(a, b)| a == b)
            .count();
        if len == 0 {
            break;
        }
    }
    len
}

/// Compares a record key with an image's, without allocating.
pub(crate) fn compare(key: &RecordKey, image: ImageRef<'_>) -> Ordering {
    compare_bytes(borrowed(key), image)
}

/// Compares a record key's (image id, runtime handler) bytes with an image's.
pub(crate) fn compare_bytes(key: (&[u8], &[u8]), image: ImageRef<'_>) -> Ordering {
    key.cmp(&key_of(image))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ImageId, ImageLike, RuntimeImage};

    fn image(id: &str, handler: &str, size: u64) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            runtime_handler: handler.into(),
            size,
            ..RuntimeImage::default()
        }
    }

    /// The folded list is the reference's map: same keys, same order, the last entry of a key
    /// standing for it; lookups find exactly the folded entries.
    #[test]
    fn folds_duplicates_last_wins_and_orders_by_record_key_like_a_map() {
        for seed in 0..20u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let n = rng.usize(0..60);
            let images: Vec<RuntimeImage> = (0..n)
                .map(|i| {
                    let id = format!("sha256:{}", rng.u8(0..12));
                    let handler = ["", "runc", "kata"][rng.usize(0..3)];
                    image(&id, handler, i as u64)
                })
                .collect();
            let want = super::super::reference::fold_images(&images);
            let listed = ListedImages::new(images.clone());
            let got: Vec<(RecordKey, u64)> =
                listed.iter().map(|i| (i.record_key(), i.size())).collect();
            let want_pairs: Vec<(RecordKey, u64)> =
                want.iter().map(|(k, i)| (k.clone(), i.size)).collect();
            assert_eq!(got, want_pairs, "seed {seed}");
            assert_eq!(listed.len(), want.len(), "seed {seed}");
            assert_eq!(listed.as_listed().to_images(), images, "seed {seed}");
            for id in 0..14u8 {
                for handler in ["", "runc", "kata", "gvisor"] {
                    let key = RecordKey::new(format!("sha256:{id}"), handler);
                    assert_eq!(
                        listed.get(&key).map(|i| i.size()),
                        want.get(&key).map(|i| i.size),
                        "seed {seed}, {key}"
                    );
                }
            }
        }
    }
}
