//! Whether a name names an image the way a runtime resolves names ([`image_matches`]), and
//! [`MatchIndex`]: the same answers for many names or images at one parse per name.
//!
//! Invariants: a [`MatchIndex`] answers exactly what [`image_matches`] with an equal runtime
//! handler answers, pair by pair (tested in `tests.rs`); a short name errs on the side of
//! matching, since these answers protect images.

use super::{DEFAULT_DOMAIN, DEFAULT_TAG, ImageReference, OFFICIAL_REPO_PREFIX};

#[cfg(test)]
thread_local! {
    /// How many names [`Resolution::of`] parsed on this thread: the warm tests bound it, so a
    /// cost that grows with entries x images (a parse per pair) fails them.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How a runtime may resolve one reference: its normalized repository (`domain/path`), the
/// repository as written when no registry was named (`pause` for `pause:3.9`, `library/`
/// dropped), and its tag (the default tag when neither tag nor digest is given) or digest.
struct Resolution {
    name: String,
    short_path: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
}

impl Resolution {
    fn of(reference: &str) -> Option<Resolution> {
        #[cfg(test)]
        PARSES.with(|n| n.set(n.get() + 1));
        let r = ImageReference::parse_normalized(reference).ok()?;
        let named_registry = r.domain() != DEFAULT_DOMAIN
            || reference.starts_with("docker.io/")
            || reference.starts_with("index.docker.io/");
        let short_path = (!named_registry).then(|| {
            r.path()
                .strip_prefix(OFFICIAL_REPO_PREFIX)
                .unwrap_or(r.path())
                .to_owned()
        });
        let tag = match (r.tag(), r.digest()) {
            (Some(t), _) => Some(t.to_owned()),
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (None, Some(_)) => None,
        };
        Some(Resolution {
            name: r.name(),
            short_path,
            tag,
            digest: r.digest().map(str::to_owned),
        })
    }

    /// The path without its registry, `library/` dropped on Docker Hub.
    fn path_without_registry(&self) -> &str {
        let path = self.name.split_once('/').map_or("", |(_, p)| p);
        if self.name.starts_with("docker.io/") {
            path.strip_prefix(OFFICIAL_REPO_PREFIX).unwrap_or(path)
        } else {
            path
        }
    }

    /// Whether `listed` (a repo tag or digest the runtime lists) is what `self` resolves to:
    /// the same repository, or, for a short name, the same path on any registry (a runtime
    /// with unqualified-search registries, such as CRI-O, resolves `pause:3.9` to
    /// `registry.k8s.io/pause:3.9`); then the same digest if one was given, else the same tag.
    fn resolves_to(&self, listed: &Resolution) -> bool {
        let same_repository = self.name == listed.name
            || self
                .short_path
                .as_deref()
                .is_some_and(|p| p == listed.path_without_registry());
        same_repository
            && match &self.digest {
                Some(d) => listed.digest.as_ref() == Some(d),
                None => listed.digest.is_none() && listed.tag == self.tag,
            }
    }
}

/// Whether `name` names `image` the way a runtime resolves names: the image id itself, or a
/// reference that resolves to one of its repo tags or, when it carries a digest, to one of its
/// repo digests (the digest decides when both are given). Used where a name protects an image
/// (the sandbox image, pulls in flight), so a short name errs on the side of matching.
pub fn image_matches(name: &str, image: &impl crate::model::ImageLike) -> bool {
    if name.is_empty() {
        return false;
    }
    if name == image.id() {
        return true;
    }
    let Some(wanted) = Resolution::of(name) else {
        return false;
    };
    let listed = if wanted.digest.is_some() {
        image.repo_digests()
    } else {
        image.repo_tags()
    };
    listed
        .filter_map(Resolution::of)
        .any(|l| wanted.resolves_to(&l))
}

/// The tag or digest a [`MatchKey`] holds: a tag meets only a listed repo tag, a digest only
/// a listed repo digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchPin {
    /// A tag.
    Tag(String),
    /// A digest.
    Digest(String),
}

/// One way a name and an image meet in [`image_matches`]: the image id as written, the
/// normalized repository with its tag or digest, or, for a short name, the path without its
/// registry with its tag or digest. [`wanted_keys`] gives a name's keys and [`listed_keys`] an
/// image's; `image_matches(name, image)` holds exactly when they share one (tested below), so
/// a [`MatchIndex`] of either side finds the other's matches with one lookup per key instead
/// of a parse per pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchKey {
    /// The image id as written.
    Id(String),
    /// The normalized repository with its tag or digest.
    Repository {
        /// The normalized repository name.
        name: String,
        /// Its tag or digest.
        pin: MatchPin,
    },
    /// A short name's path without its registry, with its tag or digest.
    Path {
        /// The path without its registry.
        path: String,
        /// Its tag or digest.
        pin: MatchPin,
    },
}

