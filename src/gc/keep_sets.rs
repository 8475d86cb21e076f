//! The fleet's keeps on this node: the NodeKeepSets (a cluster-scoped custom resource,
//! `imagekeeper.io/v1alpha1`) whose node selector matches this node's labels, as the cluster's
//! watch last saw them (`keepSets`: the `cluster` module, feature `kube`, writes them; the
//! agent's keep-set loop reads them), and what this node reports of each
//! ([`KeepSetReport`]: the loop writes it, the cluster module publishes it as this node's
//! `KeepSetReport` object).
//!
//! A KeepSet in mode `pin` is carried into the node's database as ordinary pins, one per image
//! (the GC, `pins`, `inspect explain` and the runtime's `pinned` label treat them as any pin),
//! whose reason names the set: [`keep_set_reason`], `KeepSet/<name>` (then `: ` and the set's
//! own reason). [`keep_set_pin_changes`] is the whole rule from the sets to the pins table.
//! A KeepSet in mode `warm` pins nothing: its images are warm entries
//! ([`NodeKeepSets::warm_set`], origin `KeepSet/<name>`, until the set's lifetime), which the
//! warm loop pulls ahead within the disk budget (the warm plan's rule) and the GC keeps while
//! the set holds, as any warm entry.
//!
//! Invariants: a handle is shared (clones see one set); until the watch has listed the sets
//! once ([`NodeKeepSets::synced`]) nothing is reconciled, so a restart with the API server away
//! removes no pin a set wrote: the pins in the database (with the set's lifetime as their
//! `until`) hold until that lifetime ends. An operator's pin of the same image (a reason not
//! starting with `KeepSet/`) is never replaced or removed by a set, and the admin call refuses
//! an operator's reason that starts with `KeepSet/` ([`super::check_pin_request`]). Memory is
//! bounded: at most [`MAX_KEEPSETS`] sets are held, each name and image at most
//! [`super::bound_pods::MAX_IMAGE_NAME_BYTES`]; the images of one set are not capped here (the
//! pins table's own cap, `MAX_ACTIVE_PINS`, bounds what one node pins).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::model::{ImagePin, MAX_PIN_REASON_BYTES, PinKey, UnixNanos};
use crate::warm::{WarmEntry, WarmSet};

use super::watch_health::{WatchHealth, WatchSample};

/// The prefix of the reason of every pin a KeepSet wrote.
pub const KEEPSET_REASON_PREFIX: &str = "KeepSet/";

/// The most NodeKeepSets held for this node.
pub const MAX_KEEPSETS: usize = 1_024;

/// The most failures a report names per set (the count holds them all).
pub const MAX_REPORTED_FAILURES: usize = 10;

/// What a KeepSet does with its images (`spec.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeepSetMode {
    /// Pulled at once and runtime-pinned, never removed while the set holds.
    #[default]
    Pin,
    /// Pulled ahead within the disk budget and kept while the set holds (warm entries).
    Warm,
}

impl KeepSetMode {
    /// The mode as the CRD spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeepSetMode::Pin => "pin",
            KeepSetMode::Warm => "warm",
        }
    }
}

/// One KeepSet selecting this node, as the agent holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepSet {
    /// The object's name.
    pub name: String,
    /// The object's `metadata.generation` (the report says which it applied).
    pub generation: i64,
    /// The image names, as given (tags, digest references).
    pub images: Vec<String>,
    /// The end of the set's lifetime (`spec.until`, or creation plus `spec.duration`);
    /// `UnixNanos::NEVER`: none.
    pub until: UnixNanos,
    /// Between sets naming one image: the higher priority's lifetime and reason win.
    pub priority: i32,
    /// The set's own reason (`spec.reason`), may be empty.
    pub reason: String,
    /// Pin or warm.
    pub mode: KeepSetMode,
    /// The pull Secrets its pulls use (`spec.pullSecrets`), in the agent's own namespace.
    pub pull_secrets: Vec<String>,
}

