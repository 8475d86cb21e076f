//! The runtime's image list as detect holds it ([`ImageList`]), and [`ImageLike`]: what the
//! rules read of an image, whether a [`RuntimeImage`] or an entry of such a list.
//!
//! A list decoded from the CRI's `ListImagesResponse` (`cri::list_decode`) keeps the
//! response's own bytes and, per image, where its id, runtime handler and names lie in them:
//! at 100k images that is the response (about 128 bytes an image) plus about 50 bytes of
//! index, where a `Vec<RuntimeImage>` is about 250 bytes an image beside the response it was
//! decoded from. Any other list (a test's, the replay's, the simulator's) is held as the
//! images it was given.
//!
//! Invariants: every span of a wire list lies inside its bytes and is valid UTF-8, checked
//! once when the image is pushed ([`WireImagesBuilder::push`]); reading a name is then a
//! slice, never a copy or a second check. A list reads back exactly the images it was built
//! from, in the same order, duplicates included ([`ImageList::to_images`]).

use std::sync::Arc;

use bytes::Bytes;

use crate::model::{ImageId, RecordKey, RuntimeImage};

/// What the GC's rules read of an image: the CRI `Image` fields imagekeeper keeps.
pub trait ImageLike {
    /// The image id.
    fn id(&self) -> &str;
    /// The runtime handler the image was pulled for; empty for the default.
    fn runtime_handler(&self) -> &str;
    /// CRI `repo_tags`.
    fn repo_tags(&self) -> Names<'_>;
    /// CRI `repo_digests`.
    fn repo_digests(&self) -> Names<'_>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Whether the runtime pins it.
    fn pinned(&self) -> bool;

    /// The image's record key.
    fn record_key(&self) -> RecordKey {
        RecordKey::new(self.id(), self.runtime_handler())
    }

    /// The image as an owned [`RuntimeImage`].
    fn to_image(&self) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(self.id()),
            repo_tags: self.repo_tags().to_strings(),
            repo_digests: self.repo_digests().to_strings(),
            size: self.size(),
            pinned: self.pinned(),
            runtime_handler: self.runtime_handler().to_string(),
        }
    }
}

impl ImageLike for RuntimeImage {
    fn id(&self) -> &str {
        self.id.as_str()
    }
    fn runtime_handler(&self) -> &str {
        &self.runtime_handler
    }
    fn repo_tags(&self) -> Names<'_> {
        Names::of(&self.repo_tags)
    }
    fn repo_digests(&self) -> Names<'_> {
        Names::of(&self.repo_digests)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn pinned(&self) -> bool {
        self.pinned
    }
    fn record_key(&self) -> RecordKey {
        RuntimeImage::record_key(self)
    }
    fn to_image(&self) -> RuntimeImage {
        self.clone()
    }
}

impl<T: ImageLike + ?Sized> ImageLike for &T {
    fn id(&self) -> &str {
        (**self).id()
    }
    fn runtime_handler(&self) -> &str {
        (**self).runtime_handler()
    }
    fn repo_tags(&self) -> Names<'_> {
        (**self).repo_tags()
    }
    fn repo_digests(&self) -> Names<'_> {
        (**self).repo_digests()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn pinned(&self) -> bool {
        (**self).pinned()
    }
    fn record_key(&self) -> RecordKey {
        (**self).record_key()
    }
    fn to_image(&self) -> RuntimeImage {
        (**self).to_image()
    }
}

/// An image's repo tags or repo digests, in list order.
#[derive(Clone, Debug)]
pub struct Names<'a>(NamesInner<'a>);

#[derive(Clone, Debug)]
enum NamesInner<'a> {
    Strings(std::slice::Iter<'a, String>),
    Spans {
        text: &'a [u8],
        spans: std::slice::Iter<'a, Span>,
    },
}

