//! The pull path against the real containerd of `scripts/cri-lab` (any release; named `pull::lab::...`,
//! run one at a time): the image manager in process with a manual clock, and the
//! `imagekeeper pull` binary run twice on one database to see the backoff outlive a process.
//! Each test pulls or removes what it needs first and leaves the lab's images pulled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use imagekeeper::clock::{Clock, ManualClock, SystemClock};
use imagekeeper::cri::{CriClient, ImageRuntime};
use imagekeeper::model::{RecordKey, UnixNanos};
use imagekeeper::pull::{ImageManager, PodRef, PullConfig, PullPolicy};
use imagekeeper::store::Store;

use super::cli::{imagekeeper_pull, stderr};
use crate::support::{self, Lab};

const NOW: i64 = 1_800_000_000;

fn pod() -> PodRef {
    PodRef {
        uid: "lab-pod-uid".into(),
        namespace: "imagekeeper-test".into(),
        name: "puller".into(),
        ..PodRef::default()
    }
}

fn manager(
    client: &CriClient,
    store: &Arc<Store>,
    clock: Arc<ManualClock>,
) -> ImageManager<CriClient, Store> {
    ImageManager::new(
        &PullConfig::default(),
        Arc::new(client.clone()),
        store.clone(),
        clock,
    )
    .expect("valid pull config")
}

/// How many lines of containerd's log are about a PullImage of `image` (containerd logs
/// `PullImage "<image>"` at info level when a pull starts, and again if it fails).
fn pull_lines(lab: &Lab, image: &str) -> usize {
    let log = std::fs::read_to_string(lab.containerd_log()).expect("containerd.log is readable");
    let needle = format!("PullImage \\\"{image}\\\"");
    log.lines().filter(|line| line.contains(&needle)).count()
}

