//! Kubernetes Events on the Node object (`imagekeeper run --events`), what an operator sees in
//! `kubectl describe node`: one Event per GC cycle that removed something (counts, bytes and
//! the largest images, not one Event per image), a failed GC cycle as the kubelet says it (the
//! image GC manager's `FreeDiskSpaceFailed` / `InvalidDiskCapacity` at every such failure,
//! pkg/kubelet/images/image_gc_manager.go `GarbageCollect`, and `ImageGCFailed` with the
//! error's text from the second failed cycle in a row on, pkg/kubelet/kubelet.go
//! `StartGarbageCollection`; imagekeeper's own rules' failures under names of their own,
//! `FreeInodesFailed` and `ImageBudgetNotMet`), the record store
//! turning unhealthy, warm set entries that do not fit, and `imagekeeper doctor`'s conflicts
//! found at start.
//!
//! [`NodeEvents`] decides what to say and hands it to an [`EventSink`]; it imports nothing of
//! Kubernetes. The sink that talks to the API server, [`KubeEventSink`] (feature `kube`, the
//! only code that imports kube-rs), publishes through kube-rs's Events recorder, which keeps
//! a repeating Event to one series (a PATCH of its count) instead of a new object each time.
//! That recorder's key is the reason, action and object, not the note (kube-runtime 5.0.0,
//! `EventKey`): one recorder for every note folded a FreeDiskSpaceFailed with new numbers into
//! the first one's series, its note left stale (seen on the lab cluster). So the sink keeps one
//! recorder per reason and note: the same message again is one series; a failure whose message
//! carries changing numbers (FreeDiskSpaceFailed's usage and bytes freed) is a new Event when
//! they change, as the kubelet's are.
//!
//! Invariants: publishing never blocks a GC cycle nor fails it: events go through a bounded
//! queue to one task (a full queue drops the event with one warning per drop run); an API
//! server error is logged, never retried in a loop; without the feature or without in-cluster
//! credentials the agent logs once and runs without Events.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::format::format_size;
use crate::gc::GcReport;

/// How many images a GC Event names (the largest first).
pub(crate) const EVENT_TOP_IMAGES: usize = 3;

/// The severity of an Event (`kubectl describe`'s Type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEventType {
    /// Something the agent did (images removed).
    Normal,
    /// Something that needs an operator: a failed GC cycle, a kubelet config conflict, a warm
    /// image that does not fit, an unhealthy store.
    Warning,
}

/// One Event on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// Normal or Warning.
    pub type_: NodeEventType,
    /// PascalCase, at most 128 characters (`kubectl describe`'s Reason).
    pub reason: &'static str,
    /// What was done (events.k8s.io/v1 `action`).
    pub action: &'static str,
    /// The message, at most 1 kB.
    pub note: String,
}

/// Where [`NodeEvents`] sends what it has to say.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Queues `event`; never blocks.
    fn publish(&self, event: NodeEvent);
}

/// The longest note an Event may carry (events.k8s.io/v1: 1 kB).
const MAX_NOTE_BYTES: usize = 1024;

/// What the agent says on the node, and to which sink (none: Events are off).
#[derive(Debug, Default)]
pub struct NodeEvents {
    sink: Option<Box<dyn EventSink>>,
    store_unhealthy_said: AtomicBool,
    /// The last GC cycle failed (kubelet.go's `prevImageGCFailed`).
    gc_failed_before: AtomicBool,
}

impl NodeEvents {
    /// Events to `sink`.
    pub fn new(sink: Box<dyn EventSink>) -> NodeEvents {
        NodeEvents {
            sink: Some(sink),
            ..NodeEvents::default()
        }
    }

    /// No Events.
    pub fn off() -> NodeEvents {
        NodeEvents::default()
    }