impl<'a> Names<'a> {
    /// The names of a list of strings.
    pub fn of(strings: &'a [String]) -> Names<'a> {
        Names(NamesInner::Strings(strings.iter()))
    }

    /// The names as owned strings, in a vector of exactly their number (`collect` would
    /// start a vector of an unknown length at four).
    pub fn to_strings(self) -> Vec<String> {
        let mut strings = Vec::with_capacity(self.len());
        strings.extend(self.map(str::to_string));
        strings
    }
}

impl<'a> Iterator for Names<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match &mut self.0 {
            NamesInner::Strings(strings) => strings.next().map(String::as_str),
            NamesInner::Spans { text, spans } => spans.next().map(|span| span.read(text)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            NamesInner::Strings(strings) => strings.len(),
            NamesInner::Spans { spans, .. } => spans.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Names<'_> {}

/// Where a string lies in a wire list's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The span's text. Every span a [`WireImages`] holds was checked to lie in its bytes and
    /// to be UTF-8 when it was pushed; a span read against other bytes reads as "".
    fn read(self, text: &[u8]) -> &str {
        let start = self.start as usize;
        text.get(start..start + self.len as usize)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .unwrap_or("")
    }

    fn bytes(self, text: &[u8]) -> &[u8] {
        let start = self.start as usize;
        text.get(start..start + self.len as usize).unwrap_or(&[])
    }
}

/// One image of a wire list: its fields' spans and values.
#[derive(Clone, Copy, Debug)]
struct WireImage {
    id: Span,
    handler: Span,
    /// Its names in `WireImages::names`: `tags` tags from `names_at`, then `digests` digests.
    names_at: u32,
    tags: u32,
    digests: u32,
    size: u64,
    pinned: bool,
}

/// A list decoded from the CRI's bytes: the bytes and, per image, its spans.
#[derive(Clone, Debug, Default)]
struct WireImages {
    text: Bytes,
    images: Vec<WireImage>,
    names: Vec<Span>,
}

/// Why a span cannot be pushed.
// Only the CRI client (feature `cri`) builds wire lists.
#[cfg_attr(not(feature = "cri"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanError {
    /// It does not lie inside the list's bytes (or past 4 GiB).
    OutOfBounds,
    /// Its bytes are not UTF-8.
    NotUtf8,
}

/// The fields of one image as spans into the bytes, for [`WireImagesBuilder::push`].
#[cfg_attr(not(feature = "cri"), allow(dead_code))]
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageSpans<'a> {
    pub id: (usize, usize),
    pub handler: (usize, usize),
    pub tags: &'a [(usize, usize)],
    pub digests: &'a [(usize, usize)],
    pub size: u64,
    pub pinned: bool,
}

/// Builds a wire list over bytes, one image at a time.
#[cfg_attr(not(feature = "cri"), allow(dead_code))]
#[derive(Debug)]
pub struct WireImagesBuilder {
    list: WireImages,
}

#[cfg_attr(not(feature = "cri"), allow(dead_code))]
impl WireImagesBuilder {
    /// A builder over `text` with room for `images` images.
    pub fn new(text: Bytes, images: usize) -> WireImagesBuilder {
        WireImagesBuilder {
            list: WireImages {
                text,
                images: Vec::with_capacity(images),
                names: Vec::new(),
            },
        }
    }

    fn span(&self, (start, len): (usize, usize)) -> Result<Span, SpanError> {
        let bytes = start
            .checked_add(len)
            .and_then(|end| self.list.text.get(start..end))
            .ok_or(SpanError::OutOfBounds)?;
        std::str::from_utf8(bytes).map_err(|_| SpanError::NotUtf8)?;
        Ok(Span {
            start: u32::try_from(start).map_err(|_| SpanError::OutOfBounds)?,
            len: u32::try_from(len).map_err(|_| SpanError::OutOfBounds)?,
        })
    }

    /// Appends one image, each span (`(start, len)` in the bytes) checked to lie in the bytes
    /// and to be UTF-8. On an error nothing is appended.
    pub fn push(&mut self, image: ImageSpans<'_>) -> Result<(), SpanError> {
        let id = self.span(image.id)?;
        let handler = self.span(image.handler)?;
        let names_at = self.list.names.len();
        let names: Result<Vec<Span>, SpanError> = image
            .tags
            .iter()
            .chain(image.digests)
            .map(|&span| self.span(span))
            .collect();
        let count = |n: usize| u32::try_from(n).map_err(|_| SpanError::OutOfBounds);
        let entry = WireImage {
            id,
            handler,
            names_at: count(names_at)?,
            tags: count(image.tags.len())?,
            digests: count(image.digests.len())?,
            size: image.size,
            pinned: image.pinned,
        };
        self.list.names.extend(names?);
        self.list.images.push(entry);
        Ok(())
    }

    pub fn finish(mut self) -> ImageList {
        self.list.images.shrink_to_fit();
        self.list.names.shrink_to_fit();
        ImageList {
            repr: Repr::Wire(Arc::new(self.list)),
        }
    }
}

