//! The DaemonSets' pod templates, as the cluster signals' DaemonSet watch last saw them: each
//! DaemonSet's `namespace/name` and the images its current template names. A DaemonSet that
//! owns a pod bound to this node runs its template here next: during a rollout the template is
//! the new revision, whose pod replaces the one running now, so its images are needed on this
//! node (kept, and pulled ahead by the warm loop) before the old pod is gone.
//!
//! Invariants: memory is bounded whatever the API server sends: at most [`MAX_DAEMONSETS`]
//! DaemonSets (a cluster runs tens), each held as its image names within the bound pods'
//! bounds; a DaemonSet past the cap is not held and is counted. A relist replaces the whole
//! set once complete. Which DaemonSets matter to this node is decided by the pods bound to it
//! (their controller owner), never here.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use crate::gc::watch_health::WatchHealth;

/// The most DaemonSets held.
pub const MAX_DAEMONSETS: usize = 4_096;

/// DaemonSets by `namespace/name`, each with its template's images.
#[derive(Clone, Debug, Default)]
pub(super) struct DaemonSetTemplates {
    templates: Arc<RwLock<BTreeMap<String, Vec<String>>>>,
    /// The watch's health; `refused` counts DaemonSets not held because [`MAX_DAEMONSETS`]
    /// were.
    pub(super) health: Arc<WatchHealth>,
}

impl DaemonSetTemplates {
    /// Sets `daemonset`'s template images (already bounded); returns whether they changed.
    pub(super) fn set(&self, daemonset: String, images: Vec<String>) -> bool {
        let mut held = self.write();
        if images.is_empty() {
            held.remove(&daemonset).is_some()
        } else if held.len() >= MAX_DAEMONSETS && !held.contains_key(&daemonset) {
            self.health.refused.fetch_add(1, Ordering::Relaxed);
            false
        } else {
            held.insert(daemonset, images.clone()) != Some(images)
        }
    }

    /// Removes `daemonset`; returns whether it was held.
    pub(super) fn remove(&self, daemonset: &str) -> bool {
        self.write().remove(daemonset).is_some()
    }

    /// Replaces every DaemonSet (a relist): the first [`MAX_DAEMONSETS`] by name. Returns the
    /// DaemonSets whose images changed (added, removed or different).
    pub(super) fn replace_all(&self, mut next: BTreeMap<String, Vec<String>>) -> Vec<String> {
        next.retain(|_, images| !images.is_empty());
        while next.len() > MAX_DAEMONSETS {
            next.pop_last();
            self.health.refused.fetch_add(1, Ordering::Relaxed);
        }
        let mut held = self.write();
        let mut changed: Vec<String> = held
            .iter()
            .filter(|(name, images)| next.get(*name) != Some(images))
            .map(|(name, _)| name.clone())
            .collect();
        changed.extend(
            next.keys()
                .filter(|name| !held.contains_key(*name))
                .cloned(),
        );
        *held = next;
        self.health.synced.store(true, Ordering::Relaxed);
        changed
    }

    /// The template images of `daemonset`, if held.
    pub(super) fn images_of(&self, daemonset: &str) -> Option<Vec<String>> {
        self.read().get(daemonset).cloned()
    }

    /// How many DaemonSets are held, how many were refused, and whether they were listed.
    pub(super) fn counts(&self) -> (u64, u64, bool) {
        (
            self.read().len() as u64,
            self.health.refused.load(Ordering::Relaxed),
            self.health.synced.load(Ordering::Relaxed),
        )
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Vec<String>>> {
        self.templates
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Vec<String>>> {
        self.templates
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
