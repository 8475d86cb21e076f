//! Recording a pull's outcome in the store, for [`ImageManager`]: a failure's next backoff
//! (the kubelet's `backOff.Next`) with its message, or a success's image record, names and
//! pull together with the expired backoff entries' removal (`backOff.GC`), each in one
//! transaction under the manager's backoff lock, run off the async threads. A write that
//! fails is logged and does not change the pull's result.

use super::{
    BackoffStore, ImageManager, PullError, PullRuntime, PullWrite, PulledImage, StoreFailure,
};
use crate::model::{BackoffEntry, ImageNames, RecordKey, UnixNanos};

impl<R: PullRuntime, S: BackoffStore> ImageManager<R, S> {
    /// `backOff.Next` and the previous-error message, in one transaction.
    pub(super) async fn record_failure(&self, key: String, err: &PullError) {
        let policy = self.policy;
        let store = self.store.clone();
        let lock = self.backoff_lock.clone();
        let now = self.clock.now();
        let last_error = format!("{}: {}", err.reason(), err.message());
        let written = self
            .blocking(move || {
                let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let prev = store.backoff(&key)?;
                let next: BackoffEntry = policy.next(prev.as_ref(), now, last_error);
                store.apply(&PullWrite {
                    put_backoff: vec![(key, next)],
                    ..PullWrite::default()
                })
            })
            .await;
        if let Err(e) = written {
            tracing::error!(error = %e, "Recording the image pull backoff failed");
        }
    }

    /// The pulled image's record, and `backOff.GC`, in one transaction.
    pub(super) async fn record_success(
        &self,
        record: RecordKey,
        names: Option<ImageNames>,
        now: UnixNanos,
        size: Option<u64>,
        pulled: PulledImage,
    ) {
        let policy = self.policy;
        let store = self.store.clone();
        let lock = self.backoff_lock.clone();
        let written = self
            .blocking(move || {
                let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let entries = store.backoff_entries()?;
                store.apply(&PullWrite {
                    mark_used: Some((record, now, size)),
                    names,
                    pulled: Some(pulled),
                    put_backoff: Vec::new(),
                    remove_backoff: policy.expired_keys(&entries, now),
                })
            })
            .await;
        match written {
            Ok(repulls) => {
                for repull in &repulls {
                    tracing::info!(
                        image_id = repull.key.image_id.as_str(),
                        removed_by = repull.remover.as_str(),
                        reason = repull.reason_label(),
                        delay_seconds = repull.delay.as_secs(),
                        "Pulled an image again after its removal"
                    );
                    self.repulls.record(repull);
                }
            }
            Err(e) => tracing::error!(error = %e, "Recording the pulled image failed"),
        }
    }

    /// Runs a blocking store call off the async threads.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, StoreFailure> + Send + 'static,
    ) -> Result<T, StoreFailure> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(StoreFailure::Task)?
    }
}
