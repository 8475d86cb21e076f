//! One test wrapper around a runtime, instead of one near-identical `ImageRuntime` impl per
//! test: [`Hooked`] forwards every call to its inner runtime (`forward_image_runtime!`) and
//! runs the test's [`Hooks`] around it (park a call until the test releases it, act on the node right after a call,
//! show other disk numbers). A test implements only the hooks it needs.

use std::future::Future;

use imagekeeper::cri::{CriError, ImageRuntime};
use imagekeeper::forward_image_runtime;
use imagekeeper::model::ImageFsStats;
use imagekeeper::runtime::forward::Forward;

/// What a test does around the calls. `method` is the CRI method's name (`ListImages`,
/// `ImageStatus`, `PullImage`, `RemoveImage`, `ImageFsInfo`, `ListContainers`,
/// `ContainerStatus`, `Status`); `arg` is the image or container the call is about, empty for
/// a list.
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

impl<R: ImageRuntime, H: Hooks> Forward for Hooked<R, H> {
    type Inner = R;

    fn inner(&self) -> &R {
        &self.inner
    }

    async fn around<T, Fut>(
        &self,
        method: &'static str,
        arg: &str,
        call: impl FnOnce() -> Fut + Send,
    ) -> Result<T, CriError>
    where
        T: Send,
        Fut: Future<Output = Result<T, CriError>> + Send,
    {
        self.hooks.before(method, arg).await;
        let answer = call().await;
        self.hooks.after(method, arg, answer.is_ok()).await;
        answer
    }

    fn image_fs(&self, stats: ImageFsStats) -> ImageFsStats {
        self.hooks.image_fs(stats)
    }
}

forward_image_runtime!(impl[R: ImageRuntime, H: Hooks] for Hooked<R, H>);
