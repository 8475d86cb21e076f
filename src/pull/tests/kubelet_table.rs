//! Kubelet's puller case table (`pullerTestCases`, image_manager_test.go), run through both
//! pullers under a manual clock: per call, the runtime calls made, the outcome, the events
//! and the `ensure_image_requests_total` labels the kubelet counts it under.

use super::*;

/// One call of a case: the runtime calls, the outcome (image ref or error reason), the event
/// reasons and a substring of the message.
struct Expect {
    calls: &'static [&'static str],
    outcome: Result<(), &'static str>,
    events: &'static [&'static str],
    msg: &'static str,
}

struct Case {
    name: &'static str,
    image: &'static str,
    policy: PullPolicy,
    inspect_err: Option<&'static str>,
    pull_err: Option<&'static str>,
    qps: f64,
    burst: u32,
    expected: Vec<Expect>,
}

/// The events of a call: a pull that succeeded, one that failed, one refused in backoff.
const PULLED: &[&str] = &["Pulling", "Pulled"];
const FAILED: &[&str] = &["Pulling", "Failed"];
const BACK_OFF: &[&str] = &["BackOff"];

fn e(
    calls: &'static [&'static str],
    outcome: Result<(), &'static str>,
    events: &'static [&'static str],
    msg: &'static str,
) -> Expect {
    Expect {
        calls,
        outcome,
        events,
        msg,
    }
}

/// A case of `name` pulling `image` under `policy`, the runtime failing its presence check
/// with `inspect_err` and its pull with `pull_err`, without a QPS limit.
fn case(
    name: &'static str,
    image: &'static str,
    policy: PullPolicy,
    inspect_err: Option<&'static str>,
    pull_err: Option<&'static str>,
    expected: Vec<Expect>,
) -> Case {
    Case {
        name,
        image,
        policy,
        inspect_err,
        pull_err,
        qps: 0.0,
        burst: 0,
        expected,
    }
}

/// kubelet's pullerTestCases (image_manager_test.go), with its 1 s / 1 min backoff and a 1 s
/// clock step before each call.
fn cases() -> Vec<Case> {
    let mut cases = presence_cases();
    cases.extend(backoff_and_qps_cases());
    cases.extend(invalid_name_cases());
    cases.extend(classified_failure_cases());
    cases
}

/// The cases by pull policy and presence: a missing image pulled, a present one used (or
/// pulled again under `Always`), `Never` refused, and a failed presence check.
fn presence_cases() -> Vec<Case> {
    vec![
        case(
            "image missing, pull",
            "missing_image",
            PullPolicy::IfNotPresent,
            None,
            None,
            vec![e(PULL_OK, Ok(()), PULLED, "")],
        ),
        case(
            "image present, don't pull",
            "present_image",
            PullPolicy::IfNotPresent,
            None,
            None,
            (0..3)
                .map(|_| {
                    e(
                        STATUS,
                        Ok(()),
                        &["Pulled"],
                        "Container image \"present_image\" already present on machine and can be accessed by the pod",
                    )
                })
                .collect(),
        ),
        case(
            "image present, pull always",
            "present_image",
            PullPolicy::Always,
            None,
            None,
            (0..3).map(|_| e(ALWAYS_OK, Ok(()), PULLED, "")).collect(),
        ),
        case(
            "image missing, never pull",
            "missing_image",
            PullPolicy::Never,
            None,
            None,
            (0..3)
                .map(|_| {
                    e(
                        STATUS,
                        Err("ErrImageNeverPull"),
                        &["ErrImageNeverPull"],
                        "Container image \"missing_image\" is not present with pull policy of Never",
                    )
                })
                .collect(),
        ),
        case(
            "image missing, inspect fails",
            "missing_image",
            PullPolicy::IfNotPresent,
            Some("unknown inspectError"),
            None,
            (0..3)
                .map(|_| {
                    e(
                        STATUS,
                        Err("ImageInspectError"),
                        &["InspectFailed"],
                        // The kubelet prints GetImageRef's ref, "" on error.
                        "Failed to inspect image \"\": unknown inspectError",
                    )
                })
                .collect(),
        ),
    ]
}

