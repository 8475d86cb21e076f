//! A batch of changes that the store applies as one write transaction: one detect cycle, one
//! pull outcome, one GC removal. Applying a batch that changes nothing commits nothing.

use std::borrow::Cow;

use crate::model::{
    BackoffEntry, EvictionNote, ImageList, ImageNames, ImagePin, ImageRecord, PinKey, PullEntry,
    PullKey, RecordKey, RuntimeLabel, Sighting, UnixNanos, WarmRow,
};

mod sightings;

pub use sightings::ListedSightings;

/// One change inside a [`Batch`].
///
/// A detect's sightings go into one [`BatchOp::Sightings`] (an entry of 40 bytes per image,
/// its key and names read from the runtime's list), so a first detect of n images holds a
/// few operations, not n. A `Sight` (a key, the sighting and the names) is the largest
/// variant (128 bytes, a test holds it): the size of every operation of a batch that does not
/// come from a detect's walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Make the record exactly this.
    Upsert {
        /// The record's key.
        key: RecordKey,
        /// The record to write.
        record: ImageRecord,
    },
    /// Create the record as first detected and used now, or move its last_used to now, or
    /// one nanosecond past the stored last_used when that is not earlier than now (a clock
    /// that went back): a mark never moves last_used back and always moves it, so a detect
    /// or a GC that read the record before sees the mark. A known size replaces the stored
    /// one.
    MarkUsed {
        /// The record's key.
        key: RecordKey,
        /// The time of the use.
        now: UnixNanos,
        /// The image's size, when known.
        size: Option<u64>,
    },
    /// Detect's write of a listed image, merged with the record as it is inside the write
    /// transaction ([`ImageRecord::after_sighting`]), so a pull's mark committed after the
    /// detect read its snapshot is kept. With `names`, then the image's names, as a
    /// [`BatchOp::SetNames`] of the key right after it would (see [`SightedNames`]): one
    /// operation and one key per new image instead of two of each.
    Sight {
        /// The record's key.
        key: RecordKey,
        /// What the detect saw.
        sighting: Sighting,
        /// The image's names, for a new image.
        names: Option<ImageNames>,
    },
    /// Detect's sightings of images of one runtime list, each with its clamp and names: the
    /// operations [`ListedSightings::expanded`] gives, in order, held without an owned key or
    /// names per image (see [`Batch::sight_listed`]).
    Sightings(Box<ListedSightings>),
    /// Detect's undoing of a clock that was ahead: each of the record's first_detected and
    /// last_used that lies after `limit` (as the record is inside the write transaction)
    /// becomes `now`; a record with no such stamp, or none, is left as it is.
    ClampFuture {
        /// The record's key.
        key: RecordKey,
        /// Stamps after this are ahead of the clock.
        limit: UnixNanos,
        /// The time they become.
        now: UnixNanos,
    },
    /// Delete the record if it exists (and its names, unless a journal entry keeps them). No
    /// journal entry: GC's removals are [`BatchOp::Evict`], detect's [`BatchOp::RemoveUnlisted`].
    Remove {
        /// The record's key.
        key: RecordKey,
    },
    /// Detect's removal of a record the runtime no longer lists: deleted only if its last_used
    /// is still `seen_last_used` or older (a pull that marked it since the detect's snapshot
    /// keeps it; the next detect decides again). With `journal_at`, the deletion is journaled
    /// at that time as an external removal, in the same transaction.
    RemoveUnlisted {
        /// The record's key.
        key: RecordKey,
        /// The last_used the detect read.
        seen_last_used: UnixNanos,
        /// When to journal the external removal, if at all.
        journal_at: Option<UnixNanos>,
        /// imagekeeper removed the image but could not delete the record then (its
        /// [`BatchOp::Evict`] failed): the deletion is journaled as that eviction, at
        /// `note.removed_at` with imagekeeper as the remover, instead of as an external removal.
        note: Option<EvictionNote>,
    },
    /// imagekeeper removed the image: delete the record and journal the removal (the record's
    /// fields as they are inside the transaction, plus `note`) in the same transaction; the
    /// names stay for the journal entry. No record, nothing happens.
    Evict {
        /// The record's key.
        key: RecordKey,
        /// What the journal entry adds to the record's fields.
        note: EvictionNote,
    },
    /// `prune --orphans` removed a containerd leftover (an orphaned snapshot or an unreferenced
    /// blob: no image record): journal it at `removed_at` under its
    /// [`crate::model::leftover_key`], reason `orphan`, by imagekeeper, with its bytes and its
    /// creation time (as the entry's first_detected; last_used 0: nothing used it).
    JournalLeftover {
        /// The leftover's key ([`crate::model::leftover_key`]).
        key: RecordKey,
        /// When it was removed.
        removed_at: UnixNanos,
        /// The bytes its removal freed.
        size: u64,
        /// When containerd created it.
        created: UnixNanos,
    },
    /// Set the image's names (as the runtime lists them) if the record exists and they
    /// differ.
    SetNames {
        /// The record's key.
        key: RecordKey,
        /// The names as the runtime lists them.
        names: ImageNames,
    },
    /// Write a pull's backoff entry (replacing one of the same key).
    PutBackoff {
        /// The backoff key.
        key: String,
        /// The entry to write.
        entry: BackoffEntry,
    },
    /// Delete a pull's backoff entry if it exists.
    RemoveBackoff {
        /// The backoff key.
        key: String,
    },
    /// Write a meta value.
    SetMeta {
        /// The meta key.
        name: String,
        /// Its value.
        value: i64,
    },
    /// Schema 4: write the operator's pin (replacing one of the same key).
    PutPin {
        /// The pin's key.
        key: PinKey,
        /// The pin.
        pin: ImagePin,
    },
    /// Schema 4: delete the pin if it exists.
    RemovePin {
        /// The pin's key.
        key: PinKey,
    },
    /// Schema 4: delete every pin that expired more than the journal's maximum age (the
    /// retention in force) before `now`: a detect's transaction carries it, so expired pins
    /// are pruned with the journal's retention, and an expired pin stays listed (as expired)
    /// for that long. A pin without expiry is never pruned.
    PruneExpiredPins {
        /// The time the expiry is judged at.
        now: UnixNanos,
    },
    /// Schema 5: a detect's whole view of the images running containers use at `now`
    /// (`migrations/0005_use_and_pull_history.md`): each image of `in_use` with an open use
    /// interval has its `last_seen` moved to `now` (never back); one without gets an interval
    /// opened at `now`; every open interval of an image not in `in_use` is closed (its
    /// `last_seen` kept). The use history is then pruned to the journal's retention at `now`.
    /// Like a note, it commits without counting as a change for the batch's stamps.
    ObserveUses {
        /// The detect's time.
        now: UnixNanos,
        /// The images running containers use.
        in_use: Vec<RecordKey>,
    },
    /// Schema 5: a container event's use of `key` at `now`: opens an interval unless one is
    /// open, else moves its `last_seen` to `now` (never back). Closing is the next detect's.
    OpenUse {
        /// The record's key.
        key: RecordKey,
        /// The time of the event.
        now: UnixNanos,
    },
    /// Schema 5: one pull in the pull history (replacing a row of the same key), then the
    /// history pruned to the journal's retention at `key.at`. A record this batch creates
    /// (a pull's mark, a detect's sighting, a container event's mark) without a `RecordPull` of
    /// its key in the same batch records itself as a `detected` pull (someone else pulled it).
    RecordPull {
        /// When and which image.
        key: PullKey,
        /// The pull.
        entry: PullEntry,
    },
    /// Schema 5: the warm set's state, replacing the `warm` table as a whole (row `i` is the
    /// set's entry `i`).
    ReplaceWarm {
        /// The warm set's rows, in priority order.
        rows: Vec<WarmRow>,
    },
    /// Schema 6: the agent is about to write (or adopts) its runtime pin labels on the
    /// containerd image `name` (`migrations/0006_runtime_labels.md`): the row is written
    /// (replacing one of the same name) before the label write it stands for.
    PutRuntimeLabel {
        /// The containerd image name.
        name: String,
        /// What the agent writes there.
        label: RuntimeLabel,
    },
    /// Schema 6: the agent's labels on `name` are gone (it removed them, or containerd no
    /// longer lists the name): the row is deleted if it exists.
    RemoveRuntimeLabel {
        /// The containerd image name.
        name: String,
    },
}

