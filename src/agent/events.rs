//! The container events watcher: when the runtime serves CRI GetContainerEvents (evented PLEG,
//! KEP-3386), each CONTAINER_CREATED_EVENT marks the container's image and image volumes used
//! at once ([`ImageGcManager::mark_container_used`]), so an image the kubelet has just started
//! a container from is in use before the next detect.
//!
//! Invariants: a runtime that answers Unimplemented (containerd 1.6: "method
//! GetContainerEvents not implemented") ends the watcher, logged once at info, and the detect
//! period alone applies, as before; a stream that breaks or ends is opened again after a
//! backoff (1 s doubling up to [`MAX_RECONNECT_DELAY`], reset once a stream delivers an
//! event); a failed mark is logged and the stream goes on (the next detect sees the container
//! anyway). Timers are tokio's, so tests drive the backoff with paused time. With
//! `containerEvents = off` ([`ContainerEvents::Off`]) it never subscribes: on containerd 1.7
//! and CRI-O 1.26-1.27 the events go to one subscriber, and beside a kubelet running evented
//! PLEG (KEP-3386) that must be the kubelet.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::config::ContainerEvents;
use super::loops::Backoff;
use crate::clock::Clock;
use crate::gc::ImageGcManager;
use crate::model::{ContainerEventKind, RecordKey};
use crate::runtime::{AgentRuntime, EventStream};
use crate::runtime::{CriError, ImageRuntime, RpcCode};

/// The longest wait before the stream is opened again.
pub(crate) const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(30);

/// What the watcher did, for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventsNote {
    /// A stream is open.
    Connected,
    /// A created container's images were marked used.
    Marked {
        /// The container the event named.
        container_id: String,
        /// The records marked used.
        keys: Vec<RecordKey>,
    },
    /// Marking a created container's images failed.
    MarkFailed {
        /// The container the event named.
        container_id: String,
        /// Why the mark failed.
        error: String,
    },
    /// The runtime does not serve GetContainerEvents: the watcher ends.
    Unsupported,
    /// The watcher is off (`containerEvents = off`): it ends without subscribing.
    Off,
    /// The stream could not be opened, broke or ended; the next attempt is in `retry_in`.
    Broken {
        /// The wait before the next attempt (doubling up to 30 s).
        retry_in: Duration,
    },
}

/// Why one open stream stopped.
enum StreamEnd {
    Stop,
    Unsupported,
    Broken,
}

/// Watches the runtime's container events until `stop` turns true or the runtime turns out
/// not to serve them (see the module's invariants); with `mode` off it returns at once,
/// without subscribing. `note` hears of every step.
pub async fn watch_container_events<E: AgentRuntime, R: ImageRuntime>(
    client: &E,
    gc: &ImageGcManager<R>,
    clock: &dyn Clock,
    mode: ContainerEvents,
    mut stop: watch::Receiver<bool>,
    mut note: impl FnMut(EventsNote),
) {
    if mode == ContainerEvents::Off {
        info!("Not watching the runtime's container events (containerEvents = off)");
        note(EventsNote::Off);
        return;
    }
    let mut backoff = Backoff::new(MAX_RECONNECT_DELAY);
    loop {
        if *stop.borrow() {
            return;
        }
        let opened = tokio::select! {
            opened = client.container_events() => opened,
            _ = stop.changed() => return,
        };
        let end = match opened {
            Ok(mut stream) => {
                note(EventsNote::Connected);
                debug!("Watching the runtime's container events");
                loop {
                    let next = tokio::select! {
                        next = stream.next() => next,
                        _ = stop.changed() => break StreamEnd::Stop,
                    };
                    match next {
                        Some(Ok(event)) => {
                            backoff.reset();
                            if event.kind != ContainerEventKind::Created {
                                continue;
                            }
                            let id = event.container_id;
                            match gc.mark_container_used(&id, clock.now()).await {
                                Ok(keys) => {
                                    debug!(container_id = %id, marked = keys.len(), "Created container: marked its images used");
                                    note(EventsNote::Marked {
                                        container_id: id,
                                        keys,
                                    });
                                }
                                Err(e) => {
                                    warn!(container_id = %id, error = %e, "Could not mark a created container's images used; the next detect will");
                                    note(EventsNote::MarkFailed {
                                        container_id: id,
                                        error: e.to_string(),
                                    });
                                }
                            }
                        }
                        Some(Err(e)) if unsupported(&e) => break StreamEnd::Unsupported,
                        Some(Err(e)) => {
                            warn!(error = %e, "The container event stream broke");
                            break StreamEnd::Broken;
                        }
                        None => {
                            warn!("The runtime ended the container event stream");
                            break StreamEnd::Broken;
                        }
                    }
                }
            }
            Err(e) if unsupported(&e) => StreamEnd::Unsupported,
            Err(e) => {
                debug!(error = %e, "Could not open the container event stream");
                StreamEnd::Broken
            }
        };
        match end {
            StreamEnd::Stop => return,
            StreamEnd::Unsupported => {
                info!(
                    "The runtime does not serve container events (GetContainerEvents); new containers' images are seen at each detect"
                );
                note(EventsNote::Unsupported);
                return;
            }
            StreamEnd::Broken => {
                let retry_in = backoff.next_delay();
                note(EventsNote::Broken { retry_in });
                tokio::select! {
                    _ = tokio::time::sleep(retry_in) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

fn unsupported(e: &CriError) -> bool {
    e.code() == Some(RpcCode::Unimplemented)
}
