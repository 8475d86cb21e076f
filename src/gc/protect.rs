//! What imagekeeper keeps whatever the GC would do: the operators' pins (schema 4's `pins`
//! table, `imagekeeper pin`) and the images that cannot come back (the runtime's sandbox image,
//! and images with no repo digest: imported or side-loaded, which no registry can give back).
//!
//! Invariants: pins are resolved to record keys at every detect, against the runtime's list as
//! the runtime resolves names (`reference::image_matches`) and under the pin's runtime
//! handler, so a pin by tag follows the tag when it moves; a pin protects while `now < until`
//! by the GC's injected clock (an expired pin protects nothing, whether or not a detect has
//! pruned its row yet). Irreplaceable images are protected only when
//! [`GcConfig::protect_irreplaceable`](super::GcConfig) is on. Protection is by record key:
//! GC, prune and DeleteUnusedImages (the space walk and the MaxAge pass) never remove a
//! protected key, and the last look before each removal reads the pins again. Pins meet
//! images through a `reference::MatchIndex` (each pin and each listed name parsed once, the
//! same answers as `image_matches` pair by pair), so no cost grows with pins times images.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::format::format_rfc3339;
use crate::model::{ImageId, ImageLike, ImagePin, PinKey, RecordKey, RuntimeImage, UnixNanos};
use crate::reference::{MatchIndex, image_matches};
use crate::store::{Store, StoreError};

/// Why imagekeeper keeps an image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum Protection {
    /// An operator's pin (`imagekeeper pin`) names it.
    Pinned {
        /// The pinned name, as given.
        image: String,
        /// When the pin expires; `None`: never.
        until: Option<UnixNanos>,
        /// The operator's reason.
        reason: String,
    },
    /// The runtime's sandbox (pause) image: no pod starts without it, and a private
    /// registry's may not be pullable again.
    SandboxImage {
        /// The sandbox image's name.
        name: String,
    },
    /// No repo digest: imported or side-loaded (`ctr images import`, airgap tarballs); no
    /// registry can give it back.
    NoRepoDigest,
}

impl Protection {
    /// Whether this is an operator's pin (else an irreplaceable image).
    pub fn is_pin(&self) -> bool {
        matches!(self, Protection::Pinned { .. })
    }

    /// For people: "pinned by imagekeeper until T (reason)", "pinned by imagekeeper with no
    /// expiry (reason)", or why the image is irreplaceable.
    pub fn describe(&self) -> String {
        match self {
            Protection::Pinned {
                until,
                reason,
                image,
            } => {
                let when = match until {
                    Some(t) => format!("until {}", format_rfc3339(*t)),
                    None => "with no expiry".to_owned(),
                };
                let why = if reason.is_empty() {
                    format!("as {image}")
                } else {
                    reason.clone()
                };
                format!("pinned by imagekeeper {when} ({why})")
            }
            Protection::SandboxImage { name } => {
                format!("irreplaceable: the runtime's sandbox image ({name})")
            }
            Protection::NoRepoDigest => "irreplaceable: no repo digest (imported or side-loaded; no registry can give it back)".to_owned(),
        }
    }
}

/// What is irreplaceable on this node (with `protect_irreplaceable` on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Irreplaceable {
    /// The sandbox image name: the runtime's answer, else `--pod-infra-container-image`.
    pub sandbox_image: Option<String>,
}

/// The protected record keys of one cycle, each with its reason (a pin before an
/// irreplaceability: the operator's word is the more specific).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protections {
    by_key: BTreeMap<RecordKey, Protection>,
}

