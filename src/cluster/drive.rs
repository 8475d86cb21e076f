//! The one loop every cluster signals' watch runs: kube-rs's watcher with its default backoff,
//! each event handed to the watch's own state, its health ([`WatchHealth`]) kept, and a failure
//! logged once per change of state (a failing watch keeps the last set; the watcher retries).
//! The API server's probe ([`ApiReach`], `reach.rs`) speaks for a watch whose connection has
//! gone silent: when the probe finds the API server away the watch is marked failing, and when
//! it is back the watch is started anew (a relist), not left on a connection that may wait
//! minutes for its read timeout.
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

use super::reach::ApiReach;
use crate::gc::WatchHealth;

/// The objects a (re)list asks for at a time (kube-rs's default is 500, client-go's too): a
/// page is held whole, as typed objects, while the watch reads it, and the heap's peak at a
/// list of 2,000 ReplicaSets left the agent's resident memory megabytes higher after it
/// (`scripts/bench --signals`); a list costs a request more per 100 objects.
pub(super) const LIST_PAGE_SIZE: u32 = 100;

/// Watches `api` with `config` (its page size [`LIST_PAGE_SIZE`]) until the task is dropped, handing each event to `apply`;
/// `what` names the watched objects in the log ("the DaemonSets"); `reach` is the API
/// server's probe.
pub(super) async fn drive<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    health: Arc<WatchHealth>,
    mut reach: ApiReach,
    mut apply: impl FnMut(Event<K>),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    health.started();
    let config = config.page_size(LIST_PAGE_SIZE);
    let mut failing = false;
    loop {
        // A new watcher starts with a list: what changed while the API server was away.
        let mut events =
            std::pin::pin!(watcher::watcher(api.clone(), config.clone()).default_backoff());
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                now = reach.changed() => {
                    if now.away {
                        health.failed();
                        if !failing {
                            warn!("The API server does not answer: the watch of {what} keeps the last set");
                            failing = true;
                        }
                        continue;
                    }
                    info!("The API server answers again: listing {what} anew");
                    break;
                }
            };
            let Some(event) = event else { return };
            match event {
                Ok(event) => {
                    let listed = matches!(event, Event::InitDone);
                    if is_answer(&event) {
                        health.answered();
                        if failing {
                            info!("Watching {what} again");
                            failing = false;
                        }
                    }
                    apply(event);
                    // The list's pages and objects are freed: their pages go back now, not
                    // at the next detect's end (minutes on).
                    if listed {
                        crate::memory::release_free_memory();
                    }
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
