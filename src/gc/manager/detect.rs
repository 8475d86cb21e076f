//! The manager's detect: list the runtime's images and containers (and the running containers'
//! image volumes, one ContainerStatus per container not seen yet), plan the record changes with
//! `gc::detect`'s rules and commit them in one write transaction, plus the container-created
//! mark (`mark_container_used`) and the logs and counters of what a detect found.
//!
//! Invariants: the records' snapshot is taken before the runtime is listed (a pull marking an
//! image meanwhile keeps its mark through the merge writes); every detect commits (the
//! heartbeat); the removals whose record deletion failed (`pending_evictions`) are journaled as
//! imagekeeper's by the next detect and then forgotten; a dry run plans from the same
//! `observe_and_plan` as the real detect.

use std::collections::BTreeMap;

use tracing::{debug, info, warn};

use crate::model::{
    ContainerState, EvictionNote, FUTURE_STAMP_TOLERANCE, ImageRecord, RecordKey, Remover, Repull,
    RuntimeContainer, UnixNanos,
};
use crate::runtime::{ImageRuntime, RpcCode};
use crate::store::{Batch, InPlaceScan, meta_keys};

use crate::format::{format_rfc3339, go_duration};
use crate::gc::GcError;
use crate::gc::cycle::Keeps;
use crate::gc::detect::{DetectInput, DetectPlan, ListedImages, images_in_use, plan_detect};
use crate::gc::error::CONTAINER_STATUS_OP;
use crate::gc::evict::Verdict;
use crate::gc::fault_hooks::fault_hooks;
use crate::gc::kubelet::KubeletView;
use crate::gc::off_workers::off_the_workers;
use crate::gc::protect::{Irreplaceable, Protections};
use crate::gc::watch::WatchHistory;

use super::{
    CycleTime, CycleView, DetectReport, ImageGcManager, ImageVolumes, Observed, Settings,
    runtime_error,
};

impl<R: ImageRuntime> ImageGcManager<R> {
    /// Lists images and containers and records what changed, in one write transaction (none
    /// when nothing changed). `now` is read once the cycle lock is held (see [`CycleTime`]).
    pub async fn detect(&self, now: impl CycleTime) -> Result<DetectReport, GcError> {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let settings = self.settings();
        self.detect_locked(&settings, now)
            .await
            .map(|(report, _)| report)
    }

    /// What a detect starts from: the stored records (a lazy scan in key order, opened
    /// first), the runtime's images and the record keys in use. The records' snapshot is
    /// taken before the runtime is listed: a pull that marks an image while the runtime is
    /// listed is then absent from the snapshot or older in it, and detect's merge writes keep
    /// its mark (see `detect`). The scan's read transaction stays open until detect has
    /// merged it; it holds no lock a writer waits for.
    async fn observe(
        &self,
        settings: &Settings,
        now: UnixNanos,
    ) -> Result<(InPlaceScan, Observed, Vec<RecordKey>), GcError> {
        let records = self.store.records_in_key_order()?.in_place();
        let images = self
            .runtime
            .list_image_list()
            .await
            .map_err(runtime_error("list images"))?;
        let containers = self
            .runtime
            .list_containers()
            .await
            .map_err(runtime_error("list containers"))?;
        // A container's mounts are fixed when it is created: the answers of the containers
        // still listed are kept from the cycles before (`read_image_volumes` keeps each one it
        // gets), and only the others are asked. Then the kept answers are cut to the listed
        // containers' (a container gone is forgotten).
        let mut volumes: ImageVolumes = {
            let seen = self.volumes_seen();
            containers
                .iter()
                .filter_map(|c| Some((c.id.clone(), seen.get(&c.id)?.clone())))
                .collect()
        };
        self.read_image_volumes(&containers, &mut volumes).await?;
        self.volumes_seen().retain(|id, _| volumes.contains_key(id));
        let mounted: Vec<String> = volumes.values().flatten().cloned().collect();
        let sandbox = self.sandbox_image(settings).await;
        // The rest never awaits: the images in use, the pins matched, the kubelet's records read.
        off_the_workers(|| {
            let mut in_use = images_in_use(&images, &containers, &mounted, sandbox.as_deref());
            // The use history (schema 5) records the images running containers use, their own
            // and their image volumes: a created or exited container keeps its image from GC, but
            // runs nothing.
            let running = || {
                containers
                    .iter()
                    .filter(|c| c.state == ContainerState::Running)
            };
            let running_volumes: Vec<String> = running()
                .filter_map(|c| volumes.get(&c.id))
                .flatten()
                .cloned()
                .collect();
            let running = images_in_use(&images, running(), &running_volumes, None)
                .into_iter()
                .collect();
            drop(containers);
            // The pins as they are now, resolved against this list (a tag that moved moves its
            // pin), and the images that cannot come back.
            let pins = self.store.pins()?;
            let irreplaceable = settings
                .config
                .protect_irreplaceable
                .then(|| Irreplaceable {
                    sandbox_image: sandbox.clone(),
                });
            let protections = Protections::resolve(&images, &pins, irreplaceable.as_ref(), now);
            // Read after the runtime's lists: an intent the kubelet wrote before pulling an image
            // already listed is seen here; one written later is seen by the last look.
            let kubelet = KubeletView::read(settings.kubelet(), &images, settings.intent_age(now));
            in_use.extend(kubelet.pulling.iter().cloned());
            let listed = ListedImages::new(images);
            Ok((
                records,
                (listed, in_use, volumes, kubelet, protections),
                running,
            ))
        })
    }

