//! What a detect keeps besides the images in use: the listed images a pull in flight protects,
//! the listed images a warm set entry in force keeps (the KeepSets' in mode warm, and with
//! `[warmFromHistory]` the journal's entries too), and the record of what the last detect
//! found kept (pins, irreplaceable images, warm entries) for the runtime pins.
//!
//! Invariants: the warm lookups go through one index per cycle (no cost grows with entries
//! times images); `last_keeps` is `None` until the first detect and then replaced whole.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ImageLike, RecordKey, UnixNanos};
use crate::runtime::ImageRuntime;

use crate::gc::GcError;
use crate::gc::cycle::KeepSets;
use crate::gc::detect::ListedImages;
use crate::gc::fault_hooks::fault_hooks;
use crate::gc::protect::Protections;

use super::{ImageGcManager, Settings};

/// Whether a keep computation records what the keep share left out (the cycle's detect) or
/// only looks (a dry run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Share {
    Record,
    Look,
}

impl<R: ImageRuntime> ImageGcManager<R> {
    /// The keep sets of the agent's own sources at `now` ([`KeepSets`]), for the cycle's
    /// detect and the dry run alike: one place reads each source. Only the cycle's
    /// (`Share::Record`) records what the keep share left out; a dry run changes nothing.
    pub(super) fn keep_sets(
        &self,
        settings: &Settings,
        listed: &ListedImages,
        in_use: &BTreeSet<RecordKey>,
        now: UnixNanos,
        share: Share,
    ) -> Result<(KeepSets, Option<crate::gc::KeepsOverShare>), GcError> {
        let (needed_by_pods, over_share) = self.needed_within_share(listed, in_use, now, share);
        let sets = KeepSets {
            pulling: self.pulling(listed),
            warm: self.warm(settings, listed, now)?,
            needed_by_pods,
        };
        Ok((sets, over_share))
    }

    /// [`Self::needed_by_pods`] within the signals' keep share of the image filesystem's last
    /// read capacity (`crate::gc::keep_share`); what the share leaves out is recorded in the
    /// signals and said once each way in the log.
    fn needed_within_share(
        &self,
        listed: &ListedImages,
        in_use: &BTreeSet<RecordKey>,
        now: UnixNanos,
        record: Share,
    ) -> (
        BTreeMap<RecordKey, String>,
        Option<crate::gc::KeepsOverShare>,
    ) {
        let needed = self.needed_by_pods(listed, now);
        let share = self.cluster_signals.keep_share();
        if needed.is_empty() && self.cluster_signals.keeps_over_share().is_none() {
            return (needed, None);
        }
        let sized = listed
            .iter()
            .filter_map(|image| {
                let key = image.record_key();
                let source = needed.get(&key)?;
                Some((key, (source.clone(), image.size())))
            })
            .collect();
        let capacity = self
            .image_fs_capacity
            .load(std::sync::atomic::Ordering::Relaxed);
        let (kept, over) = crate::gc::within_share(sized, in_use, capacity, share);
        if record == Share::Look {
            return (kept, over);
        }
        let said = over.clone();
        match self.cluster_signals.record_keep_share(over) {
            crate::gc::ShareChange::NowOver => {
                if let Some(over) = &said {
                    tracing::warn!(
                        share_percent = over.share_percent,
                        budget = over.budget,
                        held = over.held,
                        left = over.left.len(),
                        left_bytes = over.left_bytes(),
                        first = over
                            .left
                            .first()
                            .map(|(k, s, _)| format!("{} ({s})", k.image_id.0)),
                        "The images the cluster needs on this node do not fit clusterSignalsKeepShare: those past it are left to the GC's order"
                    );
                }
            }
            crate::gc::ShareChange::NowWithin => {
                tracing::info!(
                    share_percent = share,
                    "The images the cluster needs on this node fit clusterSignalsKeepShare again"
                );
            }
            crate::gc::ShareChange::Same => {}
        }
        (kept, said)
    }

    /// The listed images a pod bound to this node names, or a CronJob run due within the
    /// signals' lead at `now`, under the default runtime handler (the kubelet pulls a pod's
    /// images under it unless RuntimeClassInImageCriApi is on), each with the first (by name)
    /// of the names' sources (a pod's before a CronJob's).
    fn needed_by_pods(&self, listed: &ListedImages, now: UnixNanos) -> BTreeMap<RecordKey, String> {
        let mut wanted = self.bound_pods.images();
        for (image, run) in self.cluster_signals.due_within_lead(now) {
            wanted.entry(image).or_insert_with(|| run.source());
        }
        if wanted.is_empty() {
            return BTreeMap::new();
        }
        let index = crate::reference::MatchIndex::of_names(wanted.keys().map(|n| (n.as_str(), "")));
        let sources: Vec<&String> = wanted.values().collect();
        listed
            .iter()
            .filter_map(|image| {
                let first = index.naming(&image).into_iter().min_by_key(|at| {
                    (
                        sources.get(*at).is_some_and(|s| s.starts_with("CronJob ")),
                        *at,
                    )
                })?;
                let source = sources.get(first)?;
                Some((image.record_key(), (*source).clone()))
            })
            .collect()
    }

