//! What the GC manager is configured with ([`GcConfig`]) and the immutable `Settings` a cycle
//! runs with (the configuration plus the kubelet pull records reader it implies).
//!
//! Invariants: `Settings` is replaced whole by `ImageGcManager::reconfigure`, never changed in
//! place; a reload that keeps the kubelet root directory keeps its reader (so a file it warned
//! about once is not warned about again).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::kubelet::{DEFAULT_INTENT_MAX_AGE, IntentAge, PullRecordsReader};
use crate::model::{JournalRetention, UnixNanos};

use crate::gc::pins::PinPatterns;
use crate::gc::{GcOrder, GcPolicy};
use crate::warm::WarmSet;

/// Everything the GC manager is configured with.
// Not #[non_exhaustive]: tests/ and benches/ build it by struct update (`..GcConfig::default()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcConfig {
    /// The thresholds, ages and budgets (the kubelet's ImageGCPolicy and imagekeeper's own).
    pub policy: GcPolicy,
    /// The space walk's order (`imageGCPolicy`): the kubelet's, or the adaptive one.
    pub order: GcOrder,
    /// The sandbox (pause) image name (`--pod-infra-container-image`); always in use. With
    /// `protect_irreplaceable`, the runtime's own answer (verbose CRI Status) comes first.
    pub sandbox_image: Option<String>,
    /// Keep the images that cannot come back: the runtime's sandbox image and images with
    /// no repo digest (`protectIrreplaceable`; the agent's default is on, this struct's
    /// `Default` leaves it off so library users and tests opt in).
    pub protect_irreplaceable: bool,
    /// Image names and patterns GC never removes (`--pin`).
    pub pins: PinPatterns,
    /// The kubelet's root directory, whose `image_manager/` pull records are read (never
    /// written): intents keep the images they name, pulled records' times count as uses.
    /// `None` (or empty) reads nothing.
    pub kubelet_root_dir: Option<PathBuf>,
    /// How old (file mtime) a kubelet pull intent may be and still keep its image; `None`
    /// takes [`crate::kubelet::DEFAULT_INTENT_MAX_AGE`].
    pub kubelet_intent_max_age: Option<Duration>,
    /// How long and how many removals the eviction journal keeps, set on the store when
    /// `Some` (by `new` and `reconfigure`); `None` keeps the store's (the retention the file
    /// records, else the default).
    pub journal_retention: Option<JournalRetention>,
    /// The warm set: images GC, prune and DeleteUnusedImages keep while an entry in force
    /// names them (`crate::warm`).
    pub warm: WarmSet,
}

impl GcConfig {
    /// The age past which a kubelet pull intent read at `now` keeps nothing: the configured
    /// maximum, else [`DEFAULT_INTENT_MAX_AGE`] (the GC and `doctor` judge intents alike).
    pub fn intent_age(&self, now: UnixNanos) -> IntentAge {
        IntentAge::new(
            now,
            self.kubelet_intent_max_age
                .unwrap_or(DEFAULT_INTENT_MAX_AGE),
        )
    }
}

/// What one cycle runs with: the configuration and the kubelet pull records reader of its
/// `kubelet_root_dir`. Immutable; replaced whole by [`ImageGcManager::reconfigure`].
#[derive(Debug)]
pub(super) struct Settings {
    pub(super) config: GcConfig,
    pub(super) kubelet: Option<Arc<PullRecordsReader>>,
}

impl Settings {
    /// The settings of `config`, reusing `previous`'s reader when the directory is the same
    /// (so a file it warned about once is not warned about again after a reload).
    pub(super) fn new(config: GcConfig, previous: Option<&Settings>) -> Settings {
        let root = config
            .kubelet_root_dir
            .clone()
            .filter(|p| !p.as_os_str().is_empty());
        let kubelet = match (previous, root) {
            (_, None) => None,
            (Some(previous), Some(root))
                if previous.config.kubelet_root_dir.as_deref() == Some(root.as_path()) =>
            {
                previous.kubelet.clone()
            }
            (_, Some(root)) => Some(Arc::new(PullRecordsReader::new(&root))),
        };
        Settings { config, kubelet }
    }

    pub(super) fn kubelet(&self) -> Option<&PullRecordsReader> {
        self.kubelet.as_deref()
    }

    /// The age past which a kubelet pull intent read at `now` keeps nothing.
    pub(super) fn intent_age(&self, now: UnixNanos) -> IntentAge {
        self.config.intent_age(now)
    }
}
