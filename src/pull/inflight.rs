//! Pulls in flight: the images a pull through imagekeeper is fetching right now, shared by the
//! image manager (which registers them) and the GC manager (which keeps them).
//!
//! Invariants: a pull is registered by its image name before the CRI PullImage call and stays
//! registered, with the pulled image's id once the runtime reports it, until its mark
//! (`mark_used`) is committed or the pull failed; the registration is a guard, so an early
//! return or a cancelled pull cannot leave a stale entry. A name protects every image it
//! resolves to (`reference::image_matches`), an id the image with that id under any runtime
//! handler.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::model::{ImageId, ImageLike};

use crate::reference::image_matches;

#[derive(Debug, Default)]
struct Registry {
    next: u64,
    pulls: BTreeMap<u64, InFlightPull>,
}

#[derive(Clone, Debug)]
struct InFlightPull {
    image: String,
    id: Option<ImageId>,
}

/// The registry of pulls in flight. Cheap to clone; clones share the registry.
#[derive(Clone, Debug, Default)]
pub struct PullsInFlight {
    inner: Arc<Mutex<Registry>>,
}

/// One registered pull; dropping it ends the registration.
#[derive(Debug)]
pub struct InFlightGuard {
    registry: PullsInFlight,
    number: u64,
}

impl PullsInFlight {
    /// A tracker with no pull in flight.
    pub fn new() -> PullsInFlight {
        PullsInFlight::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a pull of `image` (the name as given to PullImage).
    pub fn register(&self, image: &str) -> InFlightGuard {
        let mut registry = self.lock();
        let number = registry.next;
        registry.next += 1;
        registry.pulls.insert(
            number,
            InFlightPull {
                image: image.to_owned(),
                id: None,
            },
        );
        InFlightGuard {
            registry: self.clone(),
            number,
        }
    }

    /// How many pulls are in flight.
    pub fn len(&self) -> usize {
        self.lock().pulls.len()
    }

    /// Whether no pull is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a pull in flight protects `image`: one registered under a name that resolves to
    /// it, or whose pulled image has its id.
    pub fn protects(&self, image: &impl ImageLike) -> bool {
        self.lock().pulls.values().any(|p| {
            p.id.as_ref().is_some_and(|id| id.as_str() == image.id())
                || image_matches(&p.image, image)
        })
    }

    /// Whether a pull in flight has pulled an image with this id.
    pub fn protects_id(&self, id: &ImageId) -> bool {
        self.lock()
            .pulls
            .values()
            .any(|p| p.id.as_ref() == Some(id))
    }
}

impl InFlightGuard {
    /// Records the pulled image's id (the runtime has it now; its mark is not committed yet).
    pub fn pulled(&self, id: &ImageId) {
        if let Some(pull) = self.registry.lock().pulls.get_mut(&self.number) {
            pull.id = Some(id.clone());
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.registry.lock().pulls.remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RuntimeImage;

    fn busybox() -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new("sha256:b"),
            repo_tags: vec!["docker.io/library/busybox:1.35".into()],
            ..RuntimeImage::default()
        }
    }

    #[test]
    fn a_registered_pull_protects_its_image_by_name_then_by_id_until_dropped() {
        let pulls = PullsInFlight::new();
        let untagged = RuntimeImage {
            id: ImageId::new("sha256:b"),
            ..RuntimeImage::default()
        };
        assert!(!pulls.protects(&busybox()));
        let guard = pulls.register("busybox:1.35");
        assert!(pulls.protects(&busybox()));
        assert!(!pulls.protects(&untagged));
        guard.pulled(&ImageId::new("sha256:b"));
        assert!(pulls.protects(&untagged));
        assert!(pulls.protects_id(&ImageId::new("sha256:b")));
        drop(guard);
        assert!(!pulls.protects(&busybox()));
        assert!(pulls.is_empty());
    }
}