/// A runtime's image list, in the order the runtime listed it, duplicates included: either
/// the images themselves or a decoded CRI response (see the module).
#[derive(Clone, Debug)]
pub struct ImageList {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// Shared with whoever handed the list out (a scripted runtime keeps one copy).
    Owned(Arc<Vec<RuntimeImage>>),
    /// Shared too: a clone (a detect's batch holds the list its sightings point into) is a
    /// count, not a copy of the spans.
    #[cfg_attr(not(feature = "cri"), allow(dead_code))]
    Wire(Arc<WireImages>),
}

impl Default for ImageList {
    fn default() -> ImageList {
        ImageList::from(Vec::new())
    }
}

impl From<Vec<RuntimeImage>> for ImageList {
    fn from(images: Vec<RuntimeImage>) -> ImageList {
        ImageList::from(Arc::new(images))
    }
}

/// A list over images shared with their holder, without a copy.
impl From<Arc<Vec<RuntimeImage>>> for ImageList {
    fn from(images: Arc<Vec<RuntimeImage>>) -> ImageList {
        ImageList {
            repr: Repr::Owned(images),
        }
    }
}

impl ImageList {
    /// How many images the list holds.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned(images) => images.len(),
            Repr::Wire(list) => list.images.len(),
        }
    }

    /// Whether the list holds no image.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `other` is a clone of this list (the same images, shared).
    pub fn same_as(&self, other: &ImageList) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Owned(a), Repr::Owned(b)) => Arc::ptr_eq(a, b),
            (Repr::Wire(a), Repr::Wire(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The image at `index` in list order.
    pub fn get(&self, index: usize) -> Option<ImageRef<'_>> {
        match &self.repr {
            Repr::Owned(images) => images.get(index).map(ImageRef::from),
            Repr::Wire(list) => list.images.get(index).map(|image| {
                ImageRef(RefInner::Wire {
                    text: &list.text,
                    names: &list.names,
                    image,
                })
            }),
        }
    }

    /// Asks the CPU to start loading the entry of the image at `index` (an owned image's
    /// fields, a wire image's spans) into its cache, without waiting for it. A walk that visits
    /// the list out of its order (detect's, in key order) calls this some entries ahead and
    /// [`ImageList::prefetch_id`] nearer, so the misses overlap instead of following each other.
    /// Only a hint: what the list reads is unchanged, and an index past the end does nothing.
    pub(crate) fn prefetch_entry(&self, index: usize) {
        match &self.repr {
            Repr::Owned(images) => {
                if let Some(image) = images.get(index) {
                    prefetch(std::ptr::from_ref(image).cast());
                }
            }
            Repr::Wire(list) => {
                if let Some(image) = list.images.get(index) {
                    prefetch(std::ptr::from_ref(image).cast());
                }
            }
        }
    }

    /// Asks the CPU to start loading the id of the image at `index`, its first and its last
    /// byte's cache lines (a `sha256:` id is 71 bytes; see [`ImageList::prefetch_entry`]).
    pub(crate) fn prefetch_id(&self, index: usize) {
        let id = match &self.repr {
            Repr::Owned(images) => images.get(index).map(|image| image.id.as_str()),
            Repr::Wire(list) => list
                .images
                .get(index)
                .map(|image| image.id.read(&list.text)),
        };
        if let Some(id) = id.map(str::as_bytes) {
            prefetch(id.as_ptr());
            if let Some(last) = id.last() {
                prefetch(std::ptr::from_ref(last));
            }
        }
    }

    /// The images in list order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            next: 0,
        }
    }

    /// The images an owned list shares with whoever handed it out.
    #[cfg(test)]
    pub(crate) fn shared_images(&self) -> Option<&Arc<Vec<RuntimeImage>>> {
        match &self.repr {
            Repr::Owned(images) => Some(images),
            Repr::Wire(_) => None,
        }
    }

    /// The bytes a wire list reads its strings from.
    #[cfg(test)]
    pub(crate) fn wire_text(&self) -> Option<&Bytes> {
        match &self.repr {
            Repr::Owned(_) => None,
            Repr::Wire(list) => Some(&list.text),
        }
    }

    /// The images as owned [`RuntimeImage`]s, in list order.
    pub fn to_images(&self) -> Vec<RuntimeImage> {
        match &self.repr {
            Repr::Owned(images) => images.as_ref().clone(),
            Repr::Wire(_) => self.iter().map(|image| image.to_image()).collect(),
        }
    }

    /// As [`ImageList::to_images`], without a copy for a list held as images.
    pub fn into_images(self) -> Vec<RuntimeImage> {
        match self.repr {
            Repr::Owned(images) => Arc::unwrap_or_clone(images),
            Repr::Wire(_) => self.to_images(),
        }
    }
}

