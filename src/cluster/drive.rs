//! The one loop every cluster signals' watch runs: kube-rs's watcher with its default backoff,
//! each event handed to the watch's own state, its health ([`WatchHealth`]) kept, and a failure
//! logged once per change of state (a failing watch keeps the last set; the watcher retries).
//!
//! Invariants: the loop only reads (list and watch); it ends only when the task is dropped.

use futures_util::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::sync::Arc;
use tracing::{info, warn};

use crate::gc::WatchHealth;

/// Watches `api` with `config` until the task is dropped, handing each event to `apply`;
/// `what` names the watched objects in the log ("the DaemonSets").
pub(super) async fn drive<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    health: Arc<WatchHealth>,
    mut apply: impl FnMut(Event<K>),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    health.started();
    let mut failing = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                health.answered();
                if failing {
                    info!("Watching {what} again");
                    failing = false;
                }
                apply(event);
            }
            Err(e) => {
                health.failed();
                if !failing {
                    warn!(error = %e, "The watch of {what} failed: the last set holds, retrying");
                    failing = true;
                }
            }
        }
    }
}