    /// The sandbox image name: with `protect_irreplaceable`, the runtime's own answer (a
    /// failed or empty answer is logged at debug and falls back), else the configured
    /// `--pod-infra-container-image`.
    async fn sandbox_image(&self, settings: &Settings) -> Option<String> {
        let configured = settings
            .config
            .sandbox_image
            .clone()
            .filter(|s| !s.is_empty());
        if !settings.config.protect_irreplaceable {
            return configured;
        }
        match self.runtime.sandbox_image().await {
            Ok(Some(name)) => Some(name),
            Ok(None) => configured,
            Err(e) => {
                debug!(error = %e, "The runtime's status does not say its sandbox image: using the configured one");
                configured
            }
        }
    }

    /// Adds to `known` the image volumes of each running container it does not have yet: one
    /// ContainerStatus per such container (image volumes are seen only in a container's
    /// status mounts, as the kubelet's detectImages reads them; ListContainers does not carry
    /// mounts), each answer also kept for the next detects (detect's and the last look's
    /// alike). A container gone since the list (NotFound) is skipped: it mounts nothing any
    /// more, and one created since is listed and asked about by the last look. This is a
    /// deviation: kubelet master's detectImages fails the whole cycle on any ContainerStatus
    /// error, NotFound included (pkg/kubelet/images/image_gc_manager.go, `handleImageVolumes`);
    /// the test `gc::volumes::a_container_gone_before_its_status_is_skipped_...` states both.
    /// Any other failure fails the cycle with the kubelet's words, as a failed list does: GC
    /// never removes without knowing what runs.
    pub(super) async fn read_image_volumes(
        &self,
        containers: &[RuntimeContainer],
        known: &mut ImageVolumes,
    ) -> Result<usize, GcError> {
        let mut asked = 0;
        for container in containers {
            // Every container, whatever its state, as for a container's own image: an exited
            // container of a crash-looping pod restarts with the same image volumes.
            if known.contains_key(&container.id) {
                continue;
            }
            asked += 1;
            match self.runtime.container_usage(&container.id).await {
                Ok(usage) => {
                    self.volumes_seen()
                        .insert(container.id.clone(), usage.image_volumes.clone());
                    known.insert(container.id.clone(), usage.image_volumes);
                }
                Err(e) if e.code() == Some(RpcCode::NotFound) => {}
                Err(e) => return Err(runtime_error(CONTAINER_STATUS_OP)(e)),
            }
        }
        Ok(asked)
    }

