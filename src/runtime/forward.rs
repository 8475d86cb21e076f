//! The one forwarding [`ImageRuntime`](super::ImageRuntime) impl of the test and bench
//! wrappers (feature `testing`, and the crate's own tests): a wrapper (a runtime that passes
//! every call on to an inner runtime, adding something around it) implements [`Forward`] and
//! invokes [`forward_image_runtime!`](crate::forward_image_runtime), which writes the
//! `ImageRuntime` impl. The unit tests, the integration tests and the benches all use it.
//!
//! Invariants: the macro implements every method of `ImageRuntime`, each passed through
//! [`Forward::around`] with its CRI method's name and then to the same method of the inner
//! runtime, so a wrapper never falls back to a trait default its inner runtime overrides; a
//! new trait method is one edit here. The inner call is made inside `around`'s closure, so
//! whatever `around` does first happens before the call is even created.

use std::future::Future;

use super::{CriError, ImageRuntime};
use crate::model::ImageFsStats;

/// What a wrapper adds around the calls it forwards to [`Forward::inner`].
pub trait Forward: Send + Sync {
    /// The runtime every call goes to.
    type Inner: ImageRuntime;

    /// The wrapped runtime, which answers every call the wrapper does not change.
    fn inner(&self) -> &Self::Inner;

    /// Runs `call` (the inner runtime's answer to `method`, the CRI method's name: `ListImages`,
    /// `ImageStatus`, `PullImage`, `RemoveImage`, `ImageFsInfo`, `ListContainers`,
    /// `ContainerStatus`, `Status`; `arg` is the image or container the call is about, empty
    /// for a list). By default, only the call.
    fn around<T, Fut>(
        &self,
        method: &'static str,
        arg: &str,
        call: impl FnOnce() -> Fut + Send,
    ) -> impl Future<Output = Result<T, CriError>> + Send
    where
        T: Send,
        Fut: Future<Output = Result<T, CriError>> + Send,
    {
        let _ = (method, arg);
        call()
    }

    /// The image filesystem's numbers as the caller sees them (by default, the inner
    /// runtime's).
    fn image_fs(&self, stats: ImageFsStats) -> ImageFsStats {
        stats
    }
}

/// `forward_image_runtime!(impl[GENERICS] for WRAPPER)`: `ImageRuntime` for `WRAPPER` (which
/// implements [`Forward`]), every method forwarded through [`Forward::around`].
#[macro_export]
macro_rules! forward_image_runtime {
    (impl[$($generics:tt)*] for $wrapper:ty) => {
        impl<$($generics)*> $crate::runtime::ImageRuntime for $wrapper {
            async fn list_images(
                &self,
            ) -> Result<Vec<$crate::model::RuntimeImage>, $crate::runtime::CriError>
            {
                use $crate::runtime::forward::Forward as _;
                self.around("ListImages", "", || self.inner().list_images())
                    .await
            }

            async fn list_image_list(
                &self,
            ) -> Result<$crate::model::ImageList, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("ListImages", "", || self.inner().list_image_list())
                    .await
            }

            async fn image_status(
                &self,
                image: &str,
                runtime_handler: &str,
            ) -> Result<Option<$crate::model::RuntimeImage>, $crate::runtime::CriError>
            {
                use $crate::runtime::forward::Forward as _;
                self.around("ImageStatus", image, || {
                    self.inner().image_status(image, runtime_handler)
                })
                .await
            }

            async fn pull_image(
                &self,
                image: &str,
                runtime_handler: &str,
                credentials: Option<&$crate::model::PullCredentials>,
            ) -> Result<String, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("PullImage", image, || {
                    self.inner().pull_image(image, runtime_handler, credentials)
                })
                .await
            }

            async fn pull_image_for(
                &self,
                spec: &$crate::model::PullSpec,
                credentials: Option<&$crate::model::PullCredentials>,
            ) -> Result<String, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("PullImage", &spec.image, || {
                    self.inner().pull_image_for(spec, credentials)
                })
                .await
            }

            async fn remove_image(
                &self,
                image: &str,
                runtime_handler: &str,
            ) -> Result<(), $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("RemoveImage", image, || {
                    self.inner().remove_image(image, runtime_handler)
                })
                .await
            }

            async fn image_fs_stats(
                &self,
            ) -> Result<$crate::model::ImageFsStats, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                let stats = self
                    .around("ImageFsInfo", "", || self.inner().image_fs_stats())
                    .await?;
                Ok(self.image_fs(stats))
            }

            async fn list_containers(
                &self,
            ) -> Result<Vec<$crate::model::RuntimeContainer>, $crate::runtime::CriError>
            {
                use $crate::runtime::forward::Forward as _;
                self.around("ListContainers", "", || self.inner().list_containers())
                    .await
            }

            async fn container_usage(
                &self,
                container_id: &str,
            ) -> Result<$crate::model::ContainerUsage, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("ContainerStatus", container_id, || {
                    self.inner().container_usage(container_id)
                })
                .await
            }

            async fn sandbox_image(&self) -> Result<Option<String>, $crate::runtime::CriError> {
                use $crate::runtime::forward::Forward as _;
                self.around("Status", "", || self.inner().sandbox_image())
                    .await
            }
        }
    };
}