    /// Whether Events go to a sink (false after [`NodeEvents::off`]).
    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// A GC cycle ended: one Event if it removed images, one if it failed.
    pub(crate) fn gc_cycle(&self, report: &GcReport) {
        let Some(sink) = &self.sink else { return };
        if !report.removed.is_empty() {
            let mut largest: Vec<_> = report.removed.iter().collect();
            largest.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.key.cmp(&b.key)));
            let named: Vec<String> = largest
                .iter()
                .take(EVENT_TOP_IMAGES)
                .map(|r| format!("{} ({})", r.key.image_id.short(), format_size(r.size)))
                .collect();
            let more = report.removed.len().saturating_sub(EVENT_TOP_IMAGES);
            let mut note = format!(
                "Removed {} image{}, freed {} bytes ({}): {}",
                report.removed.len(),
                if report.removed.len() == 1 { "" } else { "s" },
                report.freed,
                format_size(report.freed),
                named.join(", ")
            );
            if more > 0 {
                note.push_str(&format!(" and {more} more"));
            }
            sink.publish(NodeEvent {
                type_: NodeEventType::Normal,
                reason: "ImageGarbageCollected",
                action: "GarbageCollect",
                note: truncate(note),
            });
        }
        let Some(error) = &report.error else {
            self.gc_failed_before.store(false, Ordering::Relaxed);
            return;
        };
        let note = truncate(error.to_string());
        // What the image GC manager itself says of this failure, at every one of them.
        if let Some(reason) = error.event_reason() {
            sink.publish(NodeEvent {
                type_: NodeEventType::Warning,
                reason,
                action: "GarbageCollect",
                note: note.clone(),
            });
        }
        // kubelet.go StartGarbageCollection: "Only create an event for repeated failures".
        if self.gc_failed_before.swap(true, Ordering::Relaxed) {
            sink.publish(NodeEvent {
                type_: NodeEventType::Warning,
                reason: "ImageGCFailed",
                action: "GarbageCollect",
                note,
            });
        }
    }

    /// One conflict of `imagekeeper doctor` found at start (`run --kubelet-config`): one
    /// Warning, `KubeletConfigConflict`, naming the check, what conflicts and the fix. The
    /// agent hands each conflicting finding here (`NodeEvents::doctor_conflicts`, in `agent`,
    /// so this module does not import the doctor).
    pub(crate) fn kubelet_config_conflict(&self, check: &str, message: &str, fix: Option<&str>) {
        let Some(sink) = &self.sink else { return };
        let mut note = format!("{check}: {message}");
        if let Some(fix) = fix {
            note.push_str(&format!(" Fix: {fix}"));
        }
        sink.publish(NodeEvent {
            type_: NodeEventType::Warning,
            reason: "KubeletConfigConflict",
            action: "CheckConfiguration",
            note: truncate(note),
        });
    }

    /// A warm set entry the warm cycle leaves unpulled because it does not fit (pulling it
    /// would take the image filesystem above the GC's low threshold, the byte budget's low
    /// line or the inode threshold): one Warning, `WarmImageDoesNotFit`. The warm loop says
    /// it once per entry until the entry fits (or leaves the set) again, as it logs it.
    pub(crate) fn warm_does_not_fit(&self, image: &str, runtime_handler: &str, detail: &str) {
        let Some(sink) = &self.sink else { return };
        let handler = if runtime_handler.is_empty() {
            String::new()
        } else {
            format!(" (runtime handler {runtime_handler})")
        };
        sink.publish(NodeEvent {
            type_: NodeEventType::Warning,
            reason: "WarmImageDoesNotFit",
            action: "PullWarmImage",
            note: truncate(format!(
                "Warm image {image}{handler} is not pulled: {detail}"
            )),
        });
    }

    /// The images the cluster needs on this node turned over `clusterSignalsKeepShare` at a
    /// detect: one Warning, `KeepsOverShare`, each time the share turns from within to over.
    pub(crate) fn keeps_over_share(&self, over: &crate::gc::KeepsOverShare) {
        let Some(sink) = &self.sink else { return };
        let first = over
            .left
            .first()
            .map(|(key, source, _)| format!(", the first {} (needed by {source})", key.image_id.0))
            .unwrap_or_default();
        sink.publish(NodeEvent {
            type_: NodeEventType::Warning,
            reason: "KeepsOverShare",
            action: "KeepImages",
            note: truncate(format!(
                "The images the cluster needs on this node do not fit clusterSignalsKeepShare \
                 ({}% of the image filesystem, {}; {} kept): {} image(s), {}, are left to the \
                 GC's order{first}",
                over.share_percent,
                format_size(over.budget),
                format_size(over.held),
                over.left.len(),
                format_size(over.left_bytes()),
            )),
        });
    }

    /// The store's health as a cycle found it: a Warning when it turns unhealthy.
    pub(crate) fn store_health(&self, healthy: bool) {
        let Some(sink) = &self.sink else { return };
        if healthy {
            self.store_unhealthy_said.store(false, Ordering::Relaxed);
        } else if !self.store_unhealthy_said.swap(true, Ordering::Relaxed) {
            sink.publish(NodeEvent {
                type_: NodeEventType::Warning,
                reason: "RecordStoreUnhealthy",
                action: "WriteRecords",
                note: "The image record database failed an I/O operation (a full disk?) and \
                       has not reopened yet; image history is not being written"
                    .to_owned(),
            });
        }
    }
}

