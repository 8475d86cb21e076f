//! Pin patterns: images whose tags or digests match are never collected, whatever the runtime
//! reports (containerd 1.6 before 1.6.22 and 1.7 before 1.7.3 never reports `pinned`). Patterns follow CRI-O's pinned_images: an
//! exact name, or a name ending in `*` that matches every name starting with what precedes it.

use serde::{Deserialize, Serialize};

use crate::model::ImageLike;

/// A set of pin patterns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinPatterns {
    patterns: Vec<String>,
}

impl PinPatterns {
    /// The patterns `patterns`.
    pub fn new(patterns: Vec<String>) -> PinPatterns {
        PinPatterns { patterns }
    }

    /// Whether there is no pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns, as given.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether `name` (a tag or digest reference) matches a pattern.
    pub fn matches_name(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
    }

    /// Whether the image is pinned by the runtime or by a pattern. With no pattern its names
    /// are not read (detect asks this of every listed image: at 100k, a walk through the
    /// list's names for nothing).
    pub fn pins(&self, image: &impl ImageLike) -> bool {
        image.pinned()
            || (!self.patterns.is_empty()
                && image
                    .repo_tags()
                    .chain(image.repo_digests())
                    .any(|n| self.matches_name(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RuntimeImage;

    #[test]
    fn exact_and_prefix_patterns() {
        let pins = PinPatterns::new(vec![
            "registry.k8s.io/pause:3.9".into(),
            "quay.io/gpu/*".into(),
        ]);
        let cases = [
            ("registry.k8s.io/pause:3.9", true),
            ("registry.k8s.io/pause:3.10", false),
            ("quay.io/gpu/driver:1", true),
            ("quay.io/gpux/driver:1", false),
        ];
        for (name, want) in cases {
            assert_eq!(pins.matches_name(name), want, "{name}");
        }
        let image = RuntimeImage {
            repo_digests: vec!["quay.io/gpu/driver@sha256:ab".into()],
            ..RuntimeImage::default()
        };
        assert!(pins.pins(&image));
        assert!(PinPatterns::default().pins(&RuntimeImage {
            pinned: true,
            ..RuntimeImage::default()
        }));
    }
}