impl KeepSet {
    /// Whether the set holds at `now`.
    pub fn active_at(&self, now: UnixNanos) -> bool {
        self.until == UnixNanos::NEVER || now < self.until
    }
}

/// What this node holds of one KeepSet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeepSetReport {
    /// The set's generation this report is of.
    pub generation: i64,
    /// The set's images.
    pub images: u64,
    /// Its images the runtime lists.
    pub present: u64,
    /// Its images the runtime lists as pinned.
    pub pinned: u64,
    /// Its images that could not be pulled or pinned.
    pub failed: u64,
    /// The runtime's size of its images present.
    pub bytes: u64,
    /// The first [`MAX_REPORTED_FAILURES`] failures: image and why.
    pub failures: Vec<(String, String)>,
    /// The set's lifetime has ended: nothing of it is held.
    pub expired: bool,
    /// The set's mode (a warm set's images are not runtime-pinned by the set).
    pub mode: KeepSetMode,
}

impl KeepSetReport {
    /// The set in force with at least one image (a set naming only workloads has none until
    /// they are read), nothing failed, and every image pinned (mode pin) or present (mode
    /// warm).
    pub fn ready(&self) -> bool {
        let held = match self.mode {
            KeepSetMode::Pin => self.pinned,
            KeepSetMode::Warm => self.present,
        };
        !self.expired && self.images > 0 && self.failed == 0 && held == self.images
    }
}

/// The reason of the pins `set` writes: `KeepSet/<name>`, then `: ` and the set's reason when
/// it has one, cut (at a character boundary) to the pins' reason bound.
pub fn keep_set_reason(set: &KeepSet) -> String {
    let mut reason = format!("{KEEPSET_REASON_PREFIX}{}", set.name);
    let own: String = set.reason.chars().filter(|c| !c.is_control()).collect();
    if !own.is_empty() {
        reason.push_str(": ");
        reason.push_str(&own);
    }
    if reason.len() > MAX_PIN_REASON_BYTES {
        let mut end = MAX_PIN_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// The set a pin's reason names, when a KeepSet wrote it.
pub fn keep_set_of_reason(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix(KEEPSET_REASON_PREFIX)?;
    Some(rest.split_once(": ").map_or(rest, |(name, _)| name))
}

/// What the pins table needs so that it holds exactly the pins of `sets` in force at `now`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinChanges {
    /// Pins to write (new, or whose lifetime or reason changed).
    pub put: Vec<(PinKey, ImagePin)>,
    /// KeepSet pins no set in force names any more.
    pub remove: Vec<PinKey>,
}

impl PinChanges {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.remove.is_empty()
    }
}

/// The rule from the NodeKeepSets selecting this node to the pins table: each image of each
/// set in mode pin in force at `now` is pinned (default runtime handler) until the set's
/// lifetime ends, with [`keep_set_reason`]; an image named by several sets takes the higher priority's set, then
/// the longer lifetime (none is longest), then the first name. `existing` is the pins table;
/// a pin of an operator (a reason without the KeepSet prefix) is left as it is, and a KeepSet
/// pin no set in force names is removed. A pin that stays with its set keeps its creation time.
pub fn keep_set_pin_changes(
    sets: &[KeepSet],
    existing: &[(PinKey, ImagePin)],
    now: UnixNanos,
) -> PinChanges {
    let wanted: BTreeMap<PinKey, &KeepSet> = owners(
        sets.iter()
            .filter(|s| s.mode == KeepSetMode::Pin && s.active_at(now)),
    )
    .into_iter()
    .map(|(image, set)| (PinKey::new(image, ""), set))
    .collect();
    let existing: BTreeMap<&PinKey, &ImagePin> = existing.iter().map(|(k, p)| (k, p)).collect();
    let mut changes = PinChanges::default();
    for (key, set) in &wanted {
        let reason = keep_set_reason(set);
        match existing.get(key) {
            Some(pin) if keep_set_of_reason(&pin.reason).is_none() => {}
            Some(pin) if pin.until == set.until && pin.reason == reason => {}
            Some(pin) if keep_set_of_reason(&pin.reason) == Some(set.name.as_str()) => {
                changes.put.push((
                    key.clone(),
                    ImagePin {
                        created_at: pin.created_at,
                        until: set.until,
                        reason,
                    },
                ));
            }
            _ => changes.put.push((
                key.clone(),
                ImagePin {
                    created_at: now,
                    until: set.until,
                    reason,
                },
            )),
        }
    }
    for (key, pin) in existing {
        if keep_set_of_reason(&pin.reason).is_some() && !wanted.contains_key(key) {
            changes.remove.push(key.clone());
        }
    }
    changes
}