/// The images of an [`ImageList`] in list order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    list: &'a ImageList,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = ImageRef<'a>;

    fn next(&mut self) -> Option<ImageRef<'a>> {
        let image = self.list.get(self.next)?;
        self.next += 1;
        Some(image)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.list.len().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ImageList {
    type Item = ImageRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// One image of an [`ImageList`].
#[derive(Clone, Copy, Debug)]
pub struct ImageRef<'a>(RefInner<'a>);

#[derive(Clone, Copy, Debug)]
enum RefInner<'a> {
    Owned(&'a RuntimeImage),
    Wire {
        text: &'a Bytes,
        names: &'a [Span],
        image: &'a WireImage,
    },
}

impl<'a> From<&'a RuntimeImage> for ImageRef<'a> {
    fn from(image: &'a RuntimeImage) -> ImageRef<'a> {
        ImageRef(RefInner::Owned(image))
    }
}

impl<'a> ImageRef<'a> {
    /// The image's id, for as long as the list lives.
    pub fn id_str(self) -> &'a str {
        match self.0 {
            RefInner::Owned(image) => image.id.as_str(),
            RefInner::Wire { text, image, .. } => image.id.read(text),
        }
    }

    /// The image's runtime handler, for as long as the list lives.
    pub fn handler_str(self) -> &'a str {
        match self.0 {
            RefInner::Owned(image) => &image.runtime_handler,
            RefInner::Wire { text, image, .. } => image.handler.read(text),
        }
    }

    /// The record key's parts as bytes (in the order of [`RecordKey`]'s `Ord`: UTF-8 bytes
    /// compare as the strings do), without the UTF-8 reading.
    pub fn key_bytes(self) -> (&'a [u8], &'a [u8]) {
        match self.0 {
            RefInner::Owned(image) => (
                image.id.as_str().as_bytes(),
                image.runtime_handler.as_bytes(),
            ),
            RefInner::Wire { text, image, .. } => (image.id.bytes(text), image.handler.bytes(text)),
        }
    }

    fn names(self, digests: bool) -> Names<'a> {
        match self.0 {
            RefInner::Owned(image) => Names::of(if digests {
                &image.repo_digests
            } else {
                &image.repo_tags
            }),
            RefInner::Wire { text, names, image } => {
                let at = image.names_at as usize + if digests { image.tags as usize } else { 0 };
                let n = if digests { image.digests } else { image.tags } as usize;
                Names(NamesInner::Spans {
                    text,
                    spans: names.get(at..at + n).unwrap_or(&[]).iter(),
                })
            }
        }
    }

    /// The image's repo tags.
    pub fn tags(self) -> Names<'a> {
        self.names(false)
    }

    /// The image's repo digests.
    pub fn digests(self) -> Names<'a> {
        self.names(true)
    }
}

impl ImageLike for ImageRef<'_> {
    fn id(&self) -> &str {
        self.id_str()
    }
    fn runtime_handler(&self) -> &str {
        self.handler_str()
    }
    fn repo_tags(&self) -> Names<'_> {
        self.tags()
    }
    fn repo_digests(&self) -> Names<'_> {
        self.digests()
    }
    fn size(&self) -> u64 {
        match self.0 {
            RefInner::Owned(image) => image.size,
            RefInner::Wire { image, .. } => image.size,
        }
    }
    fn pinned(&self) -> bool {
        match self.0 {
            RefInner::Owned(image) => image.pinned,
            RefInner::Wire { image, .. } => image.pinned,
        }
    }
}

impl PartialEq<RuntimeImage> for ImageRef<'_> {
    fn eq(&self, other: &RuntimeImage) -> bool {
        self.id() == other.id.as_str()
            && self.runtime_handler() == other.runtime_handler
            && self
                .repo_tags()
                .eq(other.repo_tags.iter().map(String::as_str))
            && self
                .repo_digests()
                .eq(other.repo_digests.iter().map(String::as_str))
            && self.size() == other.size
            && self.pinned() == other.pinned
    }
}

