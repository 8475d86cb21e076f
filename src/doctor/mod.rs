//! `imagekeeper doctor`'s checks: pure functions from the kubelet's configuration, imagekeeper's
//! own and (optionally) what the runtime reports, to a list of findings, each saying what it
//! compared and, for a conflict, what to change.
//!
//! Invariants: every check yields exactly one finding per thing it looks at, with status `ok`,
//! `conflict` or `not_checked` (never a silent skip); a check that needs what it does not have
//! (a capacity, the runtime) says so rather than guess; nothing here does I/O.

mod cluster_signals;
mod disk;
mod kubelet_config;

mod runtime_pin_record;
pub use cluster_signals::ClusterSignalsSeen;
pub use runtime_pin_record::RecordView;

use serde::Serialize;

use crate::config::{AgentConfig, ContainerEvents};
use crate::kubelet::{PreloadedRecord, Scan, StaleIntent};
use crate::model::{ImageFsStats, RuntimeImage, UnixNanos};
use crate::warm::WarmState;

use disk::{
    check_eviction, check_image_filesystem, check_image_gc_thresholds, check_inodes,
    check_maximum_age,
};
// The limits page (a unit test) states it.
#[cfg(test)]
pub(crate) use kubelet_config::MAX_DROP_INS;
pub(crate) use kubelet_config::{CredentialVerification, Threshold};
pub use kubelet_config::{DEFAULT_KUBELET_CONFIG, KubeletConfig, KubeletConfigError};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// The two configurations agree on what the check compares.
    Ok,
    /// They disagree: the finding's `fix` says what to change.
    Conflict,
    /// The check lacked what it needs (the runtime, a capacity); the message says what.
    NotChecked,
}

impl Status {
    /// The status as printed and in JSON: `ok`, `conflict`, `not_checked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Conflict => "conflict",
            Status::NotChecked => "not_checked",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// A stable name for the check (`eviction-hard-imagefs`, `image-gc-thresholds`, ...).
    pub check: String,
    /// How the check came out.
    pub status: Status,
    /// What was compared and what follows from it.
    pub message: String,
    /// What to change; set for every conflict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &str, message: String) -> Finding {
        Finding {
            check: check.to_owned(),
            status: Status::Ok,
            message,
            fix: None,
        }
    }

    fn conflict(check: &str, message: String, fix: String) -> Finding {
        Finding {
            check: check.to_owned(),
            status: Status::Conflict,
            message,
            fix: Some(fix),
        }
    }

    fn not_checked(check: &str, message: String) -> Finding {
        Finding {
            check: check.to_owned(),
            status: Status::NotChecked,
            message,
            fix: None,
        }
    }
}

/// What the runtime answered, when the doctor asked it.
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeView {
    /// The runtime did not answer (the reason, for the finding).
    Unreachable(String),
    /// The runtime answered.
    Reached {
        /// Its images (CRI ListImages).
        images: Vec<RuntimeImage>,
        /// The image filesystem, or why it is not known.
        image_fs: Result<ImageFsStats, String>,
    },
}

/// What the runtime pins check needs beyond the runtime's images.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimePinsView {
    /// CRI Version's answer, or why there is none.
    pub version: Result<crate::cri::RuntimeVersion, String>,
    /// The operators' pins (from the running agent, else the database), or why they were not
    /// read.
    pub pins: Result<Vec<(crate::model::PinKey, crate::model::ImagePin)>, String>,
    /// containerd's image names that carry `io.cri-containerd.pinned=pinned` (its Images
    /// service, namespace `k8s.io`), or why they were not read.
    pub labelled: Result<Vec<String>, String>,
    /// containerd's image names that carry imagekeeper's own label, each with the instance its
    /// `io.imagekeeper.instance` names (`None`: written before instances were named), or why
    /// they were not read.
    pub owners: Result<Vec<(String, Option<String>)>, String>,
    /// This database's agent instance (its `instance_id`), when the database was read.
    pub instance: Option<String>,
    /// The database's record of the names its agent labelled, when it was read.
    pub record: Option<RecordView>,
}