    /// Observes the runtime and plans the detect at `now`: what a detect applies and a dry
    /// run applies to its copy, so both plan from the same rules. With `copy`, every record
    /// the merge reads is also put there (the dry run's copy; the fault hooks' snapshot).
    pub(super) async fn observe_and_plan(
        &self,
        settings: &Settings,
        now: UnixNanos,
        mut copy: Option<&mut BTreeMap<RecordKey, ImageRecord>>,
    ) -> Result<(Observed, DetectPlan), GcError> {
        let meta = self.store.meta_entries()?;
        let stored = |name: &str| meta.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let last_detect = stored(meta_keys::LAST_DETECT).map(UnixNanos);
        let watched = WatchHistory::from_meta(stored);
        let (records, (listed, in_use, volumes, mut kubelet, protections), running) =
            self.observe(settings, now).await?;
        // The rest never awaits: the plan (each pin and listed name parsed once, see `protect`).
        off_the_workers(|| {
            kubelet.mark_just_pulled(now, settings.config.policy.min_age);
            let input = DetectInput {
                last_detect,
                in_use: &in_use,
                used_at: &kubelet.used_at,
                pins: &settings.config.pins,
                now,
            };
            let records = records.inspect(|r| {
                if let (Some(copy), Ok(r)) = (copy.as_deref_mut(), r) {
                    copy.insert(r.key(), r.record);
                }
            });
            let mut plan = plan_detect(records, &listed, &input)?;
            // Names are written at detect only when they change (the store compares again inside
            // the write transaction): each difference goes straight into the batch, with the
            // sighting of its key when there is one (a new image's: one operation and one key).
            let mut names_writer = plan.batch.names_in_key_order();
            self.store
                .for_names_that_differ_in_key_order(listed.iter(), |key, names| {
                    names_writer.set(key, names);
                })?;
            // Pins expired for longer than the journal's max age go in the detect's transaction
            // (`migrations/0004_pins.md`).
            plan.batch.prune_expired_pins(now);
            // The use history: every image running containers use now, in the detect's
            // transaction (`migrations/0005_use_and_pull_history.md`).
            plan.batch.observe_uses(now, running);
            // The heartbeat (and a stretch found unwatched) in the detect's own transaction:
            // written every cycle, so every detect commits.
            let (watch, unwatched) = match self.watch_period {
                Some(period) => watched.after_detect(now, period),
                None => (
                    WatchHistory {
                        heartbeat: Some(now),
                        ..watched
                    },
                    None,
                ),
            };
            watch.write(&mut plan.batch);
            plan.watch = watch;
            plan.unwatched = unwatched;
            Ok(((listed, in_use, volumes, kubelet, protections), plan))
        })
    }

    pub(super) async fn detect_locked(
        &self,
        settings: &Settings,
        now: UnixNanos,
    ) -> Result<(DetectReport, CycleView), GcError> {
        let faults = fault_hooks();
        let mut existing = BTreeMap::new();
        let copy = faults.detect_snapshot().then_some(&mut existing);
        let ((listed, in_use, volumes, kubelet, protections), plan) =
            self.observe_and_plan(settings, now, copy).await?;
        // The rest never awaits: the write transaction, the warm and keep lookups.
        off_the_workers(|| {
            let mut plan = faults.blind_detect(plan, &existing, now);
            let pending: Vec<(RecordKey, EvictionNote)> = self
                .pending_evictions()
                .iter()
                .map(|(k, n)| (k.clone(), *n))
                .collect();
            for (key, note) in pending {
                if plan.batch.attribute_unlisted(&key, note) {
                    plan.removed = plan.removed.saturating_sub(1);
                }
            }
            let applied = self.store.apply_reporting(&plan.batch)?;
            let committed = applied.committed;
            // Committed: each note is spent. A key this detect did not find unlisted was listed
            // again (pulled back) or has no record left, so there is nothing to journal for it
            // (detect and GC share the cycle lock: no removal happens between them).
            self.pending_evictions().clear();
            self.report_clock(&plan, now);
            if let Some(gap) = plan.unwatched {
                info!(
                    from = %format_rfc3339(gap.from),
                    to = %format_rfc3339(gap.to),
                    "No detect watched the node between these times: MaxAge does not count them as unused time"
                );
            }
            if committed && plan.removed > 0 {
                info!(
                    count = plan.removed,
                    "Images gone from the runtime that imagekeeper did not remove: journaled as external removals"
                );
            }
            self.report_repulls(&applied.repulls);
            let external_removals = applied
                .journaled
                .into_iter()
                .filter(|(_, e)| e.remover == Remover::External)
                .collect();
            let report = DetectReport {
                records: plan.records,
                added: plan.added,
                removed: plan.removed,
                in_use: in_use.len(),
                committed,
                external_removals,
                repulls: applied.repulls,
            };
            let observed = (listed, in_use, volumes, kubelet, protections);
            let view = self.cycle_view(settings, now, observed, plan.watch)?;
            Ok((report, view))
        })
    }

