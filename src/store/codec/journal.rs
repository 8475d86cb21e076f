//! The layouts of schema 2's journal and names: the journal key ((removed_at, record key),
//! ordered, so the journal reads oldest first and "removed before" is a prefix range), the
//! fixed-width journal entry (a flag byte says which optional fields are present; a field
//! whose flag is clear is all zeros, so the layout stays canonical) and an image's repo tags
//! and digests. As every layout of the codec (see the parent module): a version byte first,
//! canonical, decoded only through the checked [`Reader`], never a panic.

use super::{
    Codec, DecodeError, LAYOUT_V1, OrderedCodec, Reader, from_ordered_i64, ordered_i64, u32_len,
};
use crate::model::{
    FsUsage, ImageNames, JournalEntry, RecordKey, RemovalReason, Remover, UnixNanos,
};

/// The key of a journal entry: when the image was removed, then its record key, so the
/// journal reads oldest first and a range up to a time is a prefix scan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JournalKey {
    /// When the image was removed.
    pub removed_at: UnixNanos,
    /// The image's record key.
    pub key: RecordKey,
}

impl JournalKey {
    /// The encoded prefix shared by every key with this `removed_at`: an exclusive upper
    /// bound for "removed_at < bound" range scans.
    pub fn removed_at_prefix(removed_at: UnixNanos) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(removed_at.0));
        out
    }
}

// JournalKey: [1][removed_at ordered][RecordKey layout]
impl Codec for JournalKey {
    const TYPE_NAME: &'static str = "imagekeeper::JournalKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let key = self.key.encode();
        let mut out = Vec::with_capacity(9 + key.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.removed_at.0));
        out.extend_from_slice(&key);
        out
    }

    fn decode(bytes: &[u8]) -> Result<JournalKey, DecodeError> {
        let mut r = Reader::start("journal key", bytes)?;
        let removed_at = from_ordered_i64(r.array8(9)?);
        let key = RecordKey::decode(r.bytes)?;
        Ok(JournalKey {
            removed_at: UnixNanos(removed_at),
            key,
        })
    }
}
impl OrderedCodec for JournalKey {}

// JournalEntry (64 bytes): [1][size u64][first_detected i64][last_used i64]
// [reason u8: 0 none, 1 age, 2 space, 3 unused, 4 inodes, 5 budget (4 and 5 since issue 28),
// 6 orphan (since issue 57: a containerd leftover `prune --orphans` removed); an older reader
// refuses a newer code as an invalid reason, a newer reader reads every older file][remover u8: 0 imagekeeper, 1 external]
// [flags u8: bit 0 rank, bit 1 fs, bit 2 repulled][rank u32][capacity u64][used_before u64]
// [target_used u64][repulled_at i64]; a field whose flag is clear is all zeros.
const JOURNAL_WIDTH: usize = 1 + 8 + 8 + 8 + 1 + 1 + 1 + 4 + 8 + 8 + 8 + 8;
const FLAG_RANK: u8 = 1;
const FLAG_FS: u8 = 2;
const FLAG_REPULLED: u8 = 4;

impl Codec for JournalEntry {
    const TYPE_NAME: &'static str = "imagekeeper::JournalEntry";
    const FIXED_WIDTH: Option<usize> = Some(JOURNAL_WIDTH);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(JOURNAL_WIDTH);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.first_detected.0.to_be_bytes());
        out.extend_from_slice(&self.last_used.0.to_be_bytes());
        out.push(match self.reason {
            None => 0,
            Some(RemovalReason::Age) => 1,
            Some(RemovalReason::Space) => 2,
            Some(RemovalReason::Unused) => 3,
            Some(RemovalReason::Inodes) => 4,
            Some(RemovalReason::Budget) => 5,
            Some(RemovalReason::Orphan) => 6,
        });
        out.push(match self.remover {
            Remover::Imagekeeper => 0,
            Remover::External => 1,
        });
        let mut flags = 0;
        if self.rank.is_some() {
            flags |= FLAG_RANK;
        }
        if self.fs.is_some() {
            flags |= FLAG_FS;
        }
        if self.repulled_at.is_some() {
            flags |= FLAG_REPULLED;
        }
        out.push(flags);
        out.extend_from_slice(&self.rank.unwrap_or(0).to_be_bytes());
        let fs = self.fs.unwrap_or(FsUsage {
            capacity: 0,
            used_before: 0,
            target_used: 0,
        });
        out.extend_from_slice(&fs.capacity.to_be_bytes());
        out.extend_from_slice(&fs.used_before.to_be_bytes());
        out.extend_from_slice(&fs.target_used.to_be_bytes());
        out.extend_from_slice(&self.repulled_at.map_or(0, |t| t.0).to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<JournalEntry, DecodeError> {
        const WHAT: &str = "journal entry";
        let invalid = |field| DecodeError::Invalid { what: WHAT, field };
        let mut r = Reader::start(WHAT, bytes)?;
        if bytes.len() != JOURNAL_WIDTH {
            return Err(DecodeError::Length {
                what: WHAT,
                expected: JOURNAL_WIDTH,
                found: bytes.len(),
            });
        }
        let size = u64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let first_detected = i64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let last_used = i64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let head = r.take(3, JOURNAL_WIDTH)?;
        let reason = match head[0] {
            0 => None,
            1 => Some(RemovalReason::Age),
            2 => Some(RemovalReason::Space),
            3 => Some(RemovalReason::Unused),
            4 => Some(RemovalReason::Inodes),
            5 => Some(RemovalReason::Budget),
            6 => Some(RemovalReason::Orphan),
            _ => return Err(invalid("reason")),
        };
        let remover = match head[1] {
            0 => Remover::Imagekeeper,
            1 => Remover::External,
            _ => return Err(invalid("remover")),
        };
        let flags = head[2];
        if flags & !(FLAG_RANK | FLAG_FS | FLAG_REPULLED) != 0 {
            return Err(invalid("flags"));
        }
        let rank_bytes = r.take(4, JOURNAL_WIDTH)?;
        let rank = u32::from_be_bytes([rank_bytes[0], rank_bytes[1], rank_bytes[2], rank_bytes[3]]);
        let capacity = u64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let used_before = u64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let target_used = u64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        let repulled_at = i64::from_be_bytes(r.array8(JOURNAL_WIDTH)?);
        r.finish(JOURNAL_WIDTH)?;
        let present = |flag: u8, zero: bool, field| match (flags & flag != 0, zero) {
            (true, _) => Ok(true),
            (false, true) => Ok(false),
            (false, false) => Err(invalid(field)),
        };
        let rank = present(FLAG_RANK, rank == 0, "rank")?.then_some(rank);
        let fs = present(
            FLAG_FS,
            capacity == 0 && used_before == 0 && target_used == 0,
            "filesystem usage",
        )?
        .then_some(FsUsage {
            capacity,
            used_before,
            target_used,
        });
        let repulled_at = present(FLAG_REPULLED, repulled_at == 0, "repulled_at")?
            .then_some(UnixNanos(repulled_at));
        Ok(JournalEntry {
            size,
            first_detected: UnixNanos(first_detected),
            last_used: UnixNanos(last_used),
            reason,
            rank,
            fs,
            remover,
            repulled_at,
        })
    }
}