/// Everything the checks compare.
#[derive(Clone, Debug)]
pub struct DoctorInput<'a> {
    /// The kubelet's configuration, defaulted as the kubelet does.
    pub kubelet: &'a KubeletConfig,
    /// imagekeeper's resolved configuration.
    pub imagekeeper: &'a AgentConfig,
    /// The operator says images are pulled through imagekeeper with credentials.
    pub pulls_with_credentials: bool,
    /// What the runtime answered, or why it did not.
    pub runtime: &'a RuntimeView,
    /// The kubelet's pull intents older than imagekeeper's intent max age, as read now;
    /// `None` when imagekeeper does not read the kubelet's pull records.
    pub stale_intents: Option<&'a [StaleIntent]>,
    /// The kubelet's observed preloaded records as read now (and the files skipped); `None`
    /// when imagekeeper does not read the kubelet's pull records.
    pub kubelet_preloaded: Option<&'a Scan<PreloadedRecord>>,
    /// Whether the image filesystem is the node's filesystem (the one holding the kubelet's
    /// root directory, the kubelet's nodefs): `None` when unknown.
    pub images_on_nodefs: Option<bool>,
    /// The sandbox image the runtime names in its verbose CRI Status, if it does.
    pub runtime_sandbox_image: Option<&'a str>,
    /// Now, for the warm set's entries with an `until` (the warm plan takes `now`).
    pub now: UnixNanos,
    /// The runtime's version and the pins, for the runtime pins check; `None`: not asked.
    pub runtime_pins: Option<&'a RuntimePinsView>,
    /// The running agent's cluster signals, for their check; `None`: not asked.
    pub cluster_signals: Option<&'a ClusterSignalsSeen>,
}

/// The doctor's answer: `imagekeeper doctor -o json` prints it as it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The kubelet config file read.
    pub kubelet_config: String,
    /// How many findings are conflicts (the command exits 1 when this is not 0).
    pub conflicts: usize,
    /// Every check's finding, in [`check`]'s order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The report of `findings` read against the kubelet config file named `kubelet_config`;
    /// counts the conflicts.
    pub fn new(kubelet_config: String, findings: Vec<Finding>) -> Report {
        Report {
            kubelet_config,
            conflicts: conflicts(&findings),
            findings,
        }
    }
}

/// Runs every check, in a fixed order.
pub fn check(input: &DoctorInput<'_>) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.push(check_image_filesystem(input));
    findings.extend(check_eviction(input));
    findings.extend(check_inodes(input));
    findings.push(check_image_gc_thresholds(input));
    findings.push(check_maximum_age(input));
    findings.push(check_endpoints(input));
    findings.push(check_credential_verification(input));
    findings.push(check_pinned(input));
    findings.push(check_irreplaceable(input));
    findings.push(check_warm_set(input));
    findings.push(check_container_events(input));
    findings.push(check_stale_intents(input));
    findings.push(check_preloaded_records(input));
    findings.push(check_runtime_pins(input));
    if let Some(view) = input.runtime_pins {
        findings.push(check_runtime_pin_instances(view));
        findings.push(runtime_pin_record::check_runtime_pin_record(view));
    }
    if input.cluster_signals.is_some() {
        findings.push(cluster_signals::check_cluster_signals(
            input.imagekeeper.cluster_signals,
            input.cluster_signals,
        ));
    }
    findings
}