/// A prefetch hint for the cache line holding `at` (x86-64's `prefetcht0`; nothing elsewhere).
/// It never faults and changes no value: only when a later load finds the line.
#[inline]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `prefetcht0` is a hint: it reads nothing the program sees and does not
        // fault on any address; SSE, which it needs, is in every x86-64 CPU.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, tags: &[&str], digests: &[&str], handler: &str) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            repo_tags: tags.iter().map(|t| t.to_string()).collect(),
            repo_digests: digests.iter().map(|d| d.to_string()).collect(),
            size: id.len() as u64,
            pinned: id.ends_with('p'),
            runtime_handler: handler.to_string(),
        }
    }

    /// A wire list over text that holds each image's strings one after the other.
    fn wire(images: &[RuntimeImage]) -> ImageList {
        let mut text = Vec::new();
        let at = |s: &str, text: &mut Vec<u8>| {
            text.extend_from_slice(b"\x0a");
            let span = (text.len(), s.len());
            text.extend_from_slice(s.as_bytes());
            span
        };
        let mut spans = Vec::new();
        for i in images {
            let id = at(i.id.as_str(), &mut text);
            let handler = at(&i.runtime_handler, &mut text);
            let tags: Vec<_> = i.repo_tags.iter().map(|t| at(t, &mut text)).collect();
            let digests: Vec<_> = i.repo_digests.iter().map(|d| at(d, &mut text)).collect();
            spans.push((id, handler, tags, digests, i.size, i.pinned));
        }
        let mut builder = WireImagesBuilder::new(Bytes::from(text), images.len());
        for (id, handler, tags, digests, size, pinned) in &spans {
            builder
                .push(ImageSpans {
                    id: *id,
                    handler: *handler,
                    tags,
                    digests,
                    size: *size,
                    pinned: *pinned,
                })
                .expect("spans inside the text");
        }
        builder.finish()
    }

    #[test]
    fn a_wire_list_reads_back_exactly_the_images_it_was_built_from() {
        let images = vec![
            image("sha256:a", &["r/a:1", "r/a:2"], &["r/a@sha256:1"], ""),
            image("sha256:bp", &[], &[], "kata"),
            image("sha256:a", &[], &["d1", "d2", "d3"], ""),
            image("", &[""], &[], ""),
            image("sha256:é", &["ünï"], &["x"], "rünc"),
        ];
        let list = wire(&images);
        assert_eq!(list.len(), images.len());
        assert_eq!(list.to_images(), images);
        for (got, want) in list.iter().zip(&images) {
            assert!(got == *want, "{got:?} != {want:?}");
            assert_eq!(got.record_key(), want.record_key());
            assert_eq!(got.key_bytes().0, want.id.as_str().as_bytes());
        }
        assert_eq!(ImageList::from(images.clone()).to_images(), images);
        assert_eq!(ImageList::from(images.clone()).into_images(), images);
    }

    /// Owned names come in a vector of exactly their number: 100k images' names copied
    /// with a capacity of four each held the first detect's batch a quarter larger.
    #[test]
    fn names_copied_out_fill_a_vector_of_exactly_their_number() {
        let images = vec![
            image(
                "sha256:a",
                &["r/a:1"],
                &["r/a@sha256:1", "r/a@sha256:2"],
                "",
            ),
            image("sha256:b", &[], &[], ""),
        ];
        for list in [wire(&images), ImageList::from(images.clone())] {
            for (got, want) in list.iter().zip(&images) {
                let names = crate::model::ImageNames::of(&got);
                assert_eq!(names.repo_tags, want.repo_tags);
                assert_eq!(names.repo_tags.capacity(), want.repo_tags.len());
                assert_eq!(names.repo_digests.capacity(), want.repo_digests.len());
                let image = got.to_image();
                assert_eq!(image.repo_tags.capacity(), want.repo_tags.len());
                assert_eq!(image.repo_digests.capacity(), want.repo_digests.len());
            }
        }
    }

    #[test]
    fn a_span_outside_the_bytes_or_not_utf8_is_refused_and_nothing_is_pushed() {
        let mut builder = WireImagesBuilder::new(Bytes::from_static(b"abc\xff"), 1);
        let at = |start, len| ImageSpans {
            id: (start, len),
            ..ImageSpans::default()
        };
        assert_eq!(builder.push(at(2, 5)), Err(SpanError::OutOfBounds));
        assert_eq!(builder.push(at(usize::MAX, 2)), Err(SpanError::OutOfBounds));
        assert_eq!(builder.push(at(2, 2)), Err(SpanError::NotUtf8));
        let tags = [(0, 1), (3, 1)];
        let bad_tag = ImageSpans {
            tags: &tags,
            ..at(0, 3)
        };
        assert_eq!(builder.push(bad_tag), Err(SpanError::NotUtf8));
        builder.push(at(0, 3)).expect("inside and UTF-8");
        let list = builder.finish();
        assert_eq!(list.len(), 1);
        assert_eq!(list.get(0).map(ImageRef::id_str), Some("abc"));
        assert_eq!(list.get(0).map(|i| i.tags().count()), Some(0));
    }
}