    /// What the cycle keeps after its detect: the keys each keep rule holds, in the cycle's
    /// one order ([`Keeps`]; KEP-6053's skip reasons read it), and the listed images.
    fn cycle_view(
        &self,
        settings: &Settings,
        now: UnixNanos,
        (listed, in_use, volumes, kubelet, protections): Observed,
        watch: WatchHistory,
    ) -> Result<CycleView, GcError> {
        let (sets, _) =
            self.keep_sets(settings, &listed, &in_use, now, super::keeps::Share::Record)?;
        self.record_keeps(&listed, &protections, &sets);
        self.cluster_signals.note_listed(&listed);
        let protections = if fault_hooks().ignore_protections() {
            Protections::default()
        } else {
            protections
        };
        let keeps = Keeps {
            in_use: &in_use,
            sets: &sets,
            kubelet_pulling: &kubelet.pulling,
            kubelet_just_pulled: &kubelet.just_pulled,
            protections: &protections,
        };
        let protected = keeps.protected();
        let kept_by: BTreeMap<RecordKey, Verdict> = protected
            .iter()
            .filter_map(|key| keeps.kept_by(key).map(|why| (key.clone(), why)))
            .collect();
        Ok(CycleView {
            listed,
            watch,
            protected,
            kept_by,
            volumes,
        })
    }

    /// Marks the images one container uses, its image and its image volumes, as used at
    /// `now`, without waiting for detect (the agent calls this at a container's
    /// CONTAINER_CREATED_EVENT). One ContainerStatus, then one ImageStatus per image name to
    /// find its record key; a record detect has not seen yet is created, as a pull's mark
    /// does, so a GC between the event and the next detect keeps the image. Takes no cycle
    /// lock: a GC walking meanwhile sees the newer last_used in its last look. A container
    /// already gone, or an image the runtime does not have, marks nothing. Returns the keys
    /// marked.
    pub async fn mark_container_used(
        &self,
        container_id: &str,
        now: UnixNanos,
    ) -> Result<Vec<RecordKey>, GcError> {
        let usage = match self.runtime.container_usage(container_id).await {
            Ok(usage) => usage,
            Err(e) if e.code() == Some(RpcCode::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(runtime_error(CONTAINER_STATUS_OP)(e)),
        };
        // The container's image under its own runtime handler; image volumes under the
        // default one (a mount's ImageSpec names none).
        let image = (usage.image_id.as_str().to_string(), usage.runtime_handler);
        let volumes = usage.image_volumes.into_iter().map(|v| (v, String::new()));
        let names = std::iter::once(image)
            .chain(volumes)
            .filter(|(name, _)| !name.is_empty());
        let mut batch = Batch::new();
        let mut marked: Vec<RecordKey> = Vec::new();
        for (name, handler) in names {
            let found = self
                .runtime
                .image_status(&name, &handler)
                .await
                .map_err(runtime_error("get image status"))?;
            if let Some(image) = found {
                let key = image.record_key();
                if !marked.contains(&key) {
                    batch.mark_used(key.clone(), now, Some(image.size));
                    // The container starts: its use interval opens now, the next detect
                    // keeps it open or closes it.
                    batch.open_use(key.clone(), now);
                    marked.push(key);
                }
            }
        }
        self.store.apply(&batch)?;
        Ok(marked)
    }

    /// Logs (once per detect) and counts what a committed detect did about the clock: stamps
    /// in the future clamped to `now`, and a `last_detect` later than `now`.
    fn report_clock(&self, plan: &DetectPlan, now: UnixNanos) {
        if plan.clamped > 0 {
            warn!(
                count = plan.clamped,
                now = %format_rfc3339(now),
                tolerance = %go_duration(FUTURE_STAMP_TOLERANCE),
                "Clamped image records stamped in the future to now: the clock was ahead when they were written"
            );
            self.metrics.record_future_stamps_clamped(plan.clamped);
        }
        if let Some(from) = plan.clock_went_back_from {
            warn!(
                last_detect = %format_rfc3339(from),
                now = %format_rfc3339(now),
                "The clock went back since the last detect; last_detect follows it"
            );
            self.metrics.record_clock_went_back();
        }
    }

    /// Logs and counts the journal entries a commit marked re-pulled.
    fn report_repulls(&self, repulls: &[Repull]) {
        for repull in repulls {
            info!(
                image_id = repull.key.image_id.as_str(),
                removed_by = repull.remover.as_str(),
                reason = repull.reason_label(),
                delay_seconds = repull.delay.as_secs(),
                "An image came back after its removal"
            );
            self.metrics.repulls().record(repull);
        }
    }
}