/// Whose runtime pin labels containerd holds (issue 53): an agent labels only with its own
/// instance (`io.imagekeeper.instance`, its database's `instance_id`) and leaves another
/// instance's labels alone, so two agents on one containerd no longer strip each other's pins,
/// but both agents' keeps are then pinned: a second install, or a `run --db` left running, is
/// a conflict, named with its instance and how to remove its labels once it is stopped.
fn check_runtime_pin_instances(view: &RuntimePinsView) -> Finding {
    let name = "runtime-pin-instances";
    let owners = match &view.owners {
        Ok(owners) => owners,
        Err(why) => {
            return Finding::not_checked(
                name,
                format!("containerd's image labels were not read ({why})"),
            );
        }
    };
    let mut by_instance: std::collections::BTreeMap<Option<&str>, Vec<&str>> =
        std::collections::BTreeMap::new();
    for (image, owner) in owners {
        by_instance
            .entry(owner.as_deref())
            .or_default()
            .push(image.as_str());
    }
    let this = view.instance.as_deref();
    let others: Vec<String> = by_instance
        .iter()
        .filter(|(owner, _)| owner.is_some() && *owner != &this)
        .map(|(owner, names)| {
            let shown: Vec<&str> = names.iter().take(3).copied().collect();
            format!(
                "instance {} on {} name(s) ({}{})",
                owner.unwrap_or_default(),
                names.len(),
                shown.join(", "),
                if names.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            )
        })
        .collect();
    let this_shown = this.unwrap_or("unknown: the database was not read");
    if others.is_empty() || this.is_none() {
        let summary: Vec<String> = by_instance
            .iter()
            .map(|(owner, names)| match owner {
                Some(owner) => format!("instance {owner}: {}", names.len()),
                None => format!("unnamed (written before instances): {}", names.len()),
            })
            .collect();
        return Finding::ok(
            name,
            format!(
                "imagekeeper's runtime pin labels on containerd: {} name(s){}; this agent's instance: {this_shown}",
                owners.len(),
                match summary.is_empty() {
                    true => String::new(),
                    false => format!(" ({})", summary.join(", ")),
                },
            ),
        );
    }
    Finding::conflict(
        name,
        format!(
            "containerd holds the runtime pin labels of another imagekeeper agent beside this one (instance {this_shown}): {}; each agent leaves the other's labels alone, so the kubelet spares both agents' keeps",
            others.join("; ")
        ),
        "run one agent per containerd; once the other agent is stopped (a second install, or a          `run --db` left running), `imagekeeper remove-runtime-pins --instance ID` removes its labels"
            .to_owned(),
    )
}

/// What the kubelet does to imagekeeper's keeps when the runtime does not carry them.
const KEEPS_UNSEEN: &str = "the kubelet's image GC and eviction manager cannot see imagekeeper's \
    keeps (pins, warm set, irreplaceable images) and may remove them";

