//! A detect's sightings held compactly ([`ListedSightings`], one [`super::BatchOp::Sightings`]):
//! the runtime's list the detect read (shared, not copied) and, per sighted image, its position
//! in that list, the sighting and two flags (a clamp of the clock before it, its names after
//! it). The key and the names are read from the listed image when the batch is applied, so a
//! first detect of n images holds n entries of [`ENTRY_BYTES`] and no key or name of its own
//! (issue 40: a `Sight` op of 128 bytes, an owned key and owned names per new image were
//! 28 MB of the 100k replay's peak).
//!
//! Invariants: every entry's position is inside the list (checked when pushed); an entry
//! stands for exactly the operations [`ListedSightings::expanded`] gives, in order (a
//! [`super::BatchOp::ClampFuture`] of its key at `clamp_limit` and the sighting's `now` when
//! flagged, then a [`super::BatchOp::Sight`] with the image's names when flagged), and the
//! store applies it as those.

use crate::model::{ImageLike, ImageList, ImageNames, ImageRef, RecordKey, Sighting, UnixNanos};

use super::BatchOp;

/// The bytes of one entry: a sighting (32) and a position with its flags. A test holds it: it
/// is the first detect's cost per image.
#[cfg(test)]
pub(crate) const ENTRY_BYTES: usize = 40;

/// Sightings of images of one runtime list, in the order they were added.
#[derive(Clone, Debug)]
pub struct ListedSightings {
    images: ImageList,
    /// The limit of the flagged clamps (one per detect: `now` + the tolerance).
    clamp_limit: Option<UnixNanos>,
    entries: Vec<Entry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    sighting: Sighting,
    position: u32,
    /// A [`BatchOp::ClampFuture`] of the key before the sighting.
    clamp: bool,
    /// The sighting carries the listed image's names.
    names: bool,
}

/// What [`ListedSightings::name`] did with a key's names.
pub(super) enum Named {
    /// The entry of the key took them.
    Taken,
    /// Every entry is at or before the key: the walk goes on past this operation.
    Passed,
    /// An entry after the key (or one whose image lists other names): the names go elsewhere.
    Stopped,
}

impl ListedSightings {
    pub(super) fn new(images: ImageList) -> ListedSightings {
        ListedSightings {
            images,
            clamp_limit: None,
            entries: Vec::new(),
        }
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        self.entries.reserve_exact(additional);
    }

    /// Whether a sighting of `images` clamped at `clamp` (if any) can be added here.
    pub(super) fn accepts(&self, images: &ImageList, clamp: Option<UnixNanos>) -> bool {
        self.images.same_as(images)
            && (clamp.is_none() || self.clamp_limit.is_none() || self.clamp_limit == clamp)
    }

    /// Adds the sighting of the image at `position`, after a clamp at `clamp` if given. Returns
    /// false (adding nothing) for a position outside the list.
    pub(super) fn push(
        &mut self,
        position: usize,
        clamp: Option<UnixNanos>,
        sighting: Sighting,
    ) -> bool {
        let Some(position) = u32::try_from(position)
            .ok()
            .filter(|&p| (p as usize) < self.images.len())
        else {
            return false;
        };
        if clamp.is_some() {
            self.clamp_limit = clamp;
        }
        self.entries.push(Entry {
            sighting,
            position,
            clamp: clamp.is_some(),
            names: false,
        });
        true
    }

    fn image(&self, entry: &Entry) -> ImageRef<'_> {
        self.images
            .get(entry.position as usize)
            .expect("an entry's position is inside its list (checked when pushed)")
    }

    /// Each entry as its image, whether it is clamped first, at what limit, the sighting, and
    /// whether the sighting carries the image's names.
    pub(crate) fn iter(
        &self,
    ) -> impl Iterator<Item = (ImageRef<'_>, Option<UnixNanos>, Sighting, bool)> + '_ {
        self.entries.iter().map(|entry| {
            let clamp = self.clamp_limit.filter(|_| entry.clamp);
            (self.image(entry), clamp, entry.sighting, entry.names)
        })
    }

    /// The operations the entries stand for, with owned keys and names (the dry run's, the
    /// tests' and the simulator's view; the store applies the entries without them).
    pub fn expanded(&self) -> Vec<BatchOp> {
        let mut ops = Vec::with_capacity(self.entries.len());
        for (image, clamp, sighting, names) in self.iter() {
            let key = image.record_key();
            if let Some(limit) = clamp {
                ops.push(BatchOp::ClampFuture {
                    key: key.clone(),
                    limit,
                    now: sighting.now,
                });
            }
            ops.push(BatchOp::Sight {
                key,
                sighting,
                names: names.then(|| ImageNames::of(&image)),
            });
        }
        ops
    }

    /// Gives `names` to the entry of `key` from `*next` on (entries in key order, as a
    /// detect adds them), moving `*next` past the entries at or before `key`: the entry of
    /// `key` takes them when it carries none yet and its image lists exactly those names.
    pub(super) fn name(&mut self, next: &mut usize, key: &RecordKey, names: &ImageNames) -> Named {
        let want = (key.image_id.as_str(), key.runtime_handler.as_str());
        while let Some(entry) = self.entries.get(*next) {
            let image = self.image(entry);
            match (image.id_str(), image.handler_str()).cmp(&want) {
                std::cmp::Ordering::Less => *next += 1,
                std::cmp::Ordering::Equal if !entry.names => {
                    let same = image
                        .repo_tags()
                        .eq(names.repo_tags.iter().map(String::as_str))
                        && image
                            .repo_digests()
                            .eq(names.repo_digests.iter().map(String::as_str));
                    if !same {
                        return Named::Stopped;
                    }
                    if let Some(entry) = self.entries.get_mut(*next) {
                        entry.names = true;
                    }
                    *next += 1;
                    return Named::Taken;
                }
                std::cmp::Ordering::Equal => *next += 1,
                std::cmp::Ordering::Greater => return Named::Stopped,
            }
        }
        Named::Passed
    }
}

/// The same operations, whether or not the lists are shared.
impl PartialEq for ListedSightings {
    fn eq(&self, other: &ListedSightings) -> bool {
        self.expanded() == other.expanded()
    }
}

impl Eq for ListedSightings {}