impl Protections {
    /// Resolves `pins` (active at `now`) and, with `irreplaceable`, the irreplaceable images
    /// against `images` (the runtime's list, or the names the store last saw).
    pub fn resolve<I: ImageLike>(
        images: impl IntoIterator<Item = I>,
        pins: &[(PinKey, ImagePin)],
        irreplaceable: Option<&Irreplaceable>,
        now: UnixNanos,
    ) -> Protections {
        let active: Vec<&(PinKey, ImagePin)> =
            pins.iter().filter(|(_, p)| p.active_at(now)).collect();
        // Each pin parsed once and each image's names once, met through one index: the first
        // active pin (in the pins' order) naming an image is the one `pin_names` pair by pair
        // finds (issue 53: 10,000 pins beside 10,000 images was a parse per pair).
        let index = MatchIndex::of_names(
            active
                .iter()
                .map(|(k, _)| (k.image.as_str(), k.runtime_handler.as_str())),
        );
        let mut by_key = BTreeMap::new();
        for image in images {
            let pin = index.naming(&image).first().and_then(|&at| active.get(at));
            let protection = if let Some((key, pin)) = pin {
                Some(Protection::Pinned {
                    image: key.image.clone(),
                    until: (pin.until != UnixNanos::NEVER).then_some(pin.until),
                    reason: pin.reason.clone(),
                })
            } else if let Some(rule) = irreplaceable {
                match rule.sandbox_image.as_deref() {
                    Some(name) if image_matches(name, &image) => Some(Protection::SandboxImage {
                        name: name.to_owned(),
                    }),
                    _ if image.repo_digests().next().is_none() => Some(Protection::NoRepoDigest),
                    _ => None,
                }
            } else {
                None
            };
            if let Some(p) = protection {
                by_key.insert(image.record_key(), p);
            }
        }
        Protections { by_key }
    }

    /// What protects `key`, if anything.
    pub fn get(&self, key: &RecordKey) -> Option<&Protection> {
        self.by_key.get(key)
    }

    /// Adds `other`'s protections (resolved over other images; this set's win on a key both
    /// name).
    pub fn extend(&mut self, other: Protections) {
        for (key, p) in other.by_key {
            self.by_key.entry(key).or_insert(p);
        }
    }

    /// Whether something protects `key`.
    pub fn contains(&self, key: &RecordKey) -> bool {
        self.by_key.contains_key(key)
    }

    /// The protected keys.
    pub fn keys(&self) -> impl Iterator<Item = &RecordKey> {
        self.by_key.keys()
    }

    /// Each protected key with what protects it.
    pub fn iter(&self) -> impl Iterator<Item = (&RecordKey, &Protection)> {
        self.by_key.iter()
    }

    /// How many keys are protected.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Whether the pin `key` names `image`: its name resolves to the image as the runtime
/// resolves names, under the same runtime handler.
pub fn pin_names(key: &PinKey, image: &impl ImageLike) -> bool {
    key.runtime_handler == image.runtime_handler() && image_matches(&key.image, image)
}

/// The pins as one read of the table gave them, with an index of their names: the GC's last
/// look reads the pins before every RemoveImage and asks about one image; the index is built
/// once per distinct read (the manager keeps the last one, see `ImageGcManager::pin_index`),
/// so a look parses the image's names once, not every pin.
#[derive(Debug, Default)]
pub struct PinIndex {
    pins: Vec<(PinKey, ImagePin)>,
    index: MatchIndex,
}

impl PinIndex {
    /// Every pin of `pins` (in force or not: asked with a time), indexed by name and handler.
    pub fn new(pins: Vec<(PinKey, ImagePin)>) -> PinIndex {
        let index = MatchIndex::of_names(
            pins.iter()
                .map(|(k, _)| (k.image.as_str(), k.runtime_handler.as_str())),
        );
        PinIndex { pins, index }
    }

    /// The pins it was built of.
    pub fn pins(&self) -> &[(PinKey, ImagePin)] {
        &self.pins
    }