/// The runtime pins (`runtimePins`): whether the runtime can carry imagekeeper's keeps as
/// pinned (containerd 1.7.10 and later; the kubelet's image GC and eviction manager skip an
/// image the runtime lists as pinned: kubelet master
/// `pkg/kubelet/images/image_gc_manager.go`, `imagesInEvictionOrder`) and, when it can,
/// whether every image imagekeeper keeps now (an active pin, a present warm entry, the
/// irreplaceable rule: the agent's own keeps) is listed `pinned: true` by CRI ListImages.
/// Off (by setting, or `auto` on containerd before 1.7.10 or another runtime) is `not_checked`, with
/// what it means; a keep not carried while pins are on is a conflict.
fn check_runtime_pins(input: &DoctorInput<'_>) -> Finding {
    let name = "runtime-pins";
    if input.imagekeeper.runtime_pins == crate::config::RuntimePins::Off {
        return Finding::not_checked(
            name,
            format!("runtime pins are off (runtimePins = off): {KEEPS_UNSEEN}"),
        );
    }
    let Some(view) = input.runtime_pins else {
        return Finding::not_checked(name, "the runtime was not asked".to_owned());
    };
    let version = match &view.version {
        Ok(v) => v,
        Err(why) => {
            return Finding::not_checked(
                name,
                format!(
                    "the runtime did not say its version ({why}), so runtime pins were not checked"
                ),
            );
        }
    };
    if let Err(why) = crate::runtime::runtime_carries_pins(version) {
        return Finding::not_checked(
            name,
            format!("runtime pins are off (runtimePins = auto): {why}: {KEEPS_UNSEEN}"),
        );
    }
    let RuntimeView::Reached { images, .. } = input.runtime else {
        return Finding::not_checked(
            name,
            "the runtime did not list its images, so whether it carries every keep was not checked"
                .to_owned(),
        );
    };
    let gc = &input.imagekeeper.gc;
    let rule = gc.protect_irreplaceable.then(|| crate::gc::Irreplaceable {
        sandbox_image: input
            .runtime_sandbox_image
            .map(str::to_owned)
            .or_else(|| gc.sandbox_image.clone()),
    });
    let pins = view.pins.as_deref().unwrap_or(&[]);
    let kept = crate::gc::Protections::resolve(images, pins, rule.as_ref(), input.now);
    let keeps: Vec<&RuntimeImage> = images
        .iter()
        .filter(|i| kept.contains(&i.record_key()) || gc.warm.keeps(*i, input.now).is_some())
        .collect();
    let pins_note = match &view.pins {
        Ok(_) => String::new(),
        Err(why) => format!(
            "; the pins were not read ({why}), so only the warm set and irreplaceable images were checked"
        ),
    };
    let missing: Vec<&RuntimeImage> = keeps.iter().copied().filter(|i| !i.pinned).collect();
    let shown = |i: &RuntimeImage| {
        i.repo_tags
            .first()
            .map_or(i.id.as_str(), String::as_str)
            .to_owned()
    };
    // A keep containerd labels pinned but the CRI lists `pinned: false`: containerd before
    // 1.7.10 does not carry a label added to an image already present (containerd issue 9328).
    let labelled_note = match &view.labelled {
        Ok(names) => {
            let labelled: Vec<String> = missing
                .iter()
                .filter(|i| {
                    i.repo_tags
                        .iter()
                        .chain(&i.repo_digests)
                        .chain(std::iter::once(&i.id.0))
                        .any(|n| names.contains(n))
                })
                .map(|i| shown(i))
                .collect();
            match labelled.is_empty() {
                true => String::new(),
                false => format!(
                    "; {} of them carry containerd's io.cri-containerd.pinned=pinned label, which the CRI does not list (containerd before 1.7.10 does not carry a label added to an image already present: containerd issue 9328): {}",
                    labelled.len(),
                    labelled.join(", ")
                ),
            }
        }
        Err(_) => String::new(),
    };
    let missing: Vec<String> = missing.into_iter().map(shown).collect();
    if missing.is_empty() {
        Finding::ok(
            name,
            format!(
                "runtime pins on ({} {}): the runtime lists all {} image(s) imagekeeper keeps as pinned{pins_note}",
                version.runtime_name,
                version.runtime_version,
                keeps.len()
            ),
        )
    } else {
        Finding::conflict(
            name,
            format!(
                "runtime pins on ({} {}), but the runtime does not list {} of the {} image(s) imagekeeper keeps as pinned, so the kubelet may remove them: {}{labelled_note}{pins_note}",
                version.runtime_name,
                version.runtime_version,
                missing.len(),
                keeps.len(),
                missing.join(", ")
            ),
            "check that the agent runs with runtimePins = auto (its default) against this \
             containerd (containerdAddress), and its log for \"Runtime pins: label write failed\" and \
             imagekeeper_runtime_pin_label_writes_total{result=\"failure\"}; the agent labels \
             its keeps after each detect"
                .to_owned(),
        )
    }
}

/// The number of conflicts among `findings`.
pub(crate) fn conflicts(findings: &[Finding]) -> usize {
    findings
        .iter()
        .filter(|f| f.status == Status::Conflict)
        .count()
}

