//! What the kubelet's pull records mean to GC: the runtime's images an intent names (the
//! kubelet is pulling them: in use), the times its pulled records give each image (a use),
//! and the names its observed preloaded records give an image (shown, not a use: see
//! [`KubeletView::preloaded`]). Pure: takes the records read (by `crate::kubelet`) and the
//! runtime's images.
//!
//! Invariants: an intent's name is resolved as every protecting name is, with
//! [`image_matches`] (the image id, or a reference resolving to one of its repo tags or, with a
//! digest, repo digests), so a short name errs on the side of keeping; a pulled record's
//! `imageRef` is the id the runtime returned from the pull, matched like a container's image
//! (the id or one of the repo digests); several records of one image keep the latest time;
//! an intent older than the intent max age ([`IntentAge`]) keeps nothing and is listed in
//! [`KubeletView::stale_intents`].

use std::collections::{BTreeMap, BTreeSet};

use crate::kubelet::{
    IntentAge, PreloadedRecord, PullIntent, PullRecordsReader, PulledRecord, StaleIntent,
};
use crate::model::{FUTURE_STAMP_TOLERANCE, ImageLike, RecordKey, RuntimeImage, UnixNanos};
use crate::reference::image_matches;

/// The kubelet's pull records resolved to record keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletView {
    /// Images a pull intent names: the kubelet is pulling them now.
    pub pulling: BTreeSet<RecordKey>,
    /// The latest pulled record's time of each image that has one.
    pub used_at: BTreeMap<RecordKey, UnixNanos>,
    /// Images the kubelet pulled (or checked for a pod) less than MinAge ago: its pod's
    /// container is about to start (see [`KubeletView::mark_just_pulled`]).
    pub just_pulled: BTreeSet<RecordKey>,
    /// Intents older than the intent max age: they keep nothing (explain shows them).
    pub stale_intents: Vec<StaleIntent>,
    /// The names the kubelet's observed preloaded records give each image that has one: the
    /// kubelet found it present without having pulled it when pods asked for it by these
    /// names. Shown by explain; not a use: the record has no time (nothing to order by), it
    /// lives as long as the image does, and the kubelet's own GC does not read it. Filled only
    /// by [`KubeletView::with_preloaded`] (explain's paths), never by detect.
    pub preloaded: BTreeMap<RecordKey, Vec<String>>,
}

impl KubeletView {
    /// Resolves `intents` and `pulled` against the runtime's `images`.
    pub fn resolve<I: ImageLike>(
        images: impl IntoIterator<Item = I>,
        intents: &[PullIntent],
        pulled: &[PulledRecord],
    ) -> KubeletView {
        let mut view = KubeletView::default();
        for image in images {
            if intents.iter().any(|i| image_matches(&i.image, &image)) {
                view.pulling.insert(image.record_key());
            }
            let latest = pulled
                .iter()
                .filter(|r| pulled_names(r, &image))
                .filter_map(|r| r.last_updated)
                .max();
            if let Some(t) = latest {
                let slot = view.used_at.entry(image.record_key()).or_insert(t);
                *slot = (*slot).max(t);
            }
        }
        view
    }

    /// Marks the images whose pulled record is less than `min_age` before `now` (and not
    /// beyond `now` + [`FUTURE_STAMP_TOLERANCE`]) as just pulled. The kubelet writes the record
    /// when a pull for a pod ends, before it creates the container: a new image is kept by
    /// MinAge from its first detection, and this keeps an image already known (the same id
    /// pulled again, or its credentials checked) for the same time.
    pub fn mark_just_pulled(&mut self, now: UnixNanos, min_age: std::time::Duration) {
        let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
        self.just_pulled = self
            .used_at
            .iter()
            .filter(|(_, t)| **t <= limit && now.saturating_sub(min_age) < **t)
            .map(|(k, _)| k.clone())
            .collect();
    }

    /// Adds the observed preloaded records of `images` (matched as pulled records are, by id
    /// or repo digest); several records of one image give the union of their names, sorted.
    pub fn with_preloaded<I: ImageLike>(
        &mut self,
        images: impl IntoIterator<Item = I>,
        preloaded: &[PreloadedRecord],
    ) {
        for image in images {
            let mut matched = preloaded
                .iter()
                .filter(|r| names_image(&r.image_ref, &image))
                .peekable();
            if matched.peek().is_none() {
                continue;
            }
            let slot = self.preloaded.entry(image.record_key()).or_default();
            slot.extend(matched.flat_map(|r| r.observed_images.iter().cloned()));
            slot.sort();
            slot.dedup();
        }
    }