/// Each image `sets` name, with the set that holds it ([`wins`] between sets naming it).
fn owners<'a>(sets: impl Iterator<Item = &'a KeepSet>) -> BTreeMap<&'a str, &'a KeepSet> {
    let mut owners: BTreeMap<&str, &KeepSet> = BTreeMap::new();
    for set in sets {
        for image in &set.images {
            match owners.get(image.as_str()) {
                Some(held) if !wins(set, held) => {}
                _ => {
                    owners.insert(image.as_str(), set);
                }
            }
        }
    }
    owners
}

/// Whether `set` takes an image from `held`: higher priority, then longer lifetime, then
/// the first name.
fn wins(set: &KeepSet, held: &KeepSet) -> bool {
    let lifetime = |s: &KeepSet| {
        if s.until == UnixNanos::NEVER {
            i64::MAX
        } else {
            s.until.0
        }
    };
    (set.priority, lifetime(set), std::cmp::Reverse(&set.name))
        > (held.priority, lifetime(held), std::cmp::Reverse(&held.name))
}

/// The future of one pull Secret's read.
pub type PullSecretRead =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send + 'static>>;

/// The reader of the pull Secrets KeepSets name (the cluster module's, feature `kube`, in the
/// agent's own namespace): a Secret's manifest as JSON, parsed by the agent as any pull
/// Secret, or why it cannot be read (never its content).
pub trait PullSecretSource: Send + Sync + std::fmt::Debug {
    /// Reads the Secret `name`.
    fn read(&self, name: &str) -> PullSecretRead;
}

/// The warm entries of the sets in mode warm: each image once, from the set that
/// [`keep_set_pin_changes`]' order gives it to (priority, then lifetime, then name), until that
/// set's lifetime, origin `KeepSet/<name>`; no size hint (the node's history knows the size, or
/// the plan pulls it only below the low threshold).
pub fn warm_entries(sets: &BTreeMap<String, KeepSet>) -> Vec<WarmEntry> {
    owners(sets.values().filter(|s| s.mode == KeepSetMode::Warm))
        .into_iter()
        .map(|(image, set)| WarmEntry {
            image: image.to_owned(),
            runtime_handler: String::new(),
            until: (set.until != UnixNanos::NEVER).then_some(set.until),
            lifetime: None,
            size_hint: None,
            origin: format!("{KEEPSET_REASON_PREFIX}{}", set.name),
        })
        .collect()
}

/// The NodeKeepSets selecting this node and this node's reports of them.
#[derive(Clone, Debug, Default)]
pub struct NodeKeepSets {
    sets: Arc<RwLock<BTreeMap<String, KeepSet>>>,
    /// The images of the sets in mode warm, as warm entries (rebuilt with the sets; shared,
    /// so a reader takes the Arc, not a copy of the entries).
    warm: Arc<RwLock<Arc<WarmSet>>>,
    /// Told when the sets change (the keep-set loop reconciles then).
    changed: Arc<tokio::sync::Notify>,
    /// Told when the warm sets' entries change (the warm loop plans then).
    changed_for_warm: Arc<tokio::sync::Notify>,
    /// Whether the watch has listed the sets (and read this node's labels) once.
    synced: Arc<tokio::sync::watch::Sender<bool>>,
    /// The reports, by set name; the publisher waits on changes.
    reports: Arc<tokio::sync::watch::Sender<BTreeMap<String, KeepSetReport>>>,
    /// The watch's health (`refused`: sets not held because [`MAX_KEEPSETS`] were).
    health: Arc<WatchHealth>,
    /// The reader of the sets' pull Secrets, once the cluster module gave one.
    secrets: Arc<RwLock<Option<Arc<dyn PullSecretSource>>>>,
}

