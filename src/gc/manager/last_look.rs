//! The last look and the removal: right before each RemoveImage the manager lists the
//! containers again (with the image volumes of those started since detect) and re-reads the
//! victim's record, the pulls in flight, the warm set, the kubelet's pull records and the pins,
//! with no await between that reading and the call; then it removes the image and its record,
//! journaling the removal in the same transaction.
//!
//! Invariants: a victim gone from the cycle's list, used, pulled, pinned or warm is kept,
//! counted (`gc_victims_rescued_total{why}`, and KEP-6053's skipped images) and protected for the rest of the cycle; a runtime
//! that cannot list its containers fails the cycle; a record is deleted only after the runtime
//! confirms the removal, and a failed deletion is left to the next detect to journal.

use tracing::{info, warn};

use crate::model::{EvictionNote, ImageLike, RuntimeContainer, RuntimeImage, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::{Batch, StoredRecord};

use crate::gc::GcError;
use crate::gc::attempt::DeletionReason;
use crate::gc::detect::{container_uses, volume_uses};
use crate::gc::fault_hooks::fault_hooks;
use crate::gc::kubelet::{intent_names, pulled_since};
use crate::gc::metrics::RescueReason;
use crate::gc::protect::PinIndex;

use super::{CycleView, GcReport, ImageGcManager, Removal, Settings, runtime_error};

impl<R: ImageRuntime> ImageGcManager<R> {
    /// `pins` (just read) with their index: the one kept from the look before when they are
    /// the same pins, else a new one, kept for the next look.
    fn pin_index(
        &self,
        pins: Vec<(crate::model::PinKey, crate::model::ImagePin)>,
    ) -> std::sync::Arc<PinIndex> {
        let mut kept = self
            .pin_index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.pins() != pins.as_slice() {
            *kept = std::sync::Arc::new(PinIndex::new(pins));
        }
        std::sync::Arc::clone(&kept)
    }
}

/// How many times the last look lists the containers again because new ones appeared while
/// it asked their status, before it keeps the victim instead.
const LAST_LOOK_ROUNDS: usize = 4;

/// A long cycle logs its progress every this many removals.
const PROGRESS_EVERY: u64 = 25;

impl<R: ImageRuntime> ImageGcManager<R> {
    /// The last look at one victim, right before its RemoveImage: whether a container (the
    /// runtime's list, taken now, with the image volumes of its running containers: detect's,
    /// plus one ContainerStatus for each container started since), a pull in flight, a kubelet
    /// pull intent or a kubelet pulled record newer than its last use (both files read now), or
    /// a newer mark on its record keeps it; so does the absence of its image from the cycle's
    /// list. A kept victim is counted, logged, and protected for the rest of the cycle. A runtime
    /// that cannot list its containers fails the cycle: GC never removes without knowing
    /// what runs. (The list is taken per removal, not per batch: it costs a few milliseconds
    /// beside a RemoveImage, and closes the window of the batch's earlier removals.)
    pub(super) async fn rescue(
        &self,
        settings: &Settings,
        victim: &StoredRecord,
        view: &mut CycleView,
        free_time: UnixNanos,
    ) -> Result<bool, GcError> {
        let faults = fault_hooks();
        if faults.skip_last_look() {
            return Ok(false);
        }
        // The victim's image as this cycle's detect listed it. A record the list did not
        // hold (a pull marked it after the list; the image may be gone or not yet landed) is
        // no candidate: its tags are unknown, so a pull in flight by name cannot be matched,
        // and the bytes it would free are not known to exist. (Found by the simulator.)
        let Some(image) = view.listed.get(&victim.key).map(|i| i.to_image()) else {
            return Ok(self.kept(victim, view, RescueReason::Gone));
        };
        let Some(containers) = self.containers_for_last_look(view).await? else {
            // Containers keep appearing: keep the victim rather than decide on a list that
            // may be stale.
            return Ok(self.kept(victim, view, RescueReason::Container));
        };
        // From here to the RemoveImage call nothing awaits: the record, the pulls in flight
        // and the kubelet's pull records are read at the last moment.
        let mounted = containers
            .iter()
            .filter_map(|c| view.volumes.get(&c.id))
            .flatten()
            .any(|name| volume_uses(name, &image));
        let why = if mounted || containers.iter().any(|c| container_uses(c, &image)) {
            Some(RescueReason::Container)
        } else {
            self.needed_now(settings, victim, &image, free_time)?
        };
        Ok(match why {
            Some(why) => self.kept(victim, view, why),
            None => false,
        })
    }

    /// The containers, listed until a list shows no container whose image volumes are
    /// unknown: asking a new container's status awaits, and a container created during that
    /// call would be missed by the list before it, so the decision follows a list with no
    /// await after it. (Found by the simulator.) `None` when containers keep appearing for
    /// `LAST_LOOK_ROUNDS` lists.
    async fn containers_for_last_look(
        &self,
        view: &mut CycleView,
    ) -> Result<Option<Vec<RuntimeContainer>>, GcError> {
        for _ in 0..LAST_LOOK_ROUNDS {
            let containers = self
                .runtime
                .list_containers()
                .await
                .map_err(runtime_error("list containers"))?;
            if self
                .read_image_volumes(&containers, &mut view.volumes)
                .await?
                == 0
            {
                return Ok(Some(containers));
            }
        }
        Ok(None)
    }

    /// What needs the victim now besides a container, read with no await: a pull in flight,
    /// a warm entry, a kubelet pull intent or pulled record newer than its last use, a pin,
    /// or a newer mark on its record (or its record gone).
    fn needed_now(
        &self,
        settings: &Settings,
        victim: &StoredRecord,
        image: &RuntimeImage,
        free_time: UnixNanos,
    ) -> Result<Option<RescueReason>, GcError> {
        let faults = fault_hooks();
        let kubelet = settings.kubelet();
        Ok(if self.in_flight.protects(image) {
            Some(RescueReason::Pulling)
        } else if (settings.config.warm.keeps(image, free_time).is_some()
            || self
                .node_keep_sets
                .warm_set()
                .keeps(image, free_time)
                .is_some())
            && !faults.ignore_warm()
        {
            Some(RescueReason::Warm)
        } else if kubelet.is_some_and(|r| intent_names(r, image, settings.intent_age(free_time))) {
            Some(RescueReason::KubeletPulling)
        } else if kubelet
            .is_some_and(|r| pulled_since(r, image, victim.record.last_used, free_time))
        {
            Some(RescueReason::KubeletPulled)
        } else if !faults.ignore_protections()
            && self
                .pin_index(self.store.pins()?)
                .pinned_at(image, free_time)
        {
            Some(RescueReason::Pinned)
        } else {
            match self.store.get(&victim.key)? {
                None => Some(RescueReason::Gone),
                Some(now) if now.last_used > victim.record.last_used => Some(RescueReason::Used),
                Some(_) => None,
            }
        })
    }

    /// Keeps a victim the last look rescued: logged, counted, and protected for the rest of
    /// the cycle. Returns true.
    fn kept(&self, victim: &StoredRecord, view: &mut CycleView, why: RescueReason) -> bool {
        info!(
            image_id = victim.key.image_id.as_str(),
            runtime_handler = victim.key.runtime_handler.as_str(),
            why = why.as_str(),
            "Kept an image GC had chosen: it is needed now"
        );
        self.metrics.record_rescue(why);
        self.metrics.attempts().skipped(why.skip_reason(), 1);
        view.protected.insert(victim.key.clone());
        true
    }

    /// Removes one image through the runtime, then its record, journaling the removal with
    /// `note` in the same transaction. A failure is logged and counted and returned as its
    /// message.
    pub(super) async fn remove(
        &self,
        victim: &StoredRecord,
        note: EvictionNote,
        report: &mut GcReport,
    ) -> Result<(), String> {
        let reason = note.reason;
        let id = victim.key.image_id.as_str();
        let handler = victim.key.runtime_handler.as_str();
        info!(
            image_id = id,
            size = victim.record.size,
            runtime_handler = handler,
            reason = reason.as_str(),
            "Removing image to free bytes"
        );
        let kep_reason = DeletionReason::of_removal(reason);
        if let Err(e) = self.runtime.remove_image(id, handler).await {
            self.metrics.record_remove_failure();
            self.metrics.attempts().deletion(kep_reason, false);
            warn!(image_id = id, error = %e, "Failed to remove image");
            return Err(e.to_string());
        }
        let mut batch = Batch::new();
        batch.evict(victim.key.clone(), note);
        if let Err(e) = self.store.apply(&batch) {
            // The image is gone; the next detect removes its record and journals it with this
            // note (imagekeeper's removal, not an external one).
            warn!(image_id = id, error = %e, "Removed image but could not delete its record");
            self.pending_evictions().insert(victim.key.clone(), note);
        }
        self.metrics.record_removal(reason);
        self.metrics.attempts().deletion(kep_reason, true);
        let so_far = self.metrics.cycle_removed(victim.record.size);
        if so_far.is_multiple_of(PROGRESS_EVERY) {
            info!(
                removed = so_far,
                freed = report.freed.saturating_add(victim.record.size),
                "Image garbage collection in progress"
            );
        }
        report.freed = report.freed.saturating_add(victim.record.size);
        report.removed.push(Removal {
            key: victim.key.clone(),
            size: victim.record.size,
            reason,
            evicted_before: None,
        });
        Ok(())
    }
}