/// Changes applied together, atomically and durably, by [`super::Store::apply`]. Two batches
/// are equal when they apply the same operations ([`Batch::expanded_ops`]), however their
/// sightings are held.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub(super) ops: Vec<BatchOp>,
    /// Meta values written only when the other operations changed something, so that a
    /// cycle that changed nothing still commits nothing.
    pub(super) stamps: Vec<(String, i64)>,
    /// Meta values written (each when it differs) after the other operations, without
    /// counting as a change for the stamps: the detect's heartbeat, which commits every
    /// cycle but does not make `last_detect` "the latest detect that changed something".
    pub(super) notes: Vec<(String, i64)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Whether the batch holds no operation and no note.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.notes.is_empty()
    }

    /// Makes room for `additional` more sightings of `images` at once, exactly (a first
    /// detect knows its length: one sighting per listed image), so they are not grown by
    /// doubling.
    /// No room asked, nothing is added (an empty batch stays empty).
    pub fn reserve_sightings(&mut self, images: &ImageList, additional: usize) {
        if additional == 0 {
            return;
        }
        self.listed_sightings(images, None).reserve(additional);
    }

    /// Adds the sighting of the image at `position` in `images` (the runtime's list as the
    /// detect read it), after a [`BatchOp::ClampFuture`] of its key at `clamp` (and the
    /// sighting's `now`) if given: the same as those operations with the image's record key,
    /// held as 40 bytes in the batch's [`BatchOp::Sightings`] of that list. Returns false,
    /// adding nothing, for a position outside the list.
    pub fn sight_listed(
        &mut self,
        images: &ImageList,
        position: usize,
        clamp: Option<UnixNanos>,
        sighting: Sighting,
    ) -> bool {
        self.listed_sightings(images, clamp)
            .push(position, clamp, sighting)
    }

    /// The last operation if it is a [`BatchOp::Sightings`] that can take a sighting of
    /// `images` clamped at `clamp`, else a new one pushed.
    fn listed_sightings(
        &mut self,
        images: &ImageList,
        clamp: Option<UnixNanos>,
    ) -> &mut ListedSightings {
        let fits = matches!(
            self.ops.last(),
            Some(BatchOp::Sightings(s)) if s.accepts(images, clamp)
        );
        if !fits {
            self.ops
                .push(BatchOp::Sightings(Box::new(ListedSightings::new(
                    images.clone(),
                ))));
        }
        match self.ops.last_mut() {
            Some(BatchOp::Sightings(s)) => s,
            _ => unreachable!("a Sightings operation was just found or pushed last"),
        }
    }

    /// The operations as the store applies them: each [`BatchOp::Sightings`] as the
    /// operations it stands for, with owned keys and names (see
    /// [`ListedSightings::expanded`]), the others as they are.
    pub fn expanded_ops(&self) -> Vec<Cow<'_, BatchOp>> {
        let mut out = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            match op {
                BatchOp::Sightings(s) => out.extend(s.expanded().into_iter().map(Cow::Owned)),
                other => out.push(Cow::Borrowed(other)),
            }
        }
        out
    }

    /// Writes `name = value` (when it differs) whatever the rest of the batch does, without
    /// counting as a change for [`Batch::stamp_if_changed`].
    pub fn note_meta(&mut self, name: impl Into<String>, value: i64) {
        self.notes.push((name.into(), value));
    }

    /// The values [`Batch::note_meta`] writes, in order.
    pub fn notes(&self) -> &[(String, i64)] {
        &self.notes
    }

    /// The operations, in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// Adds a [`BatchOp::Upsert`].
    pub fn upsert(&mut self, key: RecordKey, record: ImageRecord) {
        self.ops.push(BatchOp::Upsert { key, record });
    }

    /// Adds a [`BatchOp::MarkUsed`].
    pub fn mark_used(&mut self, key: RecordKey, now: UnixNanos, size: Option<u64>) {
        self.ops.push(BatchOp::MarkUsed { key, now, size });
    }

    /// Adds a [`BatchOp::Sight`] without names.
    pub fn sight(&mut self, key: RecordKey, sighting: Sighting) {
        self.ops.push(BatchOp::Sight {
            key,
            sighting,
            names: None,
        });
    }

    /// Adds a [`BatchOp::ClampFuture`].
    pub fn clamp_future(&mut self, key: RecordKey, limit: UnixNanos, now: UnixNanos) {
        self.ops.push(BatchOp::ClampFuture { key, limit, now });
    }

    /// Adds a [`BatchOp::RemoveUnlisted`] without a journal entry.
    pub fn remove_unlisted(&mut self, key: RecordKey, seen_last_used: UnixNanos) {
        self.ops.push(BatchOp::RemoveUnlisted {
            key,
            seen_last_used,
            journal_at: None,
            note: None,
        });
    }

    /// [`Batch::remove_unlisted`], journaled at `now` as an external removal.
    pub fn remove_unlisted_journaled(
        &mut self,
        key: RecordKey,
        seen_last_used: UnixNanos,
        now: UnixNanos,
    ) {
        self.ops.push(BatchOp::RemoveUnlisted {
            key,
            seen_last_used,
            journal_at: Some(now),
            note: None,
        });
    }

    /// Journals this batch's [`BatchOp::RemoveUnlisted`] of `key` (if any) as imagekeeper's
    /// eviction with `note` instead of as an external removal. Returns whether the batch had
    /// one.
    pub fn attribute_unlisted(&mut self, key: &RecordKey, note: EvictionNote) -> bool {
        for op in &mut self.ops {
            if let BatchOp::RemoveUnlisted {
                key: k, note: n, ..
            } = op
                && k == key
            {
                *n = Some(note);
                return true;
            }
        }
        false
    }

    /// Adds a [`BatchOp::Evict`].
    pub fn evict(&mut self, key: RecordKey, note: EvictionNote) {
        self.ops.push(BatchOp::Evict { key, note });
    }

    /// Adds a [`BatchOp::JournalLeftover`].
    pub fn journal_leftover(
        &mut self,
        key: RecordKey,
        removed_at: UnixNanos,
        size: u64,
        created: UnixNanos,
    ) {
        self.ops.push(BatchOp::JournalLeftover {
            key,
            removed_at,
            size,
            created,
        });
    }

    /// Adds a [`BatchOp::SetNames`].
    pub fn set_names(&mut self, key: RecordKey, names: ImageNames) {
        self.ops.push(BatchOp::SetNames { key, names });
    }

    /// Writes names in increasing key order, each with the [`BatchOp::Sight`] of its key when
    /// the batch has one (see [`SightedNames`]).
    pub fn names_in_key_order(&mut self) -> SightedNames<'_> {
        SightedNames {
            batch: self,
            next: 0,
            entry: 0,
        }
    }

    /// Adds a [`BatchOp::Remove`].
    pub fn remove(&mut self, key: RecordKey) {
        self.ops.push(BatchOp::Remove { key });
    }

    /// Adds a [`BatchOp::PutBackoff`].
    pub fn put_backoff(&mut self, key: String, entry: BackoffEntry) {
        self.ops.push(BatchOp::PutBackoff { key, entry });
    }

    /// Adds a [`BatchOp::RemoveBackoff`].
    pub fn remove_backoff(&mut self, key: String) {
        self.ops.push(BatchOp::RemoveBackoff { key });
    }

    /// Adds a [`BatchOp::SetMeta`].
    pub fn set_meta(&mut self, name: impl Into<String>, value: i64) {
        self.ops.push(BatchOp::SetMeta {
            name: name.into(),
            value,
        });
    }

    /// Adds a [`BatchOp::PutPin`].
    pub fn put_pin(&mut self, key: PinKey, pin: ImagePin) {
        self.ops.push(BatchOp::PutPin { key, pin });
    }

    /// Adds a [`BatchOp::RemovePin`].
    pub fn remove_pin(&mut self, key: PinKey) {
        self.ops.push(BatchOp::RemovePin { key });
    }

    /// Adds a [`BatchOp::PruneExpiredPins`].
    pub fn prune_expired_pins(&mut self, now: UnixNanos) {
        self.ops.push(BatchOp::PruneExpiredPins { now });
    }

    /// Adds a [`BatchOp::ObserveUses`].
    pub fn observe_uses(&mut self, now: UnixNanos, in_use: Vec<RecordKey>) {
        self.ops.push(BatchOp::ObserveUses { now, in_use });
    }

    /// Adds a [`BatchOp::OpenUse`].
    pub fn open_use(&mut self, key: RecordKey, now: UnixNanos) {
        self.ops.push(BatchOp::OpenUse { key, now });
    }

    /// Adds a [`BatchOp::RecordPull`].
    pub fn record_pull(&mut self, key: PullKey, entry: PullEntry) {
        self.ops.push(BatchOp::RecordPull { key, entry });
    }

    /// Adds a [`BatchOp::ReplaceWarm`].
    pub fn replace_warm(&mut self, rows: Vec<WarmRow>) {
        self.ops.push(BatchOp::ReplaceWarm { rows });
    }

    /// Adds a [`BatchOp::PutRuntimeLabel`].
    pub fn put_runtime_label(&mut self, name: String, label: RuntimeLabel) {
        self.ops.push(BatchOp::PutRuntimeLabel { name, label });
    }

    /// Adds a [`BatchOp::RemoveRuntimeLabel`].
    pub fn remove_runtime_label(&mut self, name: String) {
        self.ops.push(BatchOp::RemoveRuntimeLabel { name });
    }

    /// Writes `name = value` only if the rest of the batch changes something.
    pub fn stamp_if_changed(&mut self, name: impl Into<String>, value: i64) {
        self.stamps.push((name.into(), value));
    }
}