    /// Reads `reader`'s records (none without a reader) and resolves them; intents stale
    /// by `age` keep nothing.
    pub fn read<I: ImageLike>(
        reader: Option<&PullRecordsReader>,
        images: impl IntoIterator<Item = I>,
        age: IntentAge,
    ) -> KubeletView {
        match reader {
            None => KubeletView::default(),
            Some(reader) => {
                let intents = reader.intents(age);
                let mut view = KubeletView::resolve(images, &intents.found, &reader.pulled().found);
                view.stale_intents = intents.stale;
                view
            }
        }
    }
}

/// What an offline explain (no runtime) can use of the kubelet's records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OfflineKubelet {
    /// What the kubelet's records say.
    pub view: KubeletView,
    /// Intents that name no record by id: without the runtime's tags and digests a name
    /// cannot be resolved to an image (the agent's dry run resolves them).
    pub unresolved_intents: Vec<String>,
}

/// Folds the kubelet's records into `records` (in eviction order) as a detect at `now` would
/// without the runtime: intents and pulled records are matched by image id only, a pulled
/// record's time raises last_used (ignored beyond `now` + [`FUTURE_STAMP_TOLERANCE`], capped
/// at `now`), and the records are put back in eviction order.
pub fn fold_offline(
    reader: &PullRecordsReader,
    records: &mut [crate::store::StoredRecord],
    now: UnixNanos,
    min_age: std::time::Duration,
    intent_max_age: std::time::Duration,
) -> OfflineKubelet {
    let images: Vec<RuntimeImage> = records
        .iter()
        .map(|r| RuntimeImage {
            id: r.key.image_id.clone(),
            runtime_handler: r.key.runtime_handler.clone(),
            ..RuntimeImage::default()
        })
        .collect();
    let scan = reader.intents(IntentAge::new(now, intent_max_age));
    let intents = scan.found;
    let mut view = KubeletView::resolve(&images, &intents, &reader.pulled().found);
    view.stale_intents = scan.stale;
    view.with_preloaded(&images, &reader.preloaded().found);
    view.mark_just_pulled(now, min_age);
    let unresolved_intents = intents
        .into_iter()
        .filter(|i| !images.iter().any(|image| image_matches(&i.image, image)))
        .map(|i| i.image)
        .collect();
    let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
    for r in records.iter_mut() {
        if let Some(t) = view.used_at.get(&r.key).filter(|t| **t <= limit) {
            r.record.last_used = r.record.last_used.max((*t).min(now));
        }
    }
    records.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected, &a.key).cmp(&(
            b.record.last_used,
            b.record.first_detected,
            &b.key,
        ))
    });
    OfflineKubelet {
        view,
        unresolved_intents,
    }
}

/// Whether a pull intent read now, and not stale by `age`, names `image` (the last look
/// before a removal).
pub fn intent_names(reader: &PullRecordsReader, image: &impl ImageLike, age: IntentAge) -> bool {
    reader
        .intents(age)
        .found
        .iter()
        .any(|i| image_matches(&i.image, image))
}

/// Whether a pulled record read now gives `image` a use after `last_used` (and not later
/// than `free_time` + [`FUTURE_STAMP_TOLERANCE`], as detect ignores one beyond it): the
/// kubelet wrote it after the walk read the record. Reads only the files the image's id and
/// digests name.
pub fn pulled_since(
    reader: &PullRecordsReader,
    image: &impl ImageLike,
    last_used: UnixNanos,
    free_time: UnixNanos,
) -> bool {
    let limit = free_time.saturating_add(FUTURE_STAMP_TOLERANCE);
    std::iter::once(image.id())
        .chain(image.repo_digests())
        .filter_map(|r| reader.pulled_for(r))
        .filter_map(|r| r.last_updated)
        .any(|t| t > last_used && t <= limit)
}

/// Whether `record` is of `image`: its imageRef is the image's id or one of its digests.
fn pulled_names(record: &PulledRecord, image: &impl ImageLike) -> bool {
    names_image(&record.image_ref, image)
}