    /// The listed images that a pull in flight protects.
    pub(super) fn pulling(&self, listed: &ListedImages) -> BTreeSet<RecordKey> {
        if self.in_flight.is_empty() {
            return BTreeSet::new();
        }
        listed
            .iter()
            .filter(|image| self.in_flight.protects(image))
            .map(|image| image.record_key())
            .collect()
    }

    /// Records what this detect found kept, with every listed name of each image: an
    /// operator's pin or the irreplaceable rule (a pin first), else a present warm entry, else
    /// a pod bound to this node.
    pub(super) fn record_keeps(
        &self,
        listed: &ListedImages,
        protections: &Protections,
        sets: &KeepSets,
    ) {
        let (warm, needed) = (&sets.warm, &sets.needed_by_pods);
        let mut keeps = Vec::new();
        // Nothing protected and no warm entry (the common node): no listed image is kept, and
        // none of the list's keys is copied to look it up (100k copies at 100k images).
        let images = (!protections.is_empty() || !warm.is_empty() || !needed.is_empty())
            .then(|| listed.iter());
        for image in images.into_iter().flatten() {
            let key = image.record_key();
            let why = match protections.get(&key) {
                Some(p) => crate::gc::KeepReason::of(p),
                None if warm.contains_key(&key) => crate::gc::KeepReason::Warm,
                None if needed.contains_key(&key) => crate::gc::KeepReason::NeededByPod,
                None => continue,
            };
            // containerd stores a CRI pull under its tag and its repo digest, and 2.x also under
            // the image id (`sha256:<config digest>`).
            let names = image
                .repo_tags()
                .chain(image.repo_digests())
                .chain(std::iter::once(image.id()))
                .map(str::to_owned)
                .collect();
            keeps.push(crate::gc::KeptImage {
                key,
                names,
                why,
                listed_pinned: image.pinned(),
            });
        }
        *self
            .last_keeps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keeps);
    }

    /// What the last detect found kept; `None` before the first detect.
    pub fn last_keeps(&self) -> Option<Vec<crate::gc::KeptImage>> {
        self.last_keeps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The listed images a warm set entry in force at `now` keeps: the set's entries, the
    /// KeepSets' in mode warm and, with `[warmFromHistory]`, the history's (read from the
    /// journal now).
    pub(super) fn warm(
        &self,
        settings: &Settings,
        listed: &ListedImages,
        now: UnixNanos,
    ) -> Result<BTreeMap<RecordKey, String>, GcError> {
        let warm = &settings.config.warm;
        if fault_hooks().ignore_warm() {
            return Ok(BTreeMap::new());
        }
        let history = match warm.from_history {
            Some(window) => {
                let journal = self.store.journal()?;
                let stored_names = self
                    .store
                    .names_of_keys(journal.iter().map(|(k, _)| &k.key))?;
                let names = |key: &RecordKey| stored_names.get(key).cloned();
                crate::warm::history_entries(&journal, &names, now, window)
            }
            None => Vec::new(),
        };
        let keep_sets = self.node_keep_sets.warm_set();
        if warm.is_empty() && history.is_empty() && keep_sets.is_empty() {
            return Ok(BTreeMap::new());
        }
        // Lookups of each listed image's names in the set's index and in one of the
        // history's entries: no cost grows with entries times images (issue 41).
        let history_index = crate::reference::MatchIndex::of_names(
            history
                .iter()
                .map(|e| (e.image.as_str(), e.runtime_handler.as_str())),
        );
        Ok(listed
            .iter()
            .filter_map(|image| {
                let entry = warm
                    .keeps(&image, now)
                    .or_else(|| keep_sets.keeps(&image, now))
                    .or_else(|| {
                        history_index
                            .naming(&image)
                            .into_iter()
                            .filter_map(|at| history.get(at))
                            .find(|e| e.active(now))
                    })?;
                Some((image.record_key(), entry.origin.clone()))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::gc::Decision;
    use crate::gc::manager::pending_eviction_tests::other_fs_fixture;
    use crate::model::{ImageId, RuntimeImage, UnixNanos};

    fn image(n: u64, tag: &str) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(format!("sha256:{n:064x}")),
            repo_tags: vec![tag.to_owned()],
            size: 100,
            ..RuntimeImage::default()
        }
    }

    /// A pod bound to the node names `main:1`, whose container does not exist yet: at full
    /// disk GarbageCollect removes every other unused image and keeps it, the dry run says
    /// why; once the pod is gone the next cycle removes it.
    #[tokio::test]
    async fn a_bound_pods_image_is_kept_until_the_pod_is_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Detected at 10 000 s, MinAge 0.
        let (_runtime, manager) = other_fs_fixture(dir.path(), 0, 0, |state| {
            state.images = vec![image(1, "main:1"), image(2, "other:1")].into();
            state.fs = Some((1_000, 0));
        })
        .await;
        manager
            .bound_pods()
            .set_pod("ns/job".into(), vec!["main:1".into()]);
        let t1 = UnixNanos::from_secs(20_000);
        // The keep is recorded for the runtime pins, under its own label value.
        manager.detect(t1).await.expect("detect");
        let keeps = manager.last_keeps().expect("a detect ran");
        let why: Vec<_> = keeps.iter().map(|k| (k.key.clone(), k.why)).collect();
        let main = image(1, "main:1").record_key();
        assert_eq!(why, [(main.clone(), crate::gc::KeepReason::NeededByPod)]);
        assert_eq!(
            crate::gc::KeepReason::NeededByPod.label_value(),
            "needed-by-pod"
        );
        let plan = manager.plan(t1, false).await.expect("plan");
        let decision = |key| {
            plan.explanation
                .images
                .iter()
                .find(|i| i.key == key)
                .map(|i| (i.decision, i.reason.clone()))
        };
        let (kept, reason) = decision(main.clone()).expect("main:1 explained");
        assert_eq!(kept, Decision::KeepNeededByPod, "{reason}");
        assert!(
            reason.contains("a pod bound to this node names it (ns/job)"),
            "{reason}"
        );
        // A DaemonSet owning a pod here: its template's image is explained with its source.
        manager
            .bound_pods()
            .set_daemonset("ns/agent".into(), vec!["other:1".into()]);
        manager.bound_pods().set_pod_owned(
            "ns/agent-x1".into(),
            vec!["gone:1".into()],
            Some("ns/agent".into()),
        );
        let plan = manager.plan(t1, false).await.expect("plan");
        let other = plan
            .explanation
            .images
            .iter()
            .find(|i| i.key == image(2, "other:1").record_key())
            .expect("other:1 explained");
        assert_eq!(
            other.decision,
            Decision::KeepNeededByPod,
            "{}",
            other.reason
        );
        assert_eq!(other.needed_by.as_deref(), Some("DaemonSet ns/agent"));
        assert!(
            other
                .reason
                .starts_with("DaemonSet ns/agent, which owns a pod bound to this node"),
            "{}",
            other.reason
        );
        manager.bound_pods().remove_pod("ns/agent-x1");
        let report = manager.garbage_collect(t1).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, [image(2, "other:1").record_key()]);
        manager.bound_pods().remove_pod("ns/job");
        let report = manager.garbage_collect(UnixNanos::from_secs(30_000)).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, [main]);
    }

    /// Two images needed by a pod bound here on a full 1,000-byte disk, with a keep share of
    /// 30 %: the one that fits (100 bytes) is kept, the one past the share (400) is left to the
    /// order and GarbageCollect removes it; the signals record it, as news once. With no
    /// share it is kept, and the share's state turns back to within.
    #[tokio::test]
    async fn the_images_past_the_keep_share_are_left_to_the_order_and_said_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = RuntimeImage {
            size: 400,
            ..image(2, "big:1")
        };
        let (_runtime, manager) = other_fs_fixture(dir.path(), 0, 0, |state| {
            state.images = vec![image(1, "main:1"), big.clone(), image(3, "other:1")].into();
            state.fs = Some((1_000, 0));
        })
        .await;
        let signals = manager.cluster_signals();
        signals.set_keep_share(30);
        manager
            .bound_pods()
            .set_pod("ns/a".into(), vec!["main:1".into(), "big:1".into()]);
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        let main = image(1, "main:1").record_key();
        assert!(removed.contains(&big.record_key()), "{report:?}");
        assert!(!removed.contains(&main), "{report:?}");
        let over = signals.keeps_over_share().expect("over the share");
        assert_eq!((over.share_percent, over.budget, over.held), (30, 300, 100));
        assert_eq!(over.left, [(big.record_key(), "ns/a".to_owned(), 400)]);
        assert_eq!(signals.take_over_share_news(), Some(over));
        assert_eq!(signals.take_over_share_news(), None, "said once");
        // The dry run explains it, and records nothing.
        let dir_plan = tempfile::tempdir().expect("tempdir");
        let (_runtime, planner) = other_fs_fixture(dir_plan.path(), 0, 0, |state| {
            state.images = vec![image(1, "main:1"), big.clone()].into();
            state.fs = Some((1_000, 0));
        })
        .await;
        planner.cluster_signals().set_keep_share(30);
        planner.observe_image_fs().await.expect("fs");
        planner
            .bound_pods()
            .set_pod("ns/a".into(), vec!["main:1".into(), "big:1".into()]);
        let plan = planner
            .plan(UnixNanos::from_secs(20_000), false)
            .await
            .expect("plan");
        let explained = plan
            .explanation
            .images
            .iter()
            .find(|i| i.key == big.record_key())
            .expect("big:1 explained");
        assert_eq!(explained.past_keep_share.as_deref(), Some("ns/a"));
        assert!(
            explained.reason.ends_with(
                "; needed by ns/a, but past clusterSignalsKeepShare (30% of the image filesystem, 100 B kept by the signals): left to the order"
            ),
            "{}",
            explained.reason
        );
        assert_eq!(planner.cluster_signals().keeps_over_share(), None);
        // No share: both are kept; the state turns back to within.
        let dir = tempfile::tempdir().expect("tempdir");
        let (_runtime, manager) = other_fs_fixture(dir.path(), 0, 0, |state| {
            state.images = vec![image(1, "main:1"), big.clone(), image(3, "other:1")].into();
            state.fs = Some((1_000, 0));
        })
        .await;
        manager
            .bound_pods()
            .set_pod("ns/a".into(), vec!["main:1".into(), "big:1".into()]);
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, [image(3, "other:1").record_key()], "{report:?}");
        signals.set_keep_share(100);
        manager
            .detect(UnixNanos::from_secs(20_001))
            .await
            .expect("detect");
        assert_eq!(
            signals.record_keep_share(None),
            crate::gc::ShareChange::NowWithin
        );
    }

    /// A CronJob's images are kept from the signals' lead before its next run until the run:
    /// before the lead GC removes it, within it the detect records the keep (for the runtime
    /// pins) and explain names the run; a pod bound here names its source first.
    #[tokio::test]
    async fn a_cronjobs_image_is_kept_from_the_lead_before_its_run_until_the_run() {
        use crate::gc::{CronJobSignal, CronSchedule};
        let dir = tempfile::tempdir().expect("tempdir");
        let (runtime, manager) = other_fs_fixture(dir.path(), 0, 0, |state| {
            state.images = vec![image(1, "etl:1"), image(2, "other:1")].into();
            state.fs = Some((1_000, 0));
        })
        .await;
        let signals = manager.cluster_signals();
        // Runs at 06:00 UTC every day: 1970-01-01T06:00:00Z is 21 600 s.
        signals.set_cronjob(
            "batch/etl".into(),
            CronJobSignal {
                schedule: CronSchedule::parse("0 6 * * *").expect("schedule"),
                zone: crate::gc::CronZone::utc(),
                suspend: false,
                images: vec!["etl:1".into()],
                here: false,
            },
        );
        signals.set_lead(std::time::Duration::from_secs(600));
        let etl = image(1, "etl:1").record_key();
        let in_lead = UnixNanos::from_secs(21_600 - 300);
        manager.detect(in_lead).await.expect("detect");
        let keeps = manager.last_keeps().expect("a detect ran");
        assert_eq!(keeps.len(), 1, "{keeps:?}");
        assert_eq!(keeps[0].key, etl);
        let plan = manager.plan(in_lead, false).await.expect("plan");
        let explained = plan
            .explanation
            .images
            .iter()
            .find(|i| i.key == etl)
            .expect("etl:1 explained");
        assert_eq!(explained.decision, Decision::KeepNeededByPod);
        assert_eq!(
            explained.needed_by.as_deref(),
            Some("CronJob batch/etl runs at 1970-01-01T06:00:00Z")
        );
        assert!(
            explained.reason.starts_with(
                "CronJob batch/etl runs at 1970-01-01T06:00:00Z, in 5m: kept (and runtime-pinned)"
            ),
            "{}",
            explained.reason
        );
        let report = manager.garbage_collect(in_lead).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, [image(2, "other:1").record_key()]);
        // Past the run: nothing keeps it.
        let after = UnixNanos::from_secs(21_601);
        let report = manager.garbage_collect(after).await;
        let removed: Vec<_> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, [etl], "{:?}", runtime.state().images);
    }
}
