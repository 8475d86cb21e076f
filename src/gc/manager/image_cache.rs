//! The image cache: kubelet's `imageCache` behind GetImageList (pkg/kubelet/images/
//! image_gc_manager.go: a ListImages every 30 s, sorted by size descending, ties by id
//! descending, `sliceutils.ByImageSize`).
//!
//! The cache keeps the list as the runtime's answer gave it ([`ImageList`]: for the CRI
//! client, the response's bytes and the spans into them, no owned copy) with the
//! GetImageList order as indexes into it, and the count and total size the metrics report.
//! Owned images are made only when a reader asks for them ([`ImageCache::images`]); a refresh
//! that nobody reads costs the decode and a sort of indexes, not a copy of every name.
//!
//! Invariants: `order` holds each index of `list` once; `total_size` is the saturating sum
//! of the listed sizes, duplicates included (what the images themselves would sum to).

use crate::model::{ImageLike, ImageList, RuntimeImage, saturating_total};

/// The runtime's image list as the last refresh got it, in GetImageList order.
#[derive(Debug, Default)]
pub(crate) struct ImageCache {
    list: ImageList,
    order: Vec<u32>,
    total_size: u64,
}

impl ImageCache {
    /// The cache of `list`: sorted by size descending, ties by id descending, then by list
    /// position (a deterministic order for an image listed twice).
    pub(crate) fn new(list: ImageList) -> ImageCache {
        let mut keyed: Vec<(u64, &str, u32)> = list
            .iter()
            .zip(0u32..)
            .map(|(image, index)| (image.size(), image.id_str(), index))
            .collect();
        keyed.sort_unstable_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| b.1.cmp(a.1))
                .then_with(|| a.2.cmp(&b.2))
        });
        let total_size = saturating_total(keyed.iter().map(|(size, _, _)| *size));
        let order = keyed.into_iter().map(|(_, _, index)| index).collect();
        ImageCache {
            list,
            order,
            total_size,
        }
    }

    /// How many images the runtime listed.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// The listed images' total size (saturating).
    pub(crate) fn total_size(&self) -> u64 {
        self.total_size
    }

    /// The images as owned values, in GetImageList order.
    pub(crate) fn images(&self) -> Vec<RuntimeImage> {
        self.order
            .iter()
            .filter_map(|&index| self.list.get(index as usize))
            .map(|image| image.to_image())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn image(id: &str, size: u64, handler: &str) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            repo_tags: vec![format!("{id}:tag")],
            repo_digests: Vec::new(),
            size,
            pinned: false,
            runtime_handler: handler.to_owned(),
        }
    }

    #[test]
    fn the_cache_lists_by_size_descending_then_id_descending_like_get_image_list() {
        let listed = vec![
            image("sha256:b", 10, ""),
            image("sha256:a", 30, ""),
            image("sha256:c", 10, ""),
            image("sha256:d", 20, ""),
            image("sha256:c", 10, "kata"),
        ];
        let cache = ImageCache::new(ImageList::from(listed.clone()));
        let order: Vec<(String, String)> = cache
            .images()
            .into_iter()
            .map(|i| (i.id.as_str().to_owned(), i.runtime_handler))
            .collect();
        let want = [
            ("sha256:a", ""),
            ("sha256:d", ""),
            ("sha256:c", ""),
            ("sha256:c", "kata"),
            ("sha256:b", ""),
        ]
        .map(|(id, handler)| (id.to_owned(), handler.to_owned()));
        assert_eq!(order, want);
        assert_eq!(cache.len(), 5);
        assert_eq!(cache.total_size(), 80);
        assert_eq!(
            cache.images()[0],
            listed[1],
            "the images are the listed ones, whole"
        );
    }

    #[test]
    fn the_total_size_saturates_and_an_empty_cache_is_empty() {
        let cache = ImageCache::new(ImageList::from(vec![
            image("sha256:a", u64::MAX, ""),
            image("sha256:b", 1, ""),
        ]));
        assert_eq!(cache.total_size(), u64::MAX);
        let empty = ImageCache::default();
        assert_eq!((empty.len(), empty.total_size()), (0, 0));
        assert!(empty.images().is_empty());
    }
}