/// `unix:///run/x.sock` and `/run/x.sock` name the same socket.
fn socket_of(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

/// Both must manage the same runtime: the kubelet's containerRuntimeEndpoint and
/// imageServiceEndpoint (defaults.go) against imagekeeper's.
fn check_endpoints(input: &DoctorInput<'_>) -> Finding {
    let name = "runtime-endpoints";
    let k = input.kubelet;
    let ours = &input.imagekeeper.cri;
    let k_images = k
        .image_service_endpoint
        .as_deref()
        .unwrap_or(&k.container_runtime_endpoint);
    let our_images = ours
        .image_endpoint
        .as_deref()
        .unwrap_or(&ours.runtime_endpoint);
    let mut differ = Vec::new();
    if socket_of(&k.container_runtime_endpoint) != socket_of(&ours.runtime_endpoint) {
        differ.push(format!(
            "the kubelet's containerRuntimeEndpoint is {} but imagekeeper's \
             --container-runtime-endpoint is {}",
            k.container_runtime_endpoint, ours.runtime_endpoint
        ));
    }
    let separate_images = k.image_service_endpoint.is_some() || ours.image_endpoint.is_some();
    if separate_images && socket_of(k_images) != socket_of(our_images) {
        differ.push(format!(
            "the kubelet's image service is {k_images} but imagekeeper's is {our_images}"
        ));
    }
    if differ.is_empty() {
        return Finding::ok(
            name,
            format!(
                "the kubelet and imagekeeper use the same runtime ({}) and image service ({})",
                ours.runtime_endpoint, our_images
            ),
        );
    }
    Finding::conflict(
        name,
        format!(
            "{}: imagekeeper would manage another runtime's images, and not see the kubelet's \
             containers",
            differ.join("; ")
        ),
        format!(
            "set imagekeeper's --container-runtime-endpoint {}{}",
            k.container_runtime_endpoint,
            match &k.image_service_endpoint {
                Some(e) => format!(" and --image-service-endpoint {e}"),
                None => String::new(),
            }
        ),
    )
}

/// KEP-2535: images pulled outside the kubelet look preloaded to it. Under
/// NeverVerifyPreloadedImages (the default with the gate on, defaults.go), NeverVerify, or the
/// gate off, a pod without the pull secret may run an image imagekeeper pulled with one.
fn check_credential_verification(input: &DoctorInput<'_>) -> Finding {
    let name = "image-pull-credentials-verification";
    let policy = input.kubelet.credential_verification;
    let shown = policy.as_str();
    match policy {
        CredentialVerification::AlwaysVerify => Finding::ok(
            name,
            "the kubelet's imagePullCredentialsVerificationPolicy is AlwaysVerify: a pod must \
             have the credentials for any image it uses, however it was pulled; so every pod \
             re-pulls each image the kubelet has no pull record of (every image imagekeeper \
             pulled), and such pods fail to start while the registry is down"
                .to_owned(),
        ),
        CredentialVerification::NeverVerifyAllowlistedImages => Finding::ok(
            name,
            "the kubelet's imagePullCredentialsVerificationPolicy is \
             NeverVerifyAllowlistedImages: images pulled outside the kubelet are verified \
             unless preloadedImagesVerificationAllowlist names them (keep private images out of \
             it)"
            .to_owned(),
        ),
        _ if !input.pulls_with_credentials => Finding::not_checked(
            name,
            format!(
                "the kubelet's imagePullCredentialsVerificationPolicy is {shown}: any pod may run \
                 an image pulled outside the kubelet without its credentials; this matters when \
                 imagekeeper pulls private images (say so with --pulls-with-credentials)"
            ),
        ),
        _ => Finding::conflict(
            name,
            format!(
                "the kubelet's imagePullCredentialsVerificationPolicy is {shown} while images are \
                 pulled through imagekeeper with credentials: those look preloaded to the kubelet, \
                 so any pod on the node can run them without the pull secret"
            ),
            "set the kubelet's imagePullCredentialsVerificationPolicy: AlwaysVerify (with the \
             KubeletEnsureSecretPulledImages gate on; pods then re-pull every image the \
             kubelet has no pull record of, imagekeeper's pulls included, and fail to start \
             while the registry is down), or NeverVerifyAllowlistedImages with a \
             preloadedImagesVerificationAllowlist that names only public images"
                .to_owned(),
        ),
    }
}

/// The images that cannot come back (the runtime's sandbox image, images with no repo
/// digest), listed: kept with `protectIrreplaceable` (the default), collectible without.
fn check_irreplaceable(input: &DoctorInput<'_>) -> Finding {
    let name = "irreplaceable-images";
    let RuntimeView::Reached { images, .. } = input.runtime else {
        return Finding::not_checked(
            name,
            "the runtime did not answer, so its irreplaceable images were not listed".to_owned(),
        );
    };
    let gc = &input.imagekeeper.gc;
    let sandbox = input
        .runtime_sandbox_image
        .map(str::to_owned)
        .or_else(|| gc.sandbox_image.clone());
    let rule = crate::gc::Irreplaceable {
        sandbox_image: sandbox,
    };
    let found = crate::gc::Protections::resolve(images, &[], Some(&rule), UnixNanos::NEVER);
    let listed: Vec<String> = images
        .iter()
        .filter_map(|i| {
            let p = found.get(&i.record_key())?;
            let shown = i.repo_tags.first().map_or(i.id.as_str(), String::as_str);
            let why = match p {
                crate::gc::Protection::SandboxImage { .. } => "the runtime's sandbox image",
                _ => "no repo digest",
            };
            Some(format!("{shown} ({why})"))
        })
        .collect();
    let list = if listed.is_empty() {
        "none".to_owned()
    } else {
        listed.join(", ")
    };
    if gc.protect_irreplaceable {
        Finding::ok(
            name,
            format!("kept as irreplaceable (protectIrreplaceable): {list}"),
        )
    } else {
        Finding::ok(
            name,
            format!(
                "protectIrreplaceable = false: GC may remove these images no registry can give back: {list}"
            ),
        )
    }
}

/// The warm set against the room under the GC's low lines, judged with the warm cycle's own
/// plan (`crate::warm::plan`) on the runtime's images and image filesystem now, the whole set
/// at once (as if every entry were pulled in one cycle). The doctor does not read the
/// database, so an entry's size is its image's when present, else its `size` hint: an entry
/// of unknown size is left to the warm cycle, and `[warmFromHistory]`'s entries (from the
/// journal) are not judged. An entry that does not fit is a conflict: the warm cycle never
/// pulls it.
fn check_warm_set(input: &DoctorInput<'_>) -> Finding {
    let name = "warm-set";
    let gc = &input.imagekeeper.gc;
    let history = if input.imagekeeper.warm.from_history.is_some() {
        "; [warmFromHistory]'s entries come from the database, which the doctor does not read"
    } else {
        ""
    };
    if gc.warm.is_empty() {
        return Finding::ok(name, format!("no warm set ([[warm]], warmSetDir){history}"));
    }
    let RuntimeView::Reached { images, image_fs } = input.runtime else {
        return Finding::not_checked(
            name,
            "the runtime did not answer, so the warm set was not judged against the image \
             filesystem"
                .to_owned(),
        );
    };
    let fs = match image_fs {
        Ok(fs) => fs,
        Err(e) => {
            return Finding::not_checked(
                name,
                format!(
                    "the image filesystem is not known ({e}), so the warm set was not judged \
                     against it"
                ),
            );
        }
    };
    let policy = &gc.policy;
    let planned = crate::warm::plan(&crate::warm::PlanInput {
        entries: gc.warm.entries(),
        now: input.now,
        images,
        fs: Some((fs.capacity, fs.available)),
        low_threshold_percent: policy.low_threshold_percent,
        bytes_low: policy.bytes.map(|b| b.low),
        inodes_at_or_above_low: crate::warm::inodes_at_or_above_low(
            policy.inodes.map(|t| t.low),
            fs,
        ),
        max_pulls: usize::MAX,
        known_size: &|_| None,
    });
    let count = |state| planned.count(state);
    let summary = format!(
        "{} warm entries on {}: {} present, {} to pull, {} of unknown size (judged by the warm \
         cycle as it pulls), {} expired",
        planned.statuses.len(),
        fs.mountpoint,
        count(WarmState::Present),
        count(WarmState::Pulling),
        count(WarmState::Queued),
        count(WarmState::Expired),
    );
    let misfits: Vec<String> = planned
        .statuses
        .iter()
        .filter(|s| s.state == WarmState::DoesNotFit)
        .map(|s| format!("{} ({})", s.entry.image, s.detail))
        .collect();
    if misfits.is_empty() {
        return Finding::ok(name, format!("{summary}; every entry fits{history}"));
    }
    Finding::conflict(
        name,
        format!(
            "{summary}; {} do not fit and are never pulled: {}{history}",
            misfits.len(),
            misfits.join(", ")
        ),
        "free room on the image filesystem, raise --image-gc-low-threshold (or the byte \
         budget's imageGCLowBytes), or shorten the warm set: earlier entries have \
         priority"
            .to_owned(),
    )
}

/// The kubelet since 1.28 protects the sandbox image only through the runtime's `pinned`
/// (image_gc_manager.go skips pinned images); containerd 1.6 before 1.6.22 and 1.7 before 1.7.3 never report it.
fn check_pinned(input: &DoctorInput<'_>) -> Finding {
    let name = "pinned-images";
    let pins = input.imagekeeper.gc.pins.patterns();
    if !pins.is_empty() {
        return Finding::ok(
            name,
            format!("pinnedImages patterns are set: {}", pins.join(", ")),
        );
    }
    match input.runtime {
        RuntimeView::Unreachable(why) => Finding::not_checked(
            name,
            format!(
                "the runtime at {} did not answer ({why}), so whether it reports pinned images \
                 was not checked",
                input.imagekeeper.cri.runtime_endpoint
            ),
        ),
        RuntimeView::Reached { images, .. } if images.is_empty() => Finding::not_checked(
            name,
            "the runtime lists no images, so whether it reports pinned images was not checked"
                .to_owned(),
        ),
        RuntimeView::Reached { images, .. } => {
            let pinned = images.iter().filter(|i| i.pinned).count();
            if pinned > 0 {
                Finding::ok(
                    name,
                    format!(
                        "the runtime reports {pinned} of {} image(s) as pinned",
                        images.len()
                    ),
                )
            } else {
                Finding::conflict(
                    name,
                    format!(
                        "the runtime reports none of its {} image(s) as pinned and no \
                         pinnedImages pattern is set: nothing keeps the sandbox (pause) image \
                         or an image the node must keep from being collected",
                        images.len()
                    ),
                    "set pinnedImages in the config file for the sandbox image and every image \
                     to keep, for example pinnedImages = [\"registry.k8s.io/pause:*\"] (or \
                     --set 'pinnedImages=[\"registry.k8s.io/pause:*\"]')"
                        .to_owned(),
                )
            }
        }
    }
}

/// Evented PLEG (KEP-3386) subscribes the kubelet to the runtime's container events; on
/// containerd 1.7 and CRI-O 1.26-1.27 the events go to one subscriber only, so imagekeeper's
/// watcher would take them from the kubelet.
fn check_container_events(input: &DoctorInput<'_>) -> Finding {
    let name = "container-events";
    let ours = input.imagekeeper.container_events;
    match (input.kubelet.evented_pleg, ours) {
        (false, _) => Finding::ok(
            name,
            format!(
                "the kubelet's EventedPLEG feature gate is off: it does not subscribe to the \
                 runtime's container events, so imagekeeper's watcher (containerEvents = {}) \
                 takes none from it",
                ours.as_str()
            ),
        ),
        (true, ContainerEvents::Off) => Finding::ok(
            name,
            "the kubelet's EventedPLEG feature gate is on and imagekeeper's container events \
             watcher is off: the kubelet keeps the runtime's events to itself"
                .to_owned(),
        ),
        (true, _) => Finding::conflict(
            name,
            format!(
                "the kubelet's EventedPLEG feature gate is on and imagekeeper watches the \
                 runtime's container events too (containerEvents = {}): on containerd 1.7 and \
                 CRI-O 1.26-1.27 each event goes to one subscriber, so imagekeeper would take \
                 events the kubelet's PLEG needs",
                ours.as_str()
            ),
            "set imagekeeper's containerEvents = \"off\" in its config file (or --set \
             containerEvents=off); images are then marked used at each detect"
                .to_owned(),
        ),
    }
}

/// The kubelet's pull intents older than imagekeeper's intent max age: they keep no image.
fn check_stale_intents(input: &DoctorInput<'_>) -> Finding {
    let name = "kubelet-pull-intents";
    match input.stale_intents {
        None => Finding::not_checked(
            name,
            "imagekeeper does not read the kubelet's pull records (--kubelet-root-dir is empty)"
                .to_owned(),
        ),
        Some([]) => Finding::ok(
            name,
            "no kubelet pull intent is older than kubeletIntentMaxAge".to_owned(),
        ),
        Some(stale) => Finding::ok(
            name,
            format!(
                "{} kubelet pull intent(s) are older than kubeletIntentMaxAge and keep no \
                 image (the kubelet removes an intent when the pull ends, but never one whose \
                 name is not exactly one of the runtime's tags or digests): {}",
                stale.len(),
                stale
                    .iter()
                    .map(StaleIntent::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
    }
}

/// How many preloaded records, and damaged files, the finding names.
const PRELOADED_NAMED: usize = 10;

/// The kubelet's observed preloaded records (KEP-2535, kubelet master
/// pkg/kubelet/images/pullmanager/fs_pullrecords.go, `observed-preloaded/`): images it found
/// present without having pulled them. Never a conflict: listed, with the damaged files
/// skipped, because imagekeeper counts them as no use.
fn check_preloaded_records(input: &DoctorInput<'_>) -> Finding {
    let name = "kubelet-preloaded-records";
    let Some(scan) = input.kubelet_preloaded else {
        return Finding::not_checked(
            name,
            "imagekeeper does not read the kubelet's pull records (--kubelet-root-dir is empty)"
                .to_owned(),
        );
    };
    let mut message = if scan.found.is_empty() {
        "the kubelet has no observed preloaded record".to_owned()
    } else {
        let mut records: Vec<String> = scan
            .found
            .iter()
            .take(PRELOADED_NAMED)
            .map(|r| match &r.observed_images[..] {
                [] => r.image_ref.clone(),
                names => format!("{} as {}", r.image_ref, quoted(names)),
            })
            .collect();
        if scan.found.len() > PRELOADED_NAMED {
            records.push(format!("and {} more", scan.found.len() - PRELOADED_NAMED));
        }
        format!(
            "the kubelet observed {} image(s) preloaded (present on the node without a kubelet \
             pull; imagekeeper's GC, like the kubelet's, counts this as no use): {}",
            scan.found.len(),
            records.join("; ")
        )
    };
    if !scan.skipped.is_empty() {
        let mut skipped: Vec<String> = scan
            .skipped
            .iter()
            .take(PRELOADED_NAMED)
            .map(|(path, e)| format!("{}: {e}", path.display()))
            .collect();
        if scan.skipped.len() > PRELOADED_NAMED {
            skipped.push(format!("and {} more", scan.skipped.len() - PRELOADED_NAMED));
        }
        message.push_str(&format!(
            "; {} observed preloaded record file(s) skipped: {}",
            scan.skipped.len(),
            skipped.join("; ")
        ));
    }
    Finding::ok(name, message)
}

/// Names quoted as Go's `%q` quotes them, comma-separated.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| crate::format::go_quote(n))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
