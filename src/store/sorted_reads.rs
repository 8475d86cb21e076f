//! The store's reads for a sorted list of images given by borrowed key parts (a detect's list:
//! the predictive space walk's once per walk): their records by one range scan, and the rows of
//! the use and pull histories that name them, with no record key encoded, allocated or hashed.
//!
//! Invariants: the results are those of [`Store::get_many`] and of [`Store::uses_of`] /
//! [`Store::pulls_of`] for the same keys, in the same order (the encoded record key's byte
//! order, `[1][id][0][handler]`, is compared with the parts directly: [`cmp_encoded`]); a
//! history row is decoded (through the codec's checked readers) only when its raw record key
//! matched, as those scans do; a pull row's entry, which the ranking does not read, is not
//! decoded at all.

use std::cmp::Ordering;

use redb::{ReadOnlyTable, ReadableTable};

use super::codec::{self, LAYOUT_V1};
use super::tables::{Encoded, IMAGES, PULLS, Stored, USES};
use super::{Store, StoreError};
use crate::model::{ImageRecord, RecordKey, UnixNanos, UseInterval};

/// A record key borrowed as the bytes of its parts, (image id, runtime handler): the order of
/// these pairs is [`RecordKey`]'s.
pub type KeyParts<'a> = (&'a [u8], &'a [u8]);

/// The rows of the use and pull histories that name images of a sorted list, each with the
/// image's index in that list, in the tables' order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryRows {
    /// Each use interval of a listed image: (index, started at, last seen), open intervals
    /// first, then closed ones oldest first (the table's order, as [`Store::uses`]).
    pub uses: Vec<(u32, UnixNanos, UnixNanos)>,
    /// Each pull of a listed image: (index, at), oldest first (as [`Store::pulls`]).
    pub pulls: Vec<(u32, UnixNanos)>,
}

/// How the byte sequences that are the concatenations of `a`'s and of `b`'s pieces compare,
/// without concatenating them.
fn cmp_pieces(a: &[&[u8]], b: &[&[u8]]) -> Ordering {
    let (mut a, mut b) = (a.iter().copied(), b.iter().copied());
    let (mut x, mut y): (&[u8], &[u8]) = (&[], &[]);
    loop {
        while x.is_empty() {
            match a.next() {
                Some(next) => x = next,
                None => break,
            }
        }
        while y.is_empty() {
            match b.next() {
                Some(next) => y = next,
                None => break,
            }
        }
        if x.is_empty() || y.is_empty() {
            // One sequence ended: the shorter is first.
            return (!x.is_empty()).cmp(&!y.is_empty());
        }
        let n = x.len().min(y.len());
        match x[..n].cmp(&y[..n]) {
            Ordering::Equal => {
                x = &x[n..];
                y = &y[n..];
            }
            other => return other,
        }
    }
}

/// How the stored bytes of a record key compare with the encoding of `key` (`codec.rs`:
/// `[1][id][0][handler]`), without encoding it.
pub(super) fn cmp_encoded(stored: &[u8], (id, handler): KeyParts<'_>) -> Ordering {
    let Some((&layout, rest)) = stored.split_first() else {
        return Ordering::Less;
    };
    if layout != LAYOUT_V1 {
        return layout.cmp(&LAYOUT_V1);
    }
    // One comparison of the ids' bytes, then the separator and the handlers'.
    let n = rest.len().min(id.len());
    match rest[..n].cmp(&id[..n]) {
        Ordering::Equal => {}
        other => return other,
    }
    if rest.len() < id.len() {
        return Ordering::Less;
    }
    match rest[n..].split_first() {
        None => Ordering::Less,
        Some((&separator, after)) => separator.cmp(&0).then_with(|| after.cmp(handler)),
    }
}

/// How the encodings of two keys compare: one comparison of the ids' bytes when they differ
/// within the shorter id (as ids of one length do), else the pieces that follow.
fn cmp_keys_encoded((a_id, a_handler): KeyParts<'_>, (b_id, b_handler): KeyParts<'_>) -> Ordering {
    let n = a_id.len().min(b_id.len());
    match a_id[..n].cmp(&b_id[..n]) {
        Ordering::Equal if a_id.len() == b_id.len() => a_handler.cmp(b_handler),
        Ordering::Equal => cmp_pieces(
            &[&a_id[n..], &[0], a_handler],
            &[&b_id[n..], &[0], b_handler],
        ),
        other => other,
    }
}