fn truncate(note: String) -> String {
    truncate_to(note, MAX_NOTE_BYTES)
}

/// `text` cut to at most `max` bytes (at a character boundary), ending in `...` when cut.
fn truncate_to(mut note: String, max: usize) -> String {
    if note.len() > max {
        let mut end = max - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

#[cfg(feature = "kube")]
pub use kube_sink::{EventLimits, KubeEventSink};

#[cfg(feature = "kube")]
mod kube_sink {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    use tokio::sync::mpsc;
    use tracing::warn;

    use std::sync::atomic::{AtomicBool, Ordering};

    use super::{EventSink, NodeEvent, NodeEventType, truncate_to};

    /// The most bytes of an API server's error logged for a lost Event.
    const MAX_LOGGED_ERROR_BYTES: usize = 1024;

    /// Logs a dropped event once per run of drops.
    #[derive(Debug, Default)]
    struct DropWarning(AtomicBool);

    impl DropWarning {
        fn dropped(&self) {
            if !self.0.swap(true, Ordering::Relaxed) {
                warn!("Node Events are published slower than they come; dropping some");
            }
        }

        fn sent(&self) {
            self.0.store(false, Ordering::Relaxed);
        }
    }

    /// How many events may wait for the API server.
    const QUEUE: usize = 32;

    /// The longest `reportingInstance` the API server takes.
    const MAX_INSTANCE_CHARS: usize = 128;
    /// How many (reason, note) recorders the sink keeps before starting afresh.
    const MAX_RECORDERS: usize = 64;

    /// The bounds on what the API server (or a proxy in front of it) may answer an Event
    /// write with: kube-rs reads an answer whole, so without them an endless `201` body is
    /// buffered until the agent is killed for its memory.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct EventLimits {
        /// The most bytes of one answer's body read (an Event object back is a few KiB).
        pub max_response_bytes: usize,
        /// The most time one publish (request, answer, and a series' PATCH) may take.
        pub response_deadline: Duration,
    }

    impl Default for EventLimits {
        /// 1 MiB, 30 s.
        fn default() -> EventLimits {
            EventLimits {
                max_response_bytes: 1 << 20,
                response_deadline: Duration::from_secs(30),
            }
        }
    }

    /// Publishes to the API server through kube-rs's recorder, on the Node `node_name`.
    #[derive(Debug)]
    pub struct KubeEventSink {
        queue: mpsc::Sender<NodeEvent>,
        drops: Arc<DropWarning>,
    }

    impl KubeEventSink {
        /// With the pod's in-cluster credentials (service account token and CA), or an error
        /// saying why not (the caller logs it once and runs without Events).
        pub fn in_cluster(node_name: &str) -> Result<KubeEventSink, String> {
            let config = kube::Config::incluster()
                .map_err(|e| format!("no in-cluster Kubernetes credentials: {e}"))?;
            KubeEventSink::with_config(config, node_name)
        }

        /// With an explicit client configuration (tests point it at a stub API server).
        /// Must be called within a tokio runtime: it spawns the publishing task.
        pub fn with_config(config: kube::Config, node_name: &str) -> Result<KubeEventSink, String> {
            KubeEventSink::with_limits(config, node_name, EventLimits::default())
        }

        /// [`Self::with_config`] with explicit bounds on the API server's answers.
        pub fn with_limits(
            config: kube::Config,
            node_name: &str,
            limits: EventLimits,
        ) -> Result<KubeEventSink, String> {
            // Every answer's body through a byte cap: past it, reading fails ("length limit
            // exceeded") and the publish fails with it, the connection dropped.
            let client = crate::cluster::capped_client(config, limits.max_response_bytes)?;
            let reporter = Reporter {
                controller: "imagekeeper".into(),
                // events.k8s.io/v1 takes at most 128 characters here; a node name may
                // have 253.
                instance: Some(node_name.chars().take(MAX_INSTANCE_CHARS).collect()),
            };
            // The kubelet's node reference (kubelet.go): kind Node, the node's name as its
            // name and uid; cluster-scoped, so the recorder writes the Event to "default".
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node_name.to_owned()),
                uid: Some(node_name.to_owned()),
                ..ObjectReference::default()
            };
            let (queue, mut rx) = mpsc::channel::<NodeEvent>(QUEUE);
            let drops = Arc::new(DropWarning::default());
            tokio::spawn(async move {
                // One recorder per (reason, note): its series then never carries another note.
                let mut recorders: HashMap<(&'static str, String), Recorder> = HashMap::new();
                while let Some(event) = rx.recv().await {
                    let key = (event.reason, event.note.clone());
                    if !recorders.contains_key(&key) && recorders.len() >= MAX_RECORDERS {
                        // Bounded: a long run of distinct messages starts new series afresh.
                        recorders.clear();
                    }
                    let recorder = recorders
                        .entry(key)
                        .or_insert_with(|| Recorder::new(client.clone(), reporter.clone()))
                        .clone();
                    let event = Event {
                        type_: match event.type_ {
                            NodeEventType::Normal => EventType::Normal,
                            NodeEventType::Warning => EventType::Warning,
                        },
                        reason: event.reason.to_owned(),
                        note: Some(event.note),
                        action: event.action.to_owned(),
                        secondary: None,
                    };
                    let published = tokio::time::timeout(
                        limits.response_deadline,
                        recorder.publish(&event, &reference),
                    )
                    .await;
                    match published {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            // The API server's (or a proxy's) text, cut: a Status message
                            // of up to the body cap would otherwise be one log line.
                            let error = truncate_to(e.to_string(), MAX_LOGGED_ERROR_BYTES);
                            warn!(%error, reason = %event.reason, "Cannot publish a Node Event");
                        }
                        Err(_) => warn!(
                            deadline = ?limits.response_deadline,
                            reason = %event.reason,
                            "Cannot publish a Node Event: the API server did not answer within the deadline"
                        ),
                    }
                }
            });
            Ok(KubeEventSink { queue, drops })
        }
    }

    impl EventSink for KubeEventSink {
        fn publish(&self, event: NodeEvent) {
            match self.queue.try_send(event) {
                Ok(()) => self.drops.sent(),
                Err(_) => self.drops.dropped(),
            }
        }
    }
}

#[cfg(test)]
mod tests;