    /// Whether a pin of these in force at `now` names `image` (the GC's last look): its
    /// handler is the image's and its name resolves to the image (`pin_names`).
    pub fn pinned_at(&self, image: &impl ImageLike, now: UnixNanos) -> bool {
        self.index
            .naming(image)
            .into_iter()
            .filter_map(|at| self.pins.get(at))
            .any(|(_, p)| p.active_at(now))
    }
}

/// One pin as `imagekeeper pins` shows it: the stored pin, whether it protects at the time
/// it was read, and the images it names now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinView {
    /// The pin's key.
    pub key: PinKey,
    /// The stored pin.
    pub pin: ImagePin,
    /// Whether it protects at the time of the listing (`now < until`, or no expiry).
    pub active: bool,
    /// The images the name resolves to (as the runtime resolves names), under its handler.
    pub image_ids: Vec<ImageId>,
    /// Whether the runtime carries every one of those images as pinned (CRI ListImages
    /// `pinned: true`, which the kubelet's image GC and eviction manager obey), as the running
    /// agent's last runtime-pins reconcile found: `None` when not known, and then
    /// `runtime_pin_note` says why (read offline, runtime pins off, pin expired, ...).
    pub runtime_pinned: Option<bool>,
    /// Why `runtime_pinned` is `None` (empty when it is known).
    pub runtime_pin_note: String,
    /// Whether containerd's `io.cri-containerd.pinned` label was on every one of those images
    /// at the same reconcile (`Some` exactly when `runtime_pinned` is): `Some(true)` beside
    /// `runtime_pinned: Some(false)` is a label the CRI does not carry (containerd before
    /// 1.7.10, containerd issue 9328).
    pub runtime_labelled: Option<bool>,
}

/// [`PinView::runtime_pin_note`] of a pin read without a running agent: the runtime's labels
/// are only read by the agent.
pub const RUNTIME_PIN_OFFLINE: &str =
    "unknown: no running agent answered (only the agent reads the runtime's pins)";

/// The pins with their state at `now` and the images of `images` each names.
pub fn pin_views(
    pins: Vec<(PinKey, ImagePin)>,
    images: &[RuntimeImage],
    now: UnixNanos,
) -> Vec<PinView> {
    // The images' names parsed once, each pin's name once (not a parse per pin and image).
    let index = MatchIndex::of_images(images);
    pins.into_iter()
        .map(|(key, pin)| {
            let image_ids = index
                .named_by(&key.image, &key.runtime_handler)
                .into_iter()
                .filter_map(|at| images.get(at))
                .map(|i| i.id.clone())
                .collect();
            view_of(key, pin, image_ids, now)
        })
        .collect()
}

/// One pin with its state at `now` and the images of `images` it names.
pub fn pin_view(key: PinKey, pin: ImagePin, images: &[RuntimeImage], now: UnixNanos) -> PinView {
    let image_ids = images
        .iter()
        .filter(|i| pin_names(&key, i))
        .map(|i| i.id.clone())
        .collect();
    view_of(key, pin, image_ids, now)
}

/// One pin with its state at `now` and the ids of the images it names.
fn view_of(key: PinKey, pin: ImagePin, image_ids: Vec<ImageId>, now: UnixNanos) -> PinView {
    PinView {
        active: pin.active_at(now),
        key,
        pin,
        image_ids,
        runtime_pinned: None,
        runtime_pin_note: RUNTIME_PIN_OFFLINE.to_owned(),
        runtime_labelled: None,
    }
}

/// The images as the store last saw them: each record with the names the last detect wrote
/// (what a pin is resolved against when no runtime is asked: `imagekeeper pin` without an
/// agent, `inspect`).
pub fn stored_images(store: &Store) -> Result<Vec<RuntimeImage>, StoreError> {
    let names: BTreeMap<RecordKey, crate::model::ImageNames> =
        store.all_names()?.into_iter().collect();
    Ok(store
        .records()?
        .iter()
        .map(|r| stored_image(r, &names))
        .collect())
}