/// A pull that keeps failing backs off; pulls under a QPS limit, and over it.
fn backoff_and_qps_cases() -> Vec<Case> {
    vec![
        case(
            "image missing, unable to fetch, backs off",
            "typo_image",
            PullPolicy::IfNotPresent,
            None,
            Some("404"),
            vec![
                e(PULL_FAIL, Err("ErrImagePull"), FAILED, "404"),
                e(PULL_FAIL, Err("ErrImagePull"), FAILED, "404"),
                e(
                    STATUS,
                    Err("ImagePullBackOff"),
                    BACK_OFF,
                    "Back-off pulling image \"typo_image\": ErrImagePull: 404",
                ),
                e(PULL_FAIL, Err("ErrImagePull"), FAILED, "404"),
                e(STATUS, Err("ImagePullBackOff"), BACK_OFF, ""),
                e(STATUS, Err("ImagePullBackOff"), BACK_OFF, ""),
            ],
        ),
        Case {
            qps: 400.0,
            burst: 600,
            ..case(
                "image present and qps>0, pull",
                "present_image",
                PullPolicy::Always,
                None,
                None,
                (0..3).map(|_| e(ALWAYS_OK, Ok(()), PULLED, "")).collect(),
            )
        },
        Case {
            qps: 2000.0,
            burst: 0,
            ..case(
                "image present and excessive qps rate, pull QPS exceeded",
                "present_image",
                PullPolicy::Always,
                None,
                None,
                vec![
                    e(&[], Err("ErrImagePull"), FAILED, "pull QPS exceeded"),
                    e(&[], Err("ErrImagePull"), FAILED, "pull QPS exceeded"),
                    e(
                        &[],
                        Err("ImagePullBackOff"),
                        BACK_OFF,
                        "Back-off pulling image \"present_image\": ErrImagePull: pull QPS exceeded",
                    ),
                ],
            )
        },
    ]
}

/// Image names that do not parse: refused before any runtime call.
fn invalid_name_cases() -> Vec<Case> {
    vec![
        case(
            "invalid image name, no pull",
            "FAILED_IMAGE",
            PullPolicy::Always,
            None,
            None,
            vec![e(
                &[],
                Err("InvalidImageName"),
                &["InspectFailed"],
                "Failed to apply default image tag \"FAILED_IMAGE\": couldn't parse image name \"FAILED_IMAGE\": invalid reference format: repository name (library/FAILED_IMAGE) must be lowercase",
            )],
        ),
        case(
            "invalid image name with http, no pull",
            "http://url",
            PullPolicy::Always,
            None,
            None,
            vec![e(
                &[],
                Err("InvalidImageName"),
                &["InspectFailed"],
                "invalid reference format",
            )],
        ),
        case(
            "invalid image name with sha256, no pull",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            PullPolicy::Always,
            None,
            None,
            vec![e(
                &[],
                Err("InvalidImageName"),
                &["InspectFailed"],
                "cannot specify 64-byte hexadecimal strings",
            )],
        ),
    ]
}

/// Failed pulls classified by the runtime's error: a signature that does not validate (it
/// backs off too) and an unavailable registry, its detail kept.
fn classified_failure_cases() -> Vec<Case> {
    vec![
        case(
            "image missing, signature validation failed",
            "typo_image",
            PullPolicy::IfNotPresent,
            None,
            Some("SignatureValidationFailed"),
            vec![
                e(
                    PULL_FAIL,
                    Err("SignatureValidationFailed"),
                    FAILED,
                    "image pull failed for typo_image because the signature validation failed",
                ),
                e(
                    PULL_FAIL,
                    Err("SignatureValidationFailed"),
                    FAILED,
                    "image pull failed for typo_image because the signature validation failed",
                ),
                e(
                    STATUS,
                    Err("ImagePullBackOff"),
                    BACK_OFF,
                    "Back-off pulling image \"typo_image\": SignatureValidationFailed: image pull failed for typo_image because the signature validation failed",
                ),
                e(PULL_FAIL, Err("SignatureValidationFailed"), FAILED, ""),
                e(STATUS, Err("ImagePullBackOff"), BACK_OFF, ""),
            ],
        ),
        case(
            "image missing, registry unavailable keeps the detail",
            "typo_image",
            PullPolicy::IfNotPresent,
            None,
            Some("RegistryUnavailable: connection refused"),
            vec![e(
                PULL_FAIL,
                Err("RegistryUnavailable"),
                FAILED,
                "image pull failed for typo_image because the registry is unavailable: connection refused",
            )],
        ),
    ]
}

