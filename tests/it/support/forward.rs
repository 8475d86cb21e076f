//! The one forwarding `ImageRuntime` impl of the test and bench wrappers: a wrapper (a runtime
//! that passes every call on to an inner runtime, adding something around it) implements
//! [`Forward`] and invokes [`forward_image_runtime!`], which writes the `ImageRuntime` impl.
//! Shared with the benches through `#[path]` (benches/figures/main.rs mounts this file at the
//! same `crate::support::forward` path).
//!
//! Invariants: the macro implements every method of `ImageRuntime`, each passed through
//! [`Forward::around`] with its CRI method's name and then to the same method of the inner
//! runtime, so a wrapper never falls back to a trait default its inner runtime overrides; a
//! new trait method is one edit here. The inner call is made inside `around`'s closure, so
//! whatever `around` does first happens before the call is even created.

use std::future::Future;

use imagekeeper::cri::{CriError, ImageRuntime};
use imagekeeper::model::ImageFsStats;

/// What a wrapper adds around the calls it forwards to [`Forward::inner`].
pub trait Forward: Send + Sync {
    /// The runtime every call goes to.
    type Inner: ImageRuntime;

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
macro_rules! forward_image_runtime {
    (impl[$($generics:tt)*] for $wrapper:ty) => {
        impl<$($generics)*> ::imagekeeper::cri::ImageRuntime for $wrapper {
            async fn list_images(
                &self,
            ) -> Result<Vec<::imagekeeper::model::RuntimeImage>, ::imagekeeper::cri::CriError>
            {
                use $crate::support::forward::Forward as _;
                self.around("ListImages", "", || self.inner().list_images())
                    .await
            }

            async fn list_image_list(
                &self,
            ) -> Result<::imagekeeper::model::ImageList, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("ListImages", "", || self.inner().list_image_list())
                    .await
            }

            async fn image_status(
                &self,
                image: &str,
                runtime_handler: &str,
            ) -> Result<Option<::imagekeeper::model::RuntimeImage>, ::imagekeeper::cri::CriError>
            {
                use $crate::support::forward::Forward as _;
                self.around("ImageStatus", image, || {
                    self.inner().image_status(image, runtime_handler)
                })
                .await
            }

            async fn pull_image(
                &self,
                image: &str,
                runtime_handler: &str,
                credentials: Option<&::imagekeeper::model::PullCredentials>,
            ) -> Result<String, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("PullImage", image, || {
                    self.inner().pull_image(image, runtime_handler, credentials)
                })
                .await
            }

            async fn pull_image_for(
                &self,
                spec: &::imagekeeper::model::PullSpec,
                credentials: Option<&::imagekeeper::model::PullCredentials>,
            ) -> Result<String, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("PullImage", &spec.image, || {
                    self.inner().pull_image_for(spec, credentials)
                })
                .await
            }

            async fn remove_image(
                &self,
                image: &str,
                runtime_handler: &str,
            ) -> Result<(), ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("RemoveImage", image, || {
                    self.inner().remove_image(image, runtime_handler)
                })
                .await
            }

            async fn image_fs_stats(
                &self,
            ) -> Result<::imagekeeper::model::ImageFsStats, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                let stats = self
                    .around("ImageFsInfo", "", || self.inner().image_fs_stats())
                    .await?;
                Ok(self.image_fs(stats))
            }

            async fn list_containers(
                &self,
            ) -> Result<Vec<::imagekeeper::model::RuntimeContainer>, ::imagekeeper::cri::CriError>
            {
                use $crate::support::forward::Forward as _;
                self.around("ListContainers", "", || self.inner().list_containers())
                    .await
            }

            async fn container_usage(
                &self,
                container_id: &str,
            ) -> Result<::imagekeeper::model::ContainerUsage, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("ContainerStatus", container_id, || {
                    self.inner().container_usage(container_id)
                })
                .await
            }

            async fn sandbox_image(&self) -> Result<Option<String>, ::imagekeeper::cri::CriError> {
                use $crate::support::forward::Forward as _;
                self.around("Status", "", || self.inner().sandbox_image())
                    .await
            }
        }
    };
}

pub(crate) use forward_image_runtime;