/// One record as the runtime would list it, with the names the last detect wrote for it (none
/// when it has none): what pins are resolved against offline.
pub fn stored_image(
    r: &crate::store::StoredRecord,
    names: &BTreeMap<RecordKey, crate::model::ImageNames>,
) -> RuntimeImage {
    let n = names.get(&r.key).cloned().unwrap_or_default();
    RuntimeImage {
        id: r.key.image_id.clone(),
        repo_tags: n.repo_tags,
        repo_digests: n.repo_digests,
        size: r.record.size,
        pinned: r.record.pinned,
        runtime_handler: r.key.runtime_handler.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn image(id: &str, tags: &[&str], digests: &[&str]) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            repo_tags: tags.iter().map(|s| (*s).to_owned()).collect(),
            repo_digests: digests.iter().map(|s| (*s).to_owned()).collect(),
            size: 1,
            ..RuntimeImage::default()
        }
    }

    fn pin(until: i64, reason: &str) -> ImagePin {
        ImagePin {
            created_at: UnixNanos(1),
            until: UnixNanos(until),
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn a_pin_by_tag_follows_the_tag_and_expires_by_the_clock() {
        let pins = vec![(
            PinKey::new("docker.io/library/app:1", ""),
            pin(100, "rollout"),
        )];
        let old = image("sha256:old", &[], &["docker.io/library/app@sha256:aa"]);
        let new = image(
            "sha256:new",
            &["docker.io/library/app:1"],
            &["docker.io/library/app@sha256:bb"],
        );
        let p = Protections::resolve([&old, &new], &pins, None, UnixNanos(50));
        assert!(p.contains(&new.record_key()));
        assert!(!p.contains(&old.record_key()), "the tag moved away from it");
        assert_eq!(
            p.get(&new.record_key())
                .map(Protection::describe)
                .as_deref(),
            Some("pinned by imagekeeper until 1970-01-01T00:00:00.0000001Z (rollout)")
        );
        // At and after `until` the pin protects nothing.
        assert!(Protections::resolve([&new], &pins, None, UnixNanos(100)).is_empty());
    }

    #[test]
    fn pins_by_digest_and_id_and_runtime_handler() {
        let digest = format!("docker.io/library/app@sha256:{}", "ab".repeat(32));
        let digest = digest.as_str();
        let app = image("sha256:app", &["app:1"], &[digest]);
        let mut kata = app.clone();
        kata.runtime_handler = "kata".into();
        let pins = vec![
            (PinKey::new(digest, "kata"), pin(0, "")),
            (PinKey::new("sha256:app", ""), pin(0, "by id")),
        ];
        let p = Protections::resolve([&app, &kata], &pins, None, UnixNanos(1 << 62));
        assert_eq!(p.len(), 2);
        assert_eq!(
            p.get(&kata.record_key())
                .map(Protection::describe)
                .as_deref(),
            Some(format!("pinned by imagekeeper with no expiry (as {digest})").as_str())
        );
        assert_eq!(
            p.get(&app.record_key())
                .map(Protection::describe)
                .as_deref(),
            Some("pinned by imagekeeper with no expiry (by id)")
        );
    }

    /// A name of a small grammar: a registry form (none, Docker Hub's three spellings, two
    /// others), a path (official, with `library/`, a team's) and a tag, digest, both or none;
    /// or an image id, or junk. Pools of these meet often, in every way `image_matches` knows.
    fn name_of(seed: (u8, u8, u8)) -> String {
        let digest = |d: u8| format!("sha256:{}", format!("{d:02x}").repeat(32));
        let registry = [
            "",
            "docker.io/",
            "index.docker.io/",
            "registry.k8s.io/",
            "localhost:5000/",
        ][usize::from(seed.0 % 5)];
        let path = ["pause", "library/pause", "team/pause"][usize::from(seed.1 % 3)];
        let suffix = match seed.2 % 6 {
            0 => String::new(),
            1 => ":3.9".to_owned(),
            2 => ":latest".to_owned(),
            3 => format!("@{}", digest(seed.2 % 2)),
            4 => format!(":3.9@{}", digest(seed.2 % 2)),
            _ => ":3.8".to_owned(),
        };
        match seed.0 % 11 {
            9 => format!("sha256:id{}", seed.1 % 4),
            10 => "Not A Reference".to_owned(),
            _ => format!("{registry}{path}{suffix}"),
        }
    }

    /// What the pins protected pair by pair before the index (issue 53): each image's first
    /// active pin in order whose handler and name match it.
    fn pairwise(
        images: &[RuntimeImage],
        pins: &[(PinKey, ImagePin)],
        now: UnixNanos,
    ) -> Vec<Option<String>> {
        images
            .iter()
            .map(|image| {
                pins.iter()
                    .find(|(k, p)| p.active_at(now) && pin_names(k, image))
                    .map(|(k, _)| k.image.clone())
            })
            .collect()
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        fn seed() -> impl Strategy<Value = (u8, u8, u8)> {
            (any::<u8>(), any::<u8>(), any::<u8>())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// The index answers what `pin_names` answers pair by pair: which pin protects each
            /// image (`resolve`), which images each pin names (`pin_views`) and the last look
            /// (`PinIndex::pinned_at`), over generated pins (active or expired, two handlers)
            /// and images (tags, digests, ids of the same pool).
            #[test]
            fn the_indexed_pins_answer_what_pin_names_answers_pair_by_pair(
                pin_seeds in prop::collection::vec((seed(), any::<bool>(), any::<bool>()), 0..24),
                image_seeds in prop::collection::vec((seed(), seed(), seed(), any::<bool>()), 0..24),
            ) {
                let now = UnixNanos(50);
                let pins: Vec<(PinKey, ImagePin)> = pin_seeds
                    .iter()
                    .map(|&(s, expired, kata)| {
                        let handler = if kata { "kata" } else { "" };
                        (PinKey::new(name_of(s), handler), pin(if expired { 10 } else { 0 }, "r"))
                    })
                    .collect();
                let images: Vec<RuntimeImage> = image_seeds
                    .iter()
                    .enumerate()
                    .map(|(i, &(tag, other, digest, kata))| {
                        // One id per image (a runtime lists an id once per handler); the
                        // pool's ids name the first four.
                        let id = format!("sha256:id{i}");
                        let mut image = image(
                            &id,
                            &[name_of(tag).as_str(), name_of(other).as_str()],
                            &[name_of(digest).as_str()],
                        );
                        if kata {
                            image.runtime_handler = "kata".into();
                        }
                        image
                    })
                    .collect();
                let indexed = Protections::resolve(&images, &pins, None, now);
                let indexed_pins = PinIndex::new(pins.clone());
                let want = pairwise(&images, &pins, now);
                for (image, want) in images.iter().zip(&want) {
                    let got = match indexed.get(&image.record_key()) {
                        Some(Protection::Pinned { image, .. }) => Some(image.clone()),
                        _ => None,
                    };
                    prop_assert_eq!(&got, want, "{:?}", image);
                    prop_assert_eq!(indexed_pins.pinned_at(image, now), want.is_some());
                }
                for view in pin_views(pins.clone(), &images, now) {
                    let pairwise_ids: Vec<ImageId> = images
                        .iter()
                        .filter(|i| pin_names(&view.key, *i))
                        .map(|i| i.id.clone())
                        .collect();
                    prop_assert_eq!(&view.image_ids, &pairwise_ids, "{:?}", view.key);
                }
            }
        }
    }

    /// 300 pins beside 300 images (a tag and a digest each): each pin and each listed name is
    /// parsed once per resolve, and once per pin listing, not once per pair (issue 53: pair
    /// by pair this is 180,000 parses; at 10,000 x 10,000 it stalled the agent for minutes).
    #[test]
    fn pins_and_listed_names_are_parsed_once_not_once_per_pair() {
        let n = 300;
        let images: Vec<RuntimeImage> = (0..n)
            .map(|i| {
                image(
                    &format!("sha256:{i}"),
                    &[format!("registry.example/app-{i}:1").as_str()],
                    &[format!("registry.example/app-{i}@sha256:{}", "ab".repeat(32)).as_str()],
                )
            })
            .collect();
        // Every other pin names an image; the others name nothing listed.
        let pins: Vec<(PinKey, ImagePin)> = (0..n)
            .map(|i| {
                let name = if i % 2 == 0 {
                    format!("registry.example/app-{i}:1")
                } else {
                    format!("registry.example/absent-{i}:1")
                };
                (PinKey::new(name, ""), pin(0, ""))
            })
            .collect();
        let parses = || crate::reference::PARSES.with(std::cell::Cell::get);
        crate::reference::PARSES.with(|c| c.set(0));
        let p = Protections::resolve(&images, &pins, None, UnixNanos(1));
        let resolving = parses();
        assert_eq!(p.len(), n / 2);
        for (i, image) in images.iter().enumerate() {
            assert_eq!(p.contains(&image.record_key()), i % 2 == 0, "{i}");
        }
        crate::reference::PARSES.with(|c| c.set(0));
        let views = pin_views(pins, &images, UnixNanos(1));
        let listing = parses();
        assert_eq!(
            views.iter().filter(|v| !v.image_ids.is_empty()).count(),
            n / 2
        );
        // A pin's name and an image's two names: three parses per position.
        assert!(
            resolving <= 3 * n,
            "{resolving} parses to resolve {n} pins over {n} images"
        );
        assert!(
            listing <= 3 * n,
            "{listing} parses to list {n} pins over {n} images"
        );
    }

    #[test]
    fn irreplaceable_images_only_when_asked() {
        let pause = image(
            "sha256:pause",
            &["registry.k8s.io/pause:3.6"],
            &["registry.k8s.io/pause@sha256:cc"],
        );
        let imported = image("sha256:imp", &["docker.io/library/airgap:1"], &[]);
        let pulled = image(
            "sha256:pulled",
            &["app:2"],
            &["docker.io/library/app@sha256:dd"],
        );
        let rule = Irreplaceable {
            sandbox_image: Some("registry.k8s.io/pause:3.6".into()),
        };
        let all = [&pause, &imported, &pulled];
        let p = Protections::resolve(all, &[], Some(&rule), UnixNanos(1));
        assert_eq!(
            p.get(&pause.record_key()),
            Some(&Protection::SandboxImage {
                name: "registry.k8s.io/pause:3.6".into()
            })
        );
        assert_eq!(
            p.get(&imported.record_key()),
            Some(&Protection::NoRepoDigest)
        );
        assert!(!p.contains(&pulled.record_key()));
        assert!(Protections::resolve(all, &[], None, UnixNanos(1)).is_empty());
    }
}

/// Why imagekeeper keeps an image, as the runtime pins' own label says it
/// (`io.imagekeeper.pinned=<value>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum KeepReason {
    /// An operator's pin in force.
    Pin,
    /// A warm set entry in force, and the image is present.
    Warm,
    /// The runtime's sandbox image (irreplaceable rule).
    SandboxImage,
    /// No repo digest (irreplaceable rule).
    NoRepoDigest,
    /// A pod bound to this node names it (`clusterSignals`).
    NeededByPod,
}

