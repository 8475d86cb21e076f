//! One test wrapper around a runtime, instead of one near-identical `ImageRuntime` impl per
//! test: [`Hooked`] forwards every call to its inner runtime and runs the test's [`Hooks`]
//! around it (park a call until the test releases it, act on the node right after a call,
//! show other disk numbers). A test implements only the hooks it needs.

use std::future::Future;

use imagekeeper::cri::{CriError, ImageRuntime};
use imagekeeper::model::{
    ContainerUsage, ImageFsStats, PullCredentials, PullSpec, RuntimeContainer, RuntimeImage,
};

/// What a test does around the calls. `method` is the CRI method's name (`ListImages`,
/// `ImageStatus`, `PullImage`, `RemoveImage`, `ImageFsInfo`, `ListContainers`,
/// `ContainerStatus`); `arg` is the image or container the call is about, empty for a list.
pub(crate) trait Hooks: Send + Sync {
    /// Before the call reaches the inner runtime.
    fn before(&self, method: &'static str, arg: &str) -> impl Future<Output = ()> + Send {
        let _ = (method, arg);
        std::future::ready(())
    }

    /// After the inner runtime answered (`ok`: whether it succeeded), before the caller sees it.
    fn after(&self, method: &'static str, arg: &str, ok: bool) -> impl Future<Output = ()> + Send {
        let _ = (method, arg, ok);
        std::future::ready(())
    }

    /// The image filesystem's numbers as the caller sees them.
    fn image_fs(&self, stats: ImageFsStats) -> ImageFsStats {
        stats
    }
}

/// `inner` with `hooks` around every call.
#[derive(Clone, Default)]
pub(crate) struct Hooked<R, H> {
    pub inner: R,
    pub hooks: H,
}

impl<R: ImageRuntime, H: Hooks> Hooked<R, H> {
    async fn call<T, Fut>(
        &self,
        method: &'static str,
        arg: &str,
        call: impl FnOnce() -> Fut,
    ) -> Result<T, CriError>
    where
        Fut: Future<Output = Result<T, CriError>>,
    {
        self.hooks.before(method, arg).await;
        let answer = call().await;
        self.hooks.after(method, arg, answer.is_ok()).await;
        answer
    }
}

impl<R: ImageRuntime, H: Hooks> ImageRuntime for Hooked<R, H> {
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        self.call("ListImages", "", || self.inner.list_images())
            .await
    }

    async fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        self.call("ImageStatus", image, || {
            self.inner.image_status(image, runtime_handler)
        })
        .await
    }

    async fn pull_image(
        &self,
        image: &str,
        runtime_handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        self.call("PullImage", image, || {
            self.inner.pull_image(image, runtime_handler, credentials)
        })
        .await
    }

    async fn pull_image_for(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        self.call("PullImage", &spec.image, || {
            self.inner.pull_image_for(spec, credentials)
        })
        .await
    }

    async fn remove_image(&self, image: &str, runtime_handler: &str) -> Result<(), CriError> {
        self.call("RemoveImage", image, || {
            self.inner.remove_image(image, runtime_handler)
        })
        .await
    }

    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        let stats = self
            .call("ImageFsInfo", "", || self.inner.image_fs_stats())
            .await?;
        Ok(self.hooks.image_fs(stats))
    }

    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        self.call("ListContainers", "", || self.inner.list_containers())
            .await
    }

    async fn container_usage(&self, container_id: &str) -> Result<ContainerUsage, CriError> {
        self.call("ContainerStatus", container_id, || {
            self.inner.container_usage(container_id)
        })
        .await
    }
}