impl PartialEq for Batch {
    fn eq(&self, other: &Batch) -> bool {
        self.stamps == other.stamps
            && self.notes == other.notes
            && self.expanded_ops() == other.expanded_ops()
    }
}

impl Eq for Batch {}

/// Names handed in increasing key order (as detect's names walk hands them): the names of a
/// key the batch sights go into that [`BatchOp::Sight`], any other's into a
/// [`BatchOp::SetNames`] at the batch's end. A cursor walks the batch's leading run of
/// sightings and clamps (a detect's, in key order) once, whatever the number of names.
///
/// The same as a `SetNames` of each at the end provided no operation after a key's sighting
/// touches that key's record or names: true of a detect's batch, whose other operations are
/// removals of keys it does not list, pins, uses and meta values.
pub struct SightedNames<'a> {
    batch: &'a mut Batch,
    /// The first operation not yet passed.
    next: usize,
    /// In a [`BatchOp::Sightings`] at `next`, its first entry not yet passed.
    entry: usize,
}

impl SightedNames<'_> {
    /// Sets `key`'s names (if the record exists and they differ, as
    /// [`BatchOp::SetNames`]).
    pub fn set(&mut self, key: RecordKey, names: ImageNames) {
        while let Some(op) = self.batch.ops.get_mut(self.next) {
            match op {
                BatchOp::Sightings(sightings) => {
                    match sightings.name(&mut self.entry, &key, &names) {
                        sightings::Named::Taken => return,
                        sightings::Named::Passed => {
                            self.next += 1;
                            self.entry = 0;
                        }
                        sightings::Named::Stopped => break,
                    }
                }
                BatchOp::Sight {
                    key: sighted,
                    names: slot @ None,
                    ..
                } if *sighted == key => {
                    *slot = Some(names);
                    self.next += 1;
                    return;
                }
                BatchOp::Sight { key: passed, .. } | BatchOp::ClampFuture { key: passed, .. }
                    if *passed <= key =>
                {
                    self.next += 1;
                }
                _ => break,
            }
        }
        self.batch.set_names(key, names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of a [`BatchOp`]: a `Sight` (a record key, the sighting and the names; the
    /// tag fits in a niche).
    const BATCH_OP_BYTES: usize = 128;

    /// Issue 29: a sighting carries its image's names, and no operation is larger than
    /// that (a rare operation larger than a detect's common one would set the size of a
    /// detect's 100k).
    #[test]
    fn an_op_is_no_larger_than_a_sighting_with_its_names() {
        assert_eq!(std::mem::size_of::<BatchOp>(), BATCH_OP_BYTES);
        let sight = std::mem::size_of::<RecordKey>()
            + std::mem::size_of::<Sighting>()
            + std::mem::size_of::<ImageNames>();
        assert!(BATCH_OP_BYTES <= sight + 8, "{sight}");
    }

    /// Issue 40: a detect's sighting costs [`sightings::ENTRY_BYTES`] in the batch (a
    /// position in the runtime's list, not a `Sight` of 128 bytes with an owned key and
    /// names): at 100k new images the first detect's batch was the replay's peak, so an entry
    /// must not silently grow.
    #[test]
    fn a_listed_sighting_is_no_larger_than_its_sighting_and_a_position() {
        assert!(
            std::mem::size_of::<sightings::Entry>() <= sightings::ENTRY_BYTES,
            "{}",
            std::mem::size_of::<sightings::Entry>()
        );
        assert!(sightings::ENTRY_BYTES <= std::mem::size_of::<Sighting>() + 8);
    }

    fn names(tag: &str) -> ImageNames {
        ImageNames {
            repo_tags: vec![tag.to_owned()],
            repo_digests: Vec::new(),
        }
    }

    fn sighting() -> Sighting {
        Sighting {
            now: UnixNanos(5),
            in_use: false,
            size: 1,
            pinned: false,
            used_at: UnixNanos::NEVER,
        }
    }

    /// Issue 29: a first detect held a `Sight` and a `SetNames` (each with its own copy of
    /// the key) per image. Names in key order go into the sightings of their keys; a key
    /// not sighted, or handed out of order, gets a `SetNames` at the end.
    #[test]
    fn names_in_key_order_ride_on_their_sightings() {
        let key = |id: &str| RecordKey::new(id, "");
        let mut batch = Batch::new();
        batch.sight(key("a"), sighting());
        batch.clamp_future(key("c"), UnixNanos(9), UnixNanos(5));
        batch.sight(key("c"), sighting());
        batch.sight(key("e"), sighting());
        batch.remove_unlisted_journaled(key("f"), UnixNanos(1), UnixNanos(5));
        let mut writer = batch.names_in_key_order();
        writer.set(key("a"), names("a:1"));
        writer.set(key("b"), names("b:1"));
        writer.set(key("c"), names("c:1"));
        writer.set(key("e"), names("e:1"));
        // Out of order: the cursor is past "a", so it is written at the end.
        writer.set(key("a"), names("a:2"));
        let with = |id: &str, tag: Option<&str>| BatchOp::Sight {
            key: key(id),
            sighting: sighting(),
            names: tag.map(names),
        };
        assert_eq!(
            batch.ops(),
            &[
                with("a", Some("a:1")),
                BatchOp::ClampFuture {
                    key: key("c"),
                    limit: UnixNanos(9),
                    now: UnixNanos(5)
                },
                with("c", Some("c:1")),
                with("e", Some("e:1")),
                BatchOp::RemoveUnlisted {
                    key: key("f"),
                    seen_last_used: UnixNanos(1),
                    journal_at: Some(UnixNanos(5)),
                    note: None
                },
                BatchOp::SetNames {
                    key: key("b"),
                    names: names("b:1")
                },
                BatchOp::SetNames {
                    key: key("a"),
                    names: names("a:2")
                },
            ]
        );
    }
}