impl KeepReason {
    /// The value of imagekeeper's own label on a runtime image it pinned.
    pub fn label_value(self) -> &'static str {
        match self {
            KeepReason::Pin => "pin",
            KeepReason::Warm => "warm",
            KeepReason::SandboxImage => "sandbox-image",
            KeepReason::NoRepoDigest => "no-repo-digest",
            KeepReason::NeededByPod => "needed-by-pod",
        }
    }

    /// The reason whose [`KeepReason::label_value`] is `value`.
    pub fn from_label_value(value: &str) -> Option<KeepReason> {
        [
            KeepReason::Pin,
            KeepReason::Warm,
            KeepReason::SandboxImage,
            KeepReason::NoRepoDigest,
            KeepReason::NeededByPod,
        ]
        .into_iter()
        .find(|r| r.label_value() == value)
    }

    /// Why a protection keeps its image.
    pub fn of(protection: &Protection) -> KeepReason {
        match protection {
            Protection::Pinned { .. } => KeepReason::Pin,
            Protection::SandboxImage { .. } => KeepReason::SandboxImage,
            Protection::NoRepoDigest => KeepReason::NoRepoDigest,
        }
    }
}

/// An image a detect found kept (by a pin, a present warm entry or the irreplaceable rule),
/// with every name containerd may store it under (its repo tags, its repo digests and its
/// image id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptImage {
    /// The image's record key.
    pub key: RecordKey,
    /// Every name containerd may store it under.
    pub names: Vec<String>,
    /// What keeps it.
    pub why: KeepReason,
    /// Whether the runtime's CRI ListImages of that detect listed it `pinned: true`.
    pub listed_pinned: bool,
}