impl NodeKeepSets {
    /// Replaces every set at once (a complete list, or this node's labels changed).
    pub fn replace(&self, sets: BTreeMap<String, KeepSet>) {
        let mut sets = sets;
        if sets.len() > MAX_KEEPSETS {
            let refused = sets.len() - MAX_KEEPSETS;
            while sets.len() > MAX_KEEPSETS {
                sets.pop_last();
            }
            for _ in 0..refused {
                self.health.refuse();
            }
        }
        let warm = WarmSet::new(warm_entries(&sets));
        let changed = {
            let mut held = self.sets.write().unwrap_or_else(|e| e.into_inner());
            let changed = *held != sets;
            *held = sets;
            changed
        };
        let warm_changed = {
            let mut held = self.warm.write().unwrap_or_else(|e| e.into_inner());
            let changed = **held != warm;
            if changed {
                *held = Arc::new(warm);
            }
            changed
        };
        if warm_changed {
            self.changed_for_warm.notify_one();
        }
        let first = !*self.synced.borrow();
        self.synced.send_replace(true);
        if changed || first {
            self.changed.notify_one();
        }
    }

    /// The sets held, in name order.
    pub fn sets(&self) -> Vec<KeepSet> {
        self.sets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The images of the sets in mode warm as warm entries (the shared set: no copy of its
    /// entries, so the GC's last look may ask it per victim).
    pub fn warm_set(&self) -> Arc<WarmSet> {
        Arc::clone(&self.warm.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The pull Secrets of the set `name`, if it is held (a lookup, not a copy of the sets).
    pub fn pull_secrets_of(&self, name: &str) -> Vec<String> {
        self.sets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|set| set.pull_secrets.clone())
            .unwrap_or_default()
    }

    /// Resolves at the next change of the warm sets' entries (one waiter: the warm loop).
    pub async fn changed_for_warm(&self) {
        self.changed_for_warm.notified().await;
    }

    /// Whether the watch has given the sets once.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once the watch has given the sets once.
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// Resolves at the next change of the sets (one waiter: the keep-set loop).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Writes this node's reports (by set name); told to the publisher when they differ.
    pub fn set_reports(&self, reports: BTreeMap<String, KeepSetReport>) {
        self.reports.send_if_modified(|held| {
            if *held == reports {
                return false;
            }
            *held = reports;
            true
        });
    }

    /// The reports, watched.
    pub fn reports(&self) -> tokio::sync::watch::Receiver<BTreeMap<String, KeepSetReport>> {
        self.reports.subscribe()
    }

    /// Gives the reader of the sets' pull Secrets.
    pub fn set_secret_source(&self, source: Arc<dyn PullSecretSource>) {
        *self.secrets.write().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// The reader of the sets' pull Secrets, if any.
    pub fn secret_source(&self) -> Option<Arc<dyn PullSecretSource>> {
        self.secrets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The watch's health, for its loop.
    pub fn health(&self) -> Arc<WatchHealth> {
        self.health.clone()
    }

    /// The watch's state, for the metrics; `None` until a watch started.
    pub fn watch_sample(&self) -> Option<WatchSample> {
        self.health.sample(self.is_synced())
    }
}

#[cfg(test)]
#[path = "keep_sets_tests.rs"]
mod tests;