// ImageNames: [1][u32 tag count]([u32 length][UTF-8])*[u32 digest count]([u32 length][UTF-8])*
impl Codec for ImageNames {
    const TYPE_NAME: &'static str = "imagekeeper::ImageNames";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let len: usize = self
            .repo_tags
            .iter()
            .chain(&self.repo_digests)
            .map(|n| 4 + n.len())
            .sum();
        let mut out = Vec::with_capacity(9 + len);
        out.push(LAYOUT_V1);
        for list in [&self.repo_tags, &self.repo_digests] {
            out.extend_from_slice(&u32_len(list.len()).to_be_bytes());
            for name in list {
                out.extend_from_slice(&u32_len(name.len()).to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<ImageNames, DecodeError> {
        let total = bytes.len();
        let mut r = Reader::start("image names", bytes)?;
        let mut lists: [Vec<String>; 2] = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let count = r.u32(total)?;
            for _ in 0..count {
                let len = usize::try_from(r.u32(total)?).map_err(|_| DecodeError::Invalid {
                    what: "image names",
                    field: "name length",
                })?;
                list.push(r.str(len, total, "name")?.to_owned());
            }
        }
        r.finish(total)?;
        let [repo_tags, repo_digests] = lists;
        Ok(ImageNames {
            repo_tags,
            repo_digests,
        })
    }
}

/// Whether the encoded names `bytes` are exactly `tags` and then `digests`, in order, read in
/// place: no name is copied. The bytes are checked as [`ImageNames`]'s `decode` checks them
/// (bytes it refuses are the same error here, whether or not the names differ before the
/// bad part); a stored name equal to a listed one is UTF-8 because the listed one is, so only
/// the names that differ are checked for it. Detect's names walk compares so.
pub(crate) fn names_equal_encoded<'a>(
    bytes: &[u8],
    tags: impl Iterator<Item = &'a str>,
    digests: impl Iterator<Item = &'a str>,
) -> Result<bool, DecodeError> {
    let total = bytes.len();
    let mut r = Reader::start("image names", bytes)?;
    let same = list_equal_encoded(&mut r, total, tags, true)?;
    let same = list_equal_encoded(&mut r, total, digests, same)?;
    r.finish(total)?;
    Ok(same)
}

/// One list of [`names_equal_encoded`]: reads its count and names from `r`, comparing them
/// with `listed` while `same` holds; whether they are still the same.
fn list_equal_encoded<'a>(
    r: &mut Reader<'_>,
    total: usize,
    mut listed: impl Iterator<Item = &'a str>,
    mut same: bool,
) -> Result<bool, DecodeError> {
    let count = r.u32(total)?;
    for _ in 0..count {
        let len = usize::try_from(r.u32(total)?).map_err(|_| DecodeError::Invalid {
            what: "image names",
            field: "name length",
        })?;
        let stored = r.take(len, total)?;
        if !(same && listed.next().is_some_and(|l| l.as_bytes() == stored)) {
            same = false;
            std::str::from_utf8(stored).map_err(|_| DecodeError::Utf8 {
                what: "image names",
                field: "name",
            })?;
        }
    }
    Ok(same && listed.next().is_none())
}
