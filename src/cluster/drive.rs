//! The one loop every cluster signals' watch runs: kube-rs's watcher with its default backoff,
//! each event handed to the watch's own state, its health ([`WatchHealth`]) kept, and a failure
//! logged once per change of state (a failing watch keeps the last set; the watcher retries).
//!
//! Invariants: the loop only reads (list and watch); it ends only when the task is dropped.
//! Only what the API server sent counts as an answer: the watcher's `Init`, which it yields
//! before each (re)list is even asked for, does not end a failure (else a refused list, say
//! RBAC's forbidden, would log "again" and the failure anew at every retry).

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
                if is_answer(&event) {
                    health.answered();
                    if failing {
                        info!("Watching {what} again");
                        failing = false;
                    }
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

/// Whether `event` carries what the API server answered (a listed object, the list's end, a
/// change), not the watcher's own start of a (re)list.
fn is_answer<K>(event: &Event<K>) -> bool {
    !matches!(event, Event::Init)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn only_what_the_api_server_sent_ends_a_failure_not_the_watchers_start_of_a_relist() {
        let cases: [(Event<Node>, bool); 5] = [
            (Event::Init, false),
            (Event::InitApply(Node::default()), true),
            (Event::InitDone, true),
            (Event::Apply(Node::default()), true),
            (Event::Delete(Node::default()), true),
        ];
        for (event, answer) in cases {
            assert_eq!(is_answer(&event), answer, "{event:?}");
        }
    }
}