/// The `ensure_image_requests_total` labels (pull_policy, present_locally, pull_required) each
/// case's calls count under, from the kubelet's `expectedEnsureImageMetrics` of the same case
/// (kubelet master pkg/kubelet/images/image_manager_test.go, noFGPullerTestCases). The last
/// case is imagekeeper's own (the registry-unavailable detail), labelled as the kubelet's
/// other failed pulls of a missing image.
fn kubelet_ensure_metric(case: &str) -> (&'static str, &'static str, &'static str) {
    match case {
        "image missing, pull" => ("ifnotpresent", "false", "true"),
        "image present, don't pull" => ("ifnotpresent", "true", "false"),
        "image present, pull always" => ("always", "unknown", "true"),
        "image missing, never pull" => ("never", "false", "unknown"),
        "image missing, inspect fails" => ("ifnotpresent", "unknown", "unknown"),
        "image missing, unable to fetch, backs off" => ("ifnotpresent", "false", "true"),
        "image present and qps>0, pull" => ("always", "unknown", "true"),
        "image present and excessive qps rate, pull QPS exceeded" => ("always", "unknown", "true"),
        "invalid image name, no pull"
        | "invalid image name with http, no pull"
        | "invalid image name with sha256, no pull" => ("always", "unknown", "unknown"),
        "image missing, signature validation failed"
        | "image missing, registry unavailable keeps the detail" => {
            ("ifnotpresent", "false", "true")
        }
        other => panic!("no kubelet metric labels for case {other:?}"),
    }
}

async fn run_puller_table(serialize: bool) {
    for c in cases() {
        let runtime = Arc::new(
            FakeRuntime {
                pull_err: c.pull_err.map(str::to_owned),
                inspect_err: c.inspect_err.map(str::to_owned),
                ..Default::default()
            }
            .with_image("present_image:latest", "sha256:present", 42),
        );
        let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
        let recorder = Arc::new(Recorder::default());
        let config = PullConfig {
            serialize_image_pulls: serialize,
            registry_pull_qps: c.qps,
            registry_burst: c.burst,
            backoff: BackoffPolicy {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            ..PullConfig::default()
        };
        let manager = ImageManager::new(
            &config,
            runtime.clone(),
            Arc::new(MemoryBackoffStore::new()),
            clock.clone(),
        )
        .expect("valid config")
        .with_recorder(recorder.clone());
        for (i, want) in c.expected.iter().enumerate() {
            clock.advance(Duration::from_secs(1));
            let got = manager
                .ensure_image_exists(&pod(), c.image, c.policy, &[], "")
                .await;
            let at = format!("{} (serialize={serialize}), call {i}", c.name);
            assert_eq!(runtime.take_calls(), want.calls, "calls of {at}");
            assert_eq!(
                got.as_ref().map(|_| ()).map_err(PullError::reason),
                want.outcome,
                "{at}: {got:?}"
            );
            assert_eq!(recorder.take_reasons(), want.events, "events of {at}");
            if let Err(err) = &got {
                assert!(
                    err.message().contains(want.msg),
                    "{at}: {:?} lacks {:?}",
                    err.message(),
                    want.msg
                );
            }
        }
        let labels = kubelet_ensure_metric(c.name);
        assert_eq!(
            manager.metrics().ensure_requests(),
            BTreeMap::from([(labels, c.expected.len() as u64)]),
            "ensure_image_requests_total of {} (serialize={serialize})",
            c.name
        );
    }
}

#[tokio::test]
async fn parallel_puller_follows_kubelets_case_table() {
    run_puller_table(false).await;
}

#[tokio::test]
async fn serial_puller_follows_kubelets_case_table() {
    run_puller_table(true).await;
}