/// The keys of a wanted name (see [`MatchKey`]): none for an empty name, its id form, and, when
/// it parses, its repository (and its path, for a short name) with its digest, else its tag
/// (`latest` when it has neither).
pub fn wanted_keys(name: &str) -> Vec<MatchKey> {
    if name.is_empty() {
        return Vec::new();
    }
    let mut keys = vec![MatchKey::Id(name.to_owned())];
    let Some(wanted) = Resolution::of(name) else {
        return keys;
    };
    let pin = match (wanted.digest, wanted.tag) {
        (Some(digest), _) => MatchPin::Digest(digest),
        (None, Some(tag)) => MatchPin::Tag(tag),
        (None, None) => return keys,
    };
    if let Some(path) = wanted.short_path {
        keys.push(MatchKey::Path {
            path,
            pin: pin.clone(),
        });
    }
    keys.push(MatchKey::Repository {
        name: wanted.name,
        pin,
    });
    keys
}

/// The keys of a listed image (see [`MatchKey`]): its id, and for each repo tag without a
/// digest and each repo digest, its repository and its path without the registry, with that
/// tag or digest.
pub fn listed_keys(image: &impl crate::model::ImageLike) -> Vec<MatchKey> {
    let mut keys = vec![MatchKey::Id(image.id().to_owned())];
    let mut add = |listed: Resolution, pin: MatchPin| {
        keys.push(MatchKey::Path {
            path: listed.path_without_registry().to_owned(),
            pin: pin.clone(),
        });
        keys.push(MatchKey::Repository {
            name: listed.name,
            pin,
        });
    };
    for listed in image.repo_tags().filter_map(Resolution::of) {
        if listed.digest.is_none()
            && let Some(tag) = listed.tag.clone()
        {
            add(listed, MatchPin::Tag(tag));
        }
    }
    for listed in image.repo_digests().filter_map(Resolution::of) {
        if let Some(digest) = listed.digest.clone() {
            add(listed, MatchPin::Digest(digest));
        }
    }
    keys
}

/// Names or images by their [`MatchKey`]s and runtime handler, by position: built of one side
/// ([`MatchIndex::of_names`] or [`MatchIndex::of_images`]) and asked with the other. What it
/// answers is exactly what `image_matches` and an equal handler answer, pair by pair; its cost
/// is one parse per name or image name, never one per pair.
#[derive(Clone, Debug, Default)]
pub struct MatchIndex {
    by_key: std::collections::HashMap<(String, MatchKey), Vec<usize>>,
}

impl MatchIndex {
    fn insert(&mut self, handler: &str, keys: Vec<MatchKey>, at: usize) {
        for key in keys {
            let positions = self.by_key.entry((handler.to_owned(), key)).or_default();
            if positions.last() != Some(&at) {
                positions.push(at);
            }
        }
    }

    fn lookup(&self, handler: &str, keys: Vec<MatchKey>) -> Vec<usize> {
        let mut out: Vec<usize> = keys
            .into_iter()
            .filter_map(|key| self.by_key.get(&(handler.to_owned(), key)))
            .flatten()
            .copied()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// An index of wanted names, each `(name, runtime handler)`, asked with [`Self::naming`].
    pub fn of_names<'a>(names: impl IntoIterator<Item = (&'a str, &'a str)>) -> MatchIndex {
        let mut index = MatchIndex::default();
        for (at, (name, handler)) in names.into_iter().enumerate() {
            index.insert(handler, wanted_keys(name), at);
        }
        index
    }

    /// An index of listed images, asked with [`Self::named_by`].
    pub fn of_images<'a, I: crate::model::ImageLike + 'a>(
        images: impl IntoIterator<Item = &'a I>,
    ) -> MatchIndex {
        let mut index = MatchIndex::default();
        for (at, image) in images.into_iter().enumerate() {
            index.insert(image.runtime_handler(), listed_keys(image), at);
        }
        index
    }

    /// Of an index of names: the positions of the names that name `image`, in order.
    pub fn naming(&self, image: &impl crate::model::ImageLike) -> Vec<usize> {
        // An empty index names nothing: asked without parsing the image's names (a GC with
        // no warm set parses no name).
        if self.by_key.is_empty() {
            return Vec::new();
        }
        self.lookup(image.runtime_handler(), listed_keys(image))
    }

    /// Of an index of images: the positions of the images `name` names under `handler`, in
    /// order.
    pub fn named_by(&self, name: &str, handler: &str) -> Vec<usize> {
        if self.by_key.is_empty() {
            return Vec::new();
        }
        self.lookup(handler, wanted_keys(name))
    }
}
