//! The fake's containerd Images service (`containerd.services.images.v1.Images`: List, Get,
//! Update) on the same socket as its CRI, as containerd serves both: every name of every image
//! the fake holds (its repo tags and repo digests) with the labels tests and Updates set. It
//! lets the runtime pins run in-process against a runtime that keeps a label the CRI does not
//! carry (containerd 1.7.3 to 1.7.9, containerd issue 9328) or one that does (1.7.10 and
//! later: [`super::FakeRuntime::list_pin_labels_as_pinned`]).
//!
//! Its calls are counted, failed and hung as the CRI's are ([`super::FakeRuntime::hang`]
//! with `Images.List`, `Images.Get`, `Images.Update`).
//!
//! Invariants: an Update changes only the `labels.<key>` paths its mask names (an empty value
//! removes the label), as containerd's metadata store does; a name the fake does not hold is
//! NotFound; the namespace header is not checked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tonic::{Request, Response, Status};

use super::super::containerd_images::proto::containerd::services::images::v1 as images_v1;
use super::super::containerd_images::proto::containerd::types::Descriptor;
use super::{FakeState, enter_state, lock_state};
use crate::model::RuntimeImage;
use images_v1::images_server::Images;

/// containerd's label that makes its CRI list an image as pinned.
const PINNED_LABEL: &str = "io.cri-containerd.pinned";

/// The fake's Images service over the fake's state.
#[derive(Clone)]
pub(super) struct FakeImages {
    pub(super) state: Arc<Mutex<FakeState>>,
}

/// Each name containerd would store `image` under: its repo tags and repo digests.
fn names(image: &RuntimeImage) -> impl Iterator<Item = &String> {
    image.repo_tags.iter().chain(image.repo_digests.iter())
}

fn image_proto(
    name: &str,
    image: &RuntimeImage,
    labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> images_v1::Image {
    images_v1::Image {
        name: name.to_owned(),
        labels: labels
            .get(name)
            .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        target: Some(Descriptor {
            media_type: "application/vnd.oci.image.index.v1+json".to_owned(),
            digest: image.id.as_str().to_owned(),
            size: i64::try_from(image.size).unwrap_or(i64::MAX),
            annotations: Default::default(),
        }),
    }
}

/// Whether one of `image`'s names carries the pinned label (`pinned`).
pub(super) fn labelled_pinned(
    image: &RuntimeImage,
    labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> bool {
    names(image).any(|name| {
        labels
            .get(name)
            .and_then(|l| l.get(PINNED_LABEL))
            .is_some_and(|v| v == "pinned")
    })
}

#[tonic::async_trait]
impl Images for FakeImages {
    async fn get(
        &self,
        request: Request<images_v1::GetImageRequest>,
    ) -> Result<Response<images_v1::GetImageResponse>, Status> {
        enter_state(&self.state, "Images.Get").await?;
        let name = request.into_inner().name;
        let state = lock_state(&self.state);
        let image = state
            .images
            .iter()
            .find(|i| names(i).any(|n| *n == name))
            .map(|i| image_proto(&name, i, &state.image_labels));
        match image {
            Some(image) => Ok(Response::new(images_v1::GetImageResponse {
                image: Some(image),
            })),
            None => Err(Status::not_found(format!("image {name:?}: not found"))),
        }
    }

    async fn list(
        &self,
        _request: Request<images_v1::ListImagesRequest>,
    ) -> Result<Response<images_v1::ListImagesResponse>, Status> {
        enter_state(&self.state, "Images.List").await?;
        let state = lock_state(&self.state);
        let images = state
            .images
            .iter()
            .flat_map(|i| names(i).map(move |n| (n, i)))
            .map(|(name, image)| image_proto(name, image, &state.image_labels))
            .collect();
        Ok(Response::new(images_v1::ListImagesResponse { images }))
    }

    async fn update(
        &self,
        request: Request<images_v1::UpdateImageRequest>,
    ) -> Result<Response<images_v1::UpdateImageResponse>, Status> {
        let request = request.into_inner();
        let given = request
            .image
            .ok_or_else(|| Status::invalid_argument("no image"))?;
        enter_state(&self.state, "Images.Update").await?;
        let mut state = lock_state(&self.state);
        let Some(image) = state
            .images
            .iter()
            .find(|i| names(i).any(|n| *n == given.name))
            .cloned()
        else {
            return Err(Status::not_found(format!(
                "image {:?}: not found",
                given.name
            )));
        };
        let paths = request.update_mask.map(|m| m.paths).unwrap_or_default();
        let labels = state.image_labels.entry(given.name.clone()).or_default();
        for path in paths {
            let Some(key) = path.strip_prefix("labels.") else {
                return Err(Status::invalid_argument(format!(
                    "the fake updates labels only, not {path:?}"
                )));
            };
            match given.labels.get(key).filter(|v| !v.is_empty()) {
                Some(value) => labels.insert(key.to_owned(), value.clone()),
                None => labels.remove(key),
            };
        }
        let updated = image_proto(&given.name, &image, &state.image_labels);
        Ok(Response::new(images_v1::UpdateImageResponse {
            image: Some(updated),
        }))
    }
}