/// The byte at `at` of the encoding of `key` (`[1][id][0][handler]`), `None` past its end.
fn encoded_byte((id, handler): KeyParts<'_>, at: usize) -> Option<u8> {
    match at.checked_sub(1) {
        None => Some(LAYOUT_V1),
        Some(i) if i < id.len() => Some(id[i]),
        Some(i) if i == id.len() => Some(0),
        Some(i) => handler.get(i - id.len() - 1).copied(),
    }
}

/// The 8 bytes of `key`'s encoding from `at`, big-endian, zeros past its end. For encodings
/// that agree before `at`, `a < b` gives `window(a) <= window(b)`: windows compared first, and
/// the encodings only on equal windows, order such keys as their encodings do.
fn key_window(key: KeyParts<'_>, at: usize) -> u64 {
    let id = key.0;
    // Most often the window lies within the id (an id is 71 bytes, the common prefix 8).
    if let Some(bytes) = at
        .checked_sub(1)
        .and_then(|from| id.get(from..from + 8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
    {
        return u64::from_be_bytes(bytes);
    }
    (0..8).fold(0, |w, j| {
        (w << 8) | u64::from(encoded_byte(key, at + j).unwrap_or(0))
    })
}

/// [`key_window`] of stored encoded bytes.
fn stored_window(stored: &[u8], at: usize) -> u64 {
    match stored
        .get(at..)
        .and_then(|rest| rest.get(..8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
    {
        Some(bytes) => u64::from_be_bytes(bytes),
        None => (0..8).fold(0, |w, j| {
            (w << 8) | u64::from(stored.get(at + j).copied().unwrap_or(0))
        }),
    }
}

/// Finds keys by their encodings: by binary search over the keys in the encodings' order (the
/// keys themselves when strictly ascending, as a detect's list is; else their indexes sorted),
/// comparing first an integer per key (the 8 bytes of its encoding after the prefix every key's
/// encoding shares, in one contiguous array) and the encodings only where those are equal.
struct Lookup<'k, 'a> {
    keys: &'k [KeyParts<'a>],
    sorted: Option<Vec<u32>>,
    /// The prefix every key's encoding starts with.
    common: Vec<u8>,
    /// Each key's [`key_window`] after `common`, in the encodings' order.
    windows: Vec<u64>,
}

impl<'k, 'a> Lookup<'k, 'a> {
    fn new(keys: &'k [KeyParts<'a>]) -> Lookup<'k, 'a> {
        Lookup::in_given_order(keys).unwrap_or_else(|| {
            let len = u32::try_from(keys.len()).expect("fewer than 4G keys");
            let mut sorted: Vec<u32> = (0..len).collect();
            sorted.sort_by(|&a, &b| cmp_keys_encoded(keys[a as usize], keys[b as usize]));
            let mut lookup = Lookup {
                keys,
                sorted: Some(sorted),
                common: Vec::new(),
                windows: Vec::with_capacity(keys.len()),
            };
            lookup.common = lookup.common_prefix();
            let at = lookup.common.len();
            lookup.windows = (0..keys.len())
                .filter_map(|i| lookup.key(i).map(|k| key_window(k, at)))
                .collect();
            lookup
        })
    }

    /// The lookup over `keys` as given, `None` unless they are strictly ascending: the order
    /// is checked in the pass that reads each key for its window, each key against the one
    /// read just before (no pass of its own through the keys' bytes).
    fn in_given_order(keys: &'k [KeyParts<'a>]) -> Option<Lookup<'k, 'a>> {
        let mut lookup = Lookup {
            keys,
            sorted: None,
            common: Vec::new(),
            windows: Vec::with_capacity(keys.len()),
        };
        // The first and the last encodings' common prefix is every one's once the order holds.
        lookup.common = lookup.common_prefix();
        let at = lookup.common.len();
        let mut previous: Option<KeyParts<'a>> = None;
        for &key in keys {
            if previous.is_some_and(|p| cmp_keys_encoded(p, key) != Ordering::Less) {
                return None;
            }
            lookup.windows.push(key_window(key, at));
            previous = Some(key);
        }
        Some(lookup)
    }

    /// The common prefix of the first and the last keys' encodings in the encodings' order.
    fn common_prefix(&self) -> Vec<u8> {
        match (self.key(0), self.key(self.keys.len().wrapping_sub(1))) {
            (Some(first), Some(last)) => (0..)
                .map_while(|at| {
                    encoded_byte(first, at).filter(|&b| encoded_byte(last, at) == Some(b))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The key `rank`-th in the encodings' order.
    fn key(&self, rank: usize) -> Option<KeyParts<'a>> {
        match &self.sorted {
            None => self.keys.get(rank).copied(),
            Some(sorted) => sorted
                .get(rank)
                .and_then(|&i| self.keys.get(i as usize))
                .copied(),
        }
    }

    /// The index in the keys of one whose encoding `stored` is.
    fn find(&self, stored: &[u8]) -> Option<u32> {
        if !stored.starts_with(&self.common) {
            return None;
        }
        let window = stored_window(stored, self.common.len());
        // The keys whose windows equal `stored`'s, then the encodings among them.
        let mut lo = self.windows.partition_point(|&w| w < window);
        if self.windows.get(lo) != Some(&window) {
            return None;
        }
        let mut hi = lo + self.windows[lo..].partition_point(|&w| w == window);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match cmp_encoded(stored, self.key(mid)?) {
                Ordering::Less => hi = mid,
                Ordering::Greater => lo = mid + 1,
                Ordering::Equal => {
                    let index = match &self.sorted {
                        None => mid,
                        Some(sorted) => sorted[mid] as usize,
                    };
                    return Some(u32::try_from(index).expect("fewer than 4G keys"));
                }
            }
        }
        None
    }
}

fn encode(key: KeyParts<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.0.len() + key.1.len());
    out.push(LAYOUT_V1);
    out.extend_from_slice(key.0);
    out.push(0);
    out.extend_from_slice(key.1);
    out
}

impl Store {
    /// The records of `keys`, in their order (`None` where there is none), in one read
    /// transaction: as [`Store::get_many`] of the same keys, without a key encoded or
    /// allocated. Keys in strictly ascending order (a detect's list) are read by one range
    /// scan from the first to the last, merged with them, each matched record decoded once
    /// (the order checked as the merge goes); others by one lookup each (also when the merge
    /// meets a key out of order).
    pub fn get_sorted(
        &self,
        keys: &[KeyParts<'_>],
    ) -> Result<Vec<Option<ImageRecord>>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, IMAGES)?;
            if let Some(out) = self.merge_in_key_order(&table, keys)? {
                return Ok(out);
            }
            let mut out = Vec::with_capacity(keys.len());
            for &key in keys {
                let encoded = encode(key);
                let found = table
                    .get(Encoded::<RecordKey>::new(&encoded))
                    .map_err(|e| self.redb_err(e))?;
                out.push(match found {
                    None => None,
                    Some(guard) => Some(guard.value().decode().map_err(|e| self.decode_err(e))?),
                });
            }
            Ok(out)
        })
    }

    /// [`Store::get_sorted`] by one range scan merged with `keys`, `None` unless `keys` are
    /// strictly ascending: the order is checked as the merge reaches each key, against the
    /// key it reached before (no pass of its own through the keys' bytes).
    fn merge_in_key_order<'k>(
        &self,
        table: &ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
        keys: &[KeyParts<'k>],
    ) -> Result<Option<Vec<Option<ImageRecord>>>, StoreError> {
        let (Some(&first), Some(&last)) = (keys.first(), keys.last()) else {
            return Ok(Some(Vec::new()));
        };
        if cmp_keys_encoded(first, last) == Ordering::Greater {
            return Ok(None);
        }
        let mut previous: Option<KeyParts<'k>> = None;
        let mut in_order = |key: KeyParts<'k>| {
            let ascending = previous.is_none_or(|p| cmp_keys_encoded(p, key) == Ordering::Less);
            previous = Some(key);
            ascending
        };
        let (first, last) = (encode(first), encode(last));
        let range = table
            .range::<Encoded<RecordKey>>(
                Encoded::<RecordKey>::new(&first)..=Encoded::<RecordKey>::new(&last),
            )
            .map_err(|e| self.redb_err(e))?;
        let mut out = Vec::with_capacity(keys.len());
        let mut wanted = keys.iter().peekable();
        for entry in range {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            let stored = k.value().bytes();
            // Each wanted key compared once with each stored key it is not past.
            while let Some(&&w) = wanted.peek() {
                match cmp_encoded(stored, w) {
                    Ordering::Greater => {
                        if !in_order(w) {
                            return Ok(None);
                        }
                        wanted.next();
                        out.push(None);
                    }
                    Ordering::Equal => {
                        if !in_order(w) {
                            return Ok(None);
                        }
                        wanted.next();
                        out.push(Some(v.value().decode().map_err(|e| self.decode_err(e))?));
                        break;
                    }
                    Ordering::Less => break,
                }
            }
            if wanted.peek().is_none() {
                break;
            }
        }
        for &w in wanted {
            if !in_order(w) {
                return Ok(None);
            }
            out.push(None);
        }
        Ok(Some(out))
    }

    /// The use intervals and pulls of the images `keys`, in one read transaction: the rows
    /// [`Store::uses_of`] and [`Store::pulls_of`] return for the same keys, in the same order,
    /// as (index in `keys`, times; a key given twice has its rows under one of its indexes).
    /// Each row's raw record key is looked up in `keys` by binary search (in the keys
    /// themselves when strictly ascending, as a detect's list is), and only a matched row's
    /// times are decoded.
    pub fn histories_of_keys(&self, keys: &[KeyParts<'_>]) -> Result<HistoryRows, StoreError> {
        let lookup = Lookup::new(keys);
        self.guarded(|| {
            let txn = self.begin_read()?;
            let mut rows = HistoryRows::default();
            let uses = self.open_read_table(&txn, USES)?;
            for entry in uses.iter().map_err(|e| self.redb_err(e))? {
                let (k, v) = entry.map_err(|e| self.redb_err(e))?;
                let raw = k.value().bytes();
                // A use key is [layout][closed][started_at: 8][record key] (`codec.rs`).
                let Some(at) = raw.get(10..).and_then(|key| lookup.find(key)) else {
                    continue;
                };
                let started_at = codec::use_key_start(raw).map_err(|e| self.decode_err(e))?;
                let interval: UseInterval = v.value().decode().map_err(|e| self.decode_err(e))?;
                rows.uses.push((at, started_at, interval.last_seen));
            }
            let pulls = self.open_read_table(&txn, PULLS)?;
            for entry in pulls.iter().map_err(|e| self.redb_err(e))? {
                let (k, _) = entry.map_err(|e| self.redb_err(e))?;
                let raw = k.value().bytes();
                // A pull key is [layout][at: 8][record key] (`codec.rs`).
                let Some(at) = raw.get(9..).and_then(|key| lookup.find(key)) else {
                    continue;
                };
                let pulled_at = codec::pull_key_at(raw).map_err(|e| self.decode_err(e))?;
                rows.pulls.push((at, pulled_at));
            }
            Ok(rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids and handlers at the edges of the key encoding: empty, the separator and the bytes
    /// around it, shared prefixes.
    const EDGE_PARTS: [&str; 10] = [
        "",
        "\0",
        "\x01",
        "a",
        "a\0",
        "a\0b",
        "ab",
        "b",
        "sha256:1",
        "sha256:12",
    ];

    /// The comparison without encoding is the encoded bytes' comparison, on ids and handlers
    /// that share prefixes, are empty, or hold the separator and bytes around it.
    #[test]
    fn comparing_with_the_parts_is_comparing_the_encodings() {
        let parts: Vec<&[u8]> = EDGE_PARTS.iter().map(|s| s.as_bytes()).collect();
        let keys: Vec<KeyParts<'_>> = parts
            .iter()
            .flat_map(|id| parts.iter().map(move |handler| (*id, *handler)))
            .collect();
        let mut stored: Vec<Vec<u8>> = keys.iter().map(|k| encode(*k)).collect();
        stored.extend([vec![], vec![0], vec![2], vec![1], vec![1, 0], vec![1, b'a']]);
        for s in &stored {
            for &key in &keys {
                assert_eq!(
                    cmp_encoded(s, key),
                    s.as_slice().cmp(&encode(key)),
                    "{s:?} {key:?}"
                );
            }
        }
        for &a in &keys {
            for &b in &keys {
                let want = encode(a).cmp(&encode(b));
                assert_eq!(cmp_keys_encoded(a, b), want, "{a:?} {b:?}");
            }
        }
    }

    /// The lookup finds exactly the keys whose encodings a stored key's bytes are (a linear
    /// search's answer), for sets of keys sorted and shuffled, with ids and handlers that are
    /// empty, hold the separator, share long prefixes (equal windows) or end within the window,
    /// and stored bytes that are no key's encoding.
    #[test]
    fn the_lookup_finds_what_a_linear_search_finds() {
        let mut parts: Vec<String> = EDGE_PARTS.iter().map(|s| (*s).to_owned()).collect();
        for i in 0..6 {
            parts.push(format!("sha256:0123456789abcdef{i}"));
            parts.push(format!("sha256:0123456{i}"));
        }
        let all: Vec<KeyParts<'_>> = parts
            .iter()
            .flat_map(|id| parts.iter().map(move |h| (id.as_bytes(), h.as_bytes())))
            .collect();
        let mut stored: Vec<Vec<u8>> = all.iter().map(|k| encode(*k)).collect();
        stored.extend([vec![], vec![0], vec![2], vec![1], vec![1, 0], vec![1, b'a']]);
        stored.push(b"\x01sha256:0123456789abcdef9\0".to_vec());
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut keys: Vec<KeyParts<'_>> =
                all.iter().copied().filter(|_| rng.u8(0..4) == 0).collect();
            keys.sort_by_key(|k| encode(*k));
            keys.dedup_by_key(|k| encode(*k));
            if seed % 2 == 1 {
                rng.shuffle(&mut keys);
            }
            let lookup = Lookup::new(&keys);
            for s in &stored {
                let want = keys.iter().position(|k| encode(*k) == *s);
                let got = lookup.find(s).map(|i| i as usize);
                assert_eq!(got, want, "seed {seed}: {s:?} among {keys:?}");
            }
        }
    }

    /// The test's record key: image `sha256:<i in hex>` under handler `""`, `runc` or
    /// `runc-b` by `h`.
    fn numbered_key(i: u32, h: u8) -> crate::model::RecordKey {
        crate::model::RecordKey::new(format!("sha256:{i:x}"), ["", "runc", "runc-b"][h as usize])
    }

    /// Writes, for `key`, a random record (three times in four), up to three random use
    /// intervals and up to two pulls.
    fn write_random_rows(store: &Store, rng: &mut fastrand::Rng, key: &crate::model::RecordKey) {
        use crate::model::{PullEntry, PullKey, PullOrigin, UseKey};
        use crate::store::Codec;

        if rng.u8(0..4) != 0 {
            let record = ImageRecord {
                first_detected: UnixNanos(rng.i64(1..1000)),
                last_used: UnixNanos(rng.i64(0..1000)),
                size: rng.u64(1..100),
                pinned: rng.bool(),
            };
            store.raw_bytes_for_tests("images", &key.encode(), &record.encode());
        }
        for _ in 0..rng.usize(0..4) {
            let use_key = UseKey {
                closed: rng.bool(),
                started_at: UnixNanos(rng.i64(-5..1000)),
                key: key.clone(),
            };
            let interval = UseInterval {
                last_seen: UnixNanos(rng.i64(0..2000)),
            };
            store.raw_bytes_for_tests("uses", &use_key.encode(), &interval.encode());
        }
        for _ in 0..rng.usize(0..3) {
            let pull_key = PullKey {
                at: UnixNanos(rng.i64(-5..1000)),
                key: key.clone(),
            };
            let entry = PullEntry {
                size: 1,
                origin: PullOrigin::Pull,
                took: std::time::Duration::ZERO,
                name: "reg/app:1".to_owned(),
            };
            store.raw_bytes_for_tests("pulls", &pull_key.encode(), &entry.encode());
        }
    }

    fn parts_of(keys: &[crate::model::RecordKey]) -> Vec<KeyParts<'_>> {
        keys.iter()
            .map(|k| (k.image_id.as_str().as_bytes(), k.runtime_handler.as_bytes()))
            .collect()
    }

    /// `get_sorted` and `histories_of_keys` on `asked` give what `get_many`, `uses_of` and
    /// `pulls_of` give, and so does `get_sorted` with the last key asked twice.
    fn assert_sorted_reads_equal_keyed_reads(
        store: &Store,
        asked: &[crate::model::RecordKey],
        context: &str,
    ) {
        use crate::model::RecordKey;
        use std::collections::BTreeSet;

        let parts = parts_of(asked);
        let want = store.get_many(asked).expect("get_many");
        assert_eq!(
            store.get_sorted(&parts).expect("get_sorted"),
            want,
            "{context}"
        );
        let set: BTreeSet<&RecordKey> = asked.iter().collect();
        let index =
            |key: &RecordKey| asked.iter().position(|k| k == key).expect("an asked key") as u32;
        let rows = store.histories_of_keys(&parts).expect("histories");
        let uses: Vec<(u32, UnixNanos, UnixNanos)> = store
            .uses_of(&set)
            .expect("uses_of")
            .into_iter()
            .map(|(k, v)| (index(&k.key), k.started_at, v.last_seen))
            .collect();
        let pulls: Vec<(u32, UnixNanos)> = store
            .pulls_of(&set)
            .expect("pulls_of")
            .into_iter()
            .map(|(k, _)| (index(&k.key), k.at))
            .collect();
        assert_eq!(rows, HistoryRows { uses, pulls }, "{context}");
        // A key asked twice (not strictly ascending) is found twice.
        if let Some(last) = asked.last().cloned() {
            let mut twice = asked.to_vec();
            twice.push(last);
            assert_eq!(
                store.get_sorted(&parts_of(&twice)).expect("get_sorted"),
                store.get_many(&twice).expect("get_many"),
                "{context}, the last key twice"
            );
        }
    }

    /// `get_sorted` and `histories_of_keys` give what `get_many`, `uses_of` and `pulls_of` give
    /// for the same keys: sorted (one range scan), out of order at the end or throughout or
    /// asked twice (lookups, once the merge meets the disorder), with keys the store lacks,
    /// keys between and around stored ones, and rows of images not asked for.
    #[test]
    fn sorted_reads_equal_the_keyed_reads_for_the_same_keys() {
        use crate::model::RecordKey;

        for seed in 0..40u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let store = Store::open_in_memory(std::path::Path::new("sorted.redb"), UnixNanos(1))
                .expect("an in-memory store");
            let mut all: Vec<RecordKey> = (0..rng.u32(0..60))
                .map(|_| numbered_key(rng.u32(0..80), rng.u8(0..3)))
                .collect();
            all.sort();
            all.dedup();
            for key in &all {
                write_random_rows(&store, &mut rng, key);
            }
            // Asked: a subset of the stored keys and keys the store lacks.
            let mut asked: Vec<RecordKey> = all.iter().filter(|_| rng.bool()).cloned().collect();
            asked.extend((0..rng.usize(0..5)).map(|_| numbered_key(rng.u32(80..90), rng.u8(0..3))));
            asked.sort();
            asked.dedup();
            // In key order, then out of it only at the end (found by the merge's last
            // comparisons), then shuffled.
            for disorder in ["none", "last two swapped", "shuffled"] {
                match disorder {
                    "last two swapped" if asked.len() >= 2 => {
                        let n = asked.len();
                        asked.swap(n - 2, n - 1);
                    }
                    "shuffled" => rng.shuffle(&mut asked),
                    _ => {}
                }
                let context = format!("seed {seed}, disorder {disorder}");
                assert_sorted_reads_equal_keyed_reads(&store, &asked, &context);
            }
        }
    }
}
