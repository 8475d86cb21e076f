//! Test only: the pod spec the watches' tests put in their objects' templates, one container per
//! image name.

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// A pod spec with one container of each of `images`.
pub(crate) fn pod_spec(images: &[&str]) -> PodSpec {
    PodSpec {
        containers: images
            .iter()
            .map(|i| Container {
                image: Some((*i).to_owned()),
                ..Container::default()
            })
            .collect(),
        ..PodSpec::default()
    }
}