/// Whether a record's `image_ref` (an id as the runtime returned it) is `image`'s id or one of
/// its repo digests.
fn names_image(image_ref: &str, image: &impl ImageLike) -> bool {
    image_ref == image.id() || image.repo_digests().any(|d| d == image_ref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn image(id: &str, tags: &[&str], digests: &[&str]) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            repo_digests: digests.iter().map(|d| (*d).to_owned()).collect(),
            size: 1,
            ..RuntimeImage::default()
        }
    }

    #[test]
    fn an_intent_names_images_as_the_runtime_resolves_names() {
        let images = [
            image("sha256:a", &["docker.io/library/busybox:1.36"], &[]),
            image("sha256:b", &["docker.io/library/busybox:1.37"], &[]),
            image(
                "sha256:c",
                &[],
                &[
                    "registry.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                ],
            ),
        ];
        let intents = [
            PullIntent {
                image: "busybox:1.36".into(),
            },
            PullIntent {
                image: "registry.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111".into(),
            },
        ];
        let view = KubeletView::resolve(&images, &intents, &[]);
        assert_eq!(
            view.pulling,
            BTreeSet::from([
                RecordKey::new("sha256:a", ""),
                RecordKey::new("sha256:c", "")
            ])
        );
    }

    #[test]
    fn a_pulled_record_gives_its_image_the_latest_time_by_id_or_digest() {
        let images = [
            image("sha256:a", &[], &["docker.io/library/busybox@sha256:feed"]),
            image("sha256:b", &[], &[]),
        ];
        let rec = |r: &str, secs: Option<i64>| PulledRecord {
            image_ref: r.into(),
            last_updated: secs.map(UnixNanos::from_secs),
        };
        let pulled = [
            rec("sha256:a", Some(10)),
            rec("docker.io/library/busybox@sha256:feed", Some(30)),
            rec("sha256:b", None),
            rec("sha256:gone", Some(50)),
        ];
        let view = KubeletView::resolve(&images, &[], &pulled);
        assert_eq!(
            view.used_at,
            BTreeMap::from([(RecordKey::new("sha256:a", ""), UnixNanos::from_secs(30))])
        );
    }

    /// An observed preloaded record names its image by id or repo digest, as a pulled record
    /// does; several records of one image give the union of their names; it gives no time.
    #[test]
    fn a_preloaded_record_names_its_image_by_id_or_digest_and_gives_no_use() {
        let images = [
            image("sha256:a", &[], &["docker.io/library/busybox@sha256:feed"]),
            image("sha256:b", &[], &[]),
        ];
        let rec = |r: &str, names: &[&str]| PreloadedRecord {
            image_ref: r.into(),
            observed_images: names.iter().map(|n| (*n).to_owned()).collect(),
        };
        let mut view = KubeletView::resolve(&images, &[], &[]);
        view.with_preloaded(
            &images,
            &[
                rec("sha256:a", &["registry.example/a"]),
                rec(
                    "docker.io/library/busybox@sha256:feed",
                    &["docker.io/library/busybox", "registry.example/a"],
                ),
                rec("sha256:gone", &["gone"]),
            ],
        );
        assert_eq!(
            view.preloaded,
            BTreeMap::from([(
                RecordKey::new("sha256:a", ""),
                vec![
                    "docker.io/library/busybox".to_owned(),
                    "registry.example/a".to_owned()
                ]
            )])
        );
        assert!(view.used_at.is_empty() && view.pulling.is_empty());
    }

    /// The kubelet never removes an intent whose name it wrote differently from the runtime's
    /// tag: past the intent max age (file mtime against the injected `now`) it keeps nothing.
    #[test]
    fn a_stale_intent_stops_keeping_its_image() {
        let root = tempfile::tempdir().expect("tempdir");
        let pulling = root.path().join("image_manager/pulling");
        std::fs::create_dir_all(&pulling).expect("mkdir");
        let name = "busybox:1.36";
        let file = pulling.join(crate::kubelet::record_file_name(name));
        std::fs::write(
            &file,
            format!(
                r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1alpha1","image":"{name}"}}"#
            ),
        )
        .expect("write");
        let written = UnixNanos::from_secs(1_800_000_000);
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .expect("open")
            .set_modified(at)
            .expect("mtime");
        let reader = PullRecordsReader::new(root.path());
        let busybox = image("sha256:a", &["docker.io/library/busybox:1.36"], &[]);
        let age = |now| IntentAge::new(now, crate::kubelet::DEFAULT_INTENT_MAX_AGE);

        // Written now: the kubelet is pulling it.
        assert!(intent_names(&reader, &busybox, age(written)));
        let view = KubeletView::read(Some(&reader), std::slice::from_ref(&busybox), age(written));
        assert_eq!(
            view.pulling,
            BTreeSet::from([RecordKey::new("sha256:a", "")])
        );
        assert!(view.stale_intents.is_empty());

        // The same file 48 h later: it keeps nothing, and is listed as stale.
        let later = written.saturating_add(std::time::Duration::from_secs(48 * 3600));
        assert!(!intent_names(&reader, &busybox, age(later)));
        let view = KubeletView::read(Some(&reader), std::slice::from_ref(&busybox), age(later));
        assert!(view.pulling.is_empty(), "{view:?}");
        assert_eq!(view.stale_intents.len(), 1);
        assert_eq!(view.stale_intents[0].image, name);
    }
}