async fn remove(client: &CriClient, image: &str) {
    client
        .remove_image(image, "")
        .await
        .expect("RemoveImage (absent is fine)");
    assert_eq!(
        client.image_status(image, "").await.expect("ImageStatus"),
        None,
        "{image} is gone before the test"
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn if_not_present_pulls_an_absent_image_returns_its_id_and_records_it_used_now() {
    let lab = support::lab(
        "pull::lab::if_not_present_pulls_an_absent_image_returns_its_id_and_records_it_used_now",
    )
    .await;
    let client = lab.client().await;
    let row = lab.image("user:name");
    remove(&client, &row.image_id).await;
    let pulls_before = pull_lines(&lab, &row.reference);

    let (_dir, store) = crate::support::temp_store(UnixNanos::from_secs(NOW));
    let store = Arc::new(store);
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(NOW)));
    let manager = manager(&client, &store, clock);
    let got = manager
        .ensure_image_exists(&pod(), &row.reference, PullPolicy::IfNotPresent, &[], "")
        .await;
    assert_eq!(got.as_deref(), Ok(row.image_id.as_str()));

    // It was really pulled: containerd has it and logged the pull.
    let status = client
        .image_status(&row.reference, "")
        .await
        .expect("ImageStatus")
        .expect("the image is present after the pull");
    assert_eq!(status.id.as_str(), row.image_id);
    assert!(pull_lines(&lab, &row.reference) > pulls_before);

    let record = store
        .get(&RecordKey::new(row.image_id.clone(), ""))
        .expect("read the store")
        .expect("the pulled image is recorded at once");
    assert_eq!(record.last_used, UnixNanos::from_secs(NOW));
    assert_eq!(record.first_detected, UnixNanos::from_secs(NOW));
    assert_eq!(record.size, row.size);
    assert_eq!(store.len().expect("len"), 1);
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn never_policy_for_an_absent_image_is_err_image_never_pull_with_kubelets_message() {
    let lab = support::lab(
        "pull::lab::never_policy_for_an_absent_image_is_err_image_never_pull_with_kubelets_message",
    )
    .await;
    let client = lab.client().await;
    let row = lab.image("user:name");
    remove(&client, &row.image_id).await;
    let pulls_before = pull_lines(&lab, &row.reference);

    let (_dir, store) = crate::support::temp_store(UnixNanos::from_secs(NOW));
    let store = Arc::new(store);
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(NOW)));
    let manager = manager(&client, &store, clock);
    let err = manager
        .ensure_image_exists(&pod(), &row.reference, PullPolicy::Never, &[], "")
        .await
        .expect_err("Never does not pull an absent image");
    assert_eq!(
        (err.reason(), err.message()),
        (
            "ErrImageNeverPull",
            format!(
                "Container image \"{}\" is not present with pull policy of Never",
                row.reference
            )
            .as_str()
        )
    );
    assert_eq!(pull_lines(&lab, &row.reference), pulls_before, "no pull");
    assert_eq!(
        client
            .image_status(&row.reference, "")
            .await
            .expect("ImageStatus"),
        None
    );
    assert!(
        store.is_empty().expect("read the store"),
        "nothing recorded"
    );
    assert_eq!(
        store
            .backoff(&format!("{}_{}", pod().uid, row.reference))
            .expect("read the store"),
        None,
        "ErrImageNeverPull does not back off"
    );

    client
        .pull_image(&row.reference, "", None)
        .await
        .expect("leave the image pulled");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn missing_tag_is_err_image_pull_then_the_next_process_backs_off_without_pulling() {
    let lab = support::lab(
        "pull::lab::missing_tag_is_err_image_pull_then_the_next_process_backs_off_without_pulling",
    )
    .await;
    let unique = SystemClock.now().0;
    let missing = format!(
        "{}/busybox:no-such-tag-{}-{unique}",
        lab.image_prefix,
        std::process::id()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let args = [
        missing.as_str(),
        "--policy",
        "Always",
        "--pod-uid",
        "uid-7",
        "--container-runtime-endpoint",
        lab.endpoint.as_str(),
    ];

    let first = imagekeeper_pull(&db, &args);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    let not_found =
        format!("rpc error: code = NotFound desc = failed to pull and unpack image \"{missing}\"");
    assert!(
        stderr(&first).contains(&format!("imagekeeper: ErrImagePull: {not_found}")),
        "{}",
        stderr(&first)
    );
    assert!(first.stdout.is_empty());
    // containerd logs the failure before it answers; wait for it to reach the file anyway.
    let failed_line = format!("PullImage \\\"{missing}\\\" failed");
    support::wait_for(
        "containerd to log the failed pull",
        Duration::from_secs(10),
        || async {
            let log = std::fs::read_to_string(lab.containerd_log()).expect("containerd.log");
            log.contains(&failed_line).then_some(())
        },
    )
    .await;
    let pulls_after_first = pull_lines(&lab, &missing);
    assert!(pulls_after_first > 0);

    let started = Instant::now();
    let second = imagekeeper_pull(&db, &args);
    let took = started.elapsed();
    assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
    assert!(
        stderr(&second).contains(&format!(
            "imagekeeper: ImagePullBackOff: Back-off pulling image \"{missing}\": ErrImagePull: {not_found}"
        )),
        "{}",
        stderr(&second)
    );
    assert_eq!(
        pull_lines(&lab, &missing),
        pulls_after_first,
        "the second process must not ask containerd to pull"
    );
    assert!(
        took < Duration::from_secs(10),
        "backoff answers without a pull, took {took:?}"
    );

    // The backoff is what the first process stored: 10 s from its failure.
    let store = Store::open(&db, UnixNanos::from_secs(NOW)).expect("reopen the database");
    let entry = store
        .backoff(&format!("uid-7_{missing}"))
        .expect("read the store")
        .expect("the first process stored a backoff entry");
    assert_eq!(entry.backoff, Duration::from_secs(10));
    assert!(entry.last_error.starts_with("ErrImagePull: "), "{entry:?}");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn pull_binary_pulls_an_absent_image_prints_its_id_and_records_it() {
    let lab =
        support::lab("pull::lab::pull_binary_pulls_an_absent_image_prints_its_id_and_records_it")
            .await;
    let row = lab.image("data:5mb");
    // Absent, so the binary really pulls it (an image already present is not recorded by
    // EnsureImageExists: detect records it).
    remove(&lab.client().await, &row.image_id).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let out = imagekeeper_pull(
        &db,
        &[
            row.reference.as_str(),
            "--container-runtime-endpoint",
            lab.endpoint.as_str(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", row.image_id)
    );
    let store = Store::open(&db, UnixNanos::from_secs(NOW)).expect("reopen the database");
    let record = store
        .get(&RecordKey::new(row.image_id.clone(), ""))
        .expect("read the store")
        .expect("the image is recorded");
    assert_eq!(record.size, row.size);
}
