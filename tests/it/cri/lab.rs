//! Tests against the real containerd of `scripts/cri-lab` (named `cri::lab::...`, run one at a
//! time), on whichever release the lab runs (2.3, 2.4, 1.7, 2.1 or 1.6, from lab.env): a fact that differs
//! by release is asserted for that release and named in the test or its assertion. Each test
//! first pulls the images it needs, so none depends on another's leftovers, and pods are torn
//! down by a guard even when an assertion fails.

use std::time::Duration;

use imagekeeper::cri::{ContainerSpec, ImageRuntime, RpcCode};
use imagekeeper::model::ContainerState;

use crate::support::{self, PodGuard, sandbox_spec};

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn pull_by_tag_returns_the_image_id_of_images_tsv() {
    let lab = support::lab("cri::lab::pull_by_tag_returns_the_image_id_of_images_tsv").await;
    let client = lab.client().await;
    let data = lab.image("data:5mb");
    let image_ref = client
        .pull_image(&data.reference, "", None)
        .await
        .expect("pull by tag");
    assert_eq!(image_ref, data.image_id);
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn pull_by_digest_returns_the_same_image_id_and_lists_the_digest() {
    let lab =
        support::lab("cri::lab::pull_by_digest_returns_the_same_image_id_and_lists_the_digest")
            .await;
    let client = lab.client().await;
    let data = lab.image("data:1mb");
    client
        .remove_image(&data.image_id, "")
        .await
        .expect("remove by id (absent is fine)");
    let image_ref = client
        .pull_image(&data.by_digest(), "", None)
        .await
        .expect("pull by digest");
    assert_eq!(image_ref, data.image_id);
    let status = client
        .image_status(&data.by_digest(), "")
        .await
        .expect("ImageStatus answers")
        .expect("the image pulled by digest is present");
    assert!(
        status.repo_digests.contains(&data.by_digest()),
        "{status:?}"
    );
    assert!(
        status.repo_tags.is_empty(),
        "pulled by digest only, so no tags: {status:?}"
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn image_status_reports_a_pulled_image_and_none_for_an_unknown_one() {
    let lab =
        support::lab("cri::lab::image_status_reports_a_pulled_image_and_none_for_an_unknown_one")
            .await;
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35");
    client
        .pull_image(&busybox.reference, "", None)
        .await
        .expect("pull busybox");
    let status = client
        .image_status(&busybox.reference, "")
        .await
        .expect("ImageStatus answers")
        .expect("a pulled image is present");
    assert_eq!(status.id.as_str(), busybox.image_id);
    assert_eq!(status.size, busybox.size);
    assert!(
        !status.pinned,
        "an image nobody labelled is not pinned on any release ({})",
        lab.containerd_release().name()
    );
    let unknown = format!("{}/never-pushed:1", lab.image_prefix);
    assert_eq!(
        client
            .image_status(&unknown, "")
            .await
            .expect("absent is not an error"),
        None
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn list_images_reports_id_size_tags_and_digests_as_images_tsv() {
    let lab =
        support::lab("cri::lab::list_images_reports_id_size_tags_and_digests_as_images_tsv").await;
    let client = lab.client().await;
    let wanted = ["data:20mb", "user:uid", "data-alias:small", "data:1mb"];
    for short in wanted {
        client
            .pull_image(&lab.image(short).reference, "", None)
            .await
            .expect("pull");
    }
    let images = client.list_images().await.expect("ListImages answers");
    for short in wanted {
        let row = lab.image(short);
        let listed = images
            .iter()
            .find(|image| image.id.as_str() == row.image_id)
            .unwrap_or_else(|| panic!("{} not listed: {images:?}", row.reference));
        assert!(listed.id.as_str().starts_with("sha256:"));
        assert_eq!(listed.size, row.size, "CRI size of {}", row.reference);
        assert!(listed.repo_tags.contains(&row.reference), "{listed:?}");
        assert!(listed.repo_digests.contains(&row.by_digest()), "{listed:?}");
        assert_eq!(listed.runtime_handler, "");
    }
    // data:1mb and data-alias:small are one image with a tag (and digest) in each repository.
    let one = lab.image("data:1mb");
    let alias = lab.image("data-alias:small");
    assert_eq!(
        (&alias.build_tag, &alias.image_id),
        (&one.build_tag, &one.image_id)
    );
    let listed = images
        .iter()
        .filter(|image| image.id.as_str() == one.image_id)
        .count();
    assert_eq!(listed, 1, "one image, listed once");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn removing_by_one_tag_removes_every_tag_of_the_image() {
    let lab = support::lab("cri::lab::removing_by_one_tag_removes_every_tag_of_the_image").await;
    let client = lab.client().await;
    let first = lab.image("busybox:1.35");
    let second = lab.image("busybox:latest");
    assert_eq!(
        first.image_id, second.image_id,
        "images.tsv: two tags of one image"
    );
    client
        .pull_image(&first.reference, "", None)
        .await
        .expect("pull 1.35");
    client
        .pull_image(&second.reference, "", None)
        .await
        .expect("pull latest");
    client
        .remove_image(&first.reference, "")
        .await
        .expect("remove by tag");
    assert_eq!(
        client
            .image_status(&first.reference, "")
            .await
            .expect("answers"),
        None
    );
    assert_eq!(
        client
            .image_status(&second.reference, "")
            .await
            .expect("answers"),
        None
    );
    assert_eq!(
        client
            .image_status(&first.image_id, "")
            .await
            .expect("answers"),
        None
    );
    client
        .remove_image(&first.reference, "")
        .await
        .expect("removing an absent image is OK");
    // Leave busybox in place for whoever runs next.
    client
        .pull_image(&first.reference, "", None)
        .await
        .expect("re-pull 1.35");
    client
        .pull_image(&second.reference, "", None)
        .await
        .expect("re-pull latest");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn image_fs_stats_has_the_lab_mountpoint_and_statvfs_space() {
    let lab =
        support::lab("cri::lab::image_fs_stats_has_the_lab_mountpoint_and_statvfs_space").await;
    let client = lab.client().await;
    client
        .pull_image(&lab.image("data:5mb").reference, "", None)
        .await
        .expect("pull");
    let stats = client
        .image_fs_stats()
        .await
        .expect("ImageFsInfo answers and statvfs works");
    assert_eq!(stats.mountpoint, lab.imagefs_mountpoint);
    assert!(stats.capacity > 0);
    assert!(stats.available <= stats.capacity);
    // Snapshot usage is refreshed every second (stats_collect_period = 1).
    support::wait_for(
        "ImageFsInfo to count the unpacked layers",
        Duration::from_secs(20),
        || async {
            let stats = client.image_fs_stats().await.expect("ImageFsInfo answers");
            (stats.used_bytes > 0).then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn pull_of_a_missing_tag_is_not_found() {
    let lab = support::lab("cri::lab::pull_of_a_missing_tag_is_not_found").await;
    let client = lab.client().await;
    let missing = format!("{}/busybox:no-such-tag", lab.image_prefix);
    let err = client.pull_image(&missing, "", None).await.unwrap_err();
    println!("containerd's answer to a missing tag: {err}");
    assert_eq!(err.code(), Some(RpcCode::NotFound), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("rpc error: code = NotFound desc = failed to pull and unpack image"),
        "{text}"
    );
    assert!(
        text.contains(&missing) && text.contains("not found"),
        "{text}"
    );
}

/// CRI Version names containerd and the release the lab started (lab.env's
/// CRI_LAB_CONTAINERD_VERSION: the Debian package's version, "1.6.20~ds1-..." runs as 1.6.20,
/// or the Go module's, "2.3.7" runs as v2.3.7, as containerd's own release builds say it).
#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn version_names_containerd_and_the_release_the_lab_started() {
    let lab =
        support::lab("cri::lab::version_names_containerd_and_the_release_the_lab_started").await;
    let version = lab.client().await.version().await.expect("Version answers");
    assert_eq!(version.runtime_name, "containerd");
    let release = lab.containerd_release().name();
    let runtime_version = version.runtime_version.trim_start_matches('v');
    assert!(
        runtime_version.starts_with(&format!("{release}.")),
        "the lab runs containerd {release}: {version:?}"
    );
    // The upstream part of the version (1.6.20, 1.7.24, 2.1.9, 2.3.7, 2.4.2).
    let package = lab.env_or("CRI_LAB_CONTAINERD_VERSION", "");
    let upstream = package.split(['~', '+', '-']).next().unwrap_or_default();
    if !upstream.is_empty() && upstream.starts_with(release) {
        assert!(
            runtime_version.starts_with(upstream),
            "lab.env says containerd {package}: {version:?}"
        );
    }
    assert_eq!(version.runtime_api_version, "v1");
}

/// The sandbox image is listed `pinned: true` on 1.7 and 2.1 (containerd pins its
/// `sandbox_image` once pulled) and never on 1.6.
#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn the_sandbox_image_is_pinned_on_1_7_and_2_1_and_not_on_1_6() {
    let lab =
        support::lab("cri::lab::the_sandbox_image_is_pinned_on_1_7_and_2_1_and_not_on_1_6").await;
    let client = lab.client().await;
    let pause = lab.image("pause:1.0");
    assert_eq!(
        pause.reference, lab.sandbox_image,
        "images.tsv's pause is the sandbox image"
    );
    client
        .pull_image(&pause.reference, "", None)
        .await
        .expect("pull the sandbox image");
    let release = lab.containerd_release();
    // containerd's CRI plugin applies the pin when it handles its own image event, on a task
    // of its own, so ListImages may lag the pull by a moment: polled (another process's state,
    // which no signal announces); the deadline only guards against a hang.
    let what = format!(
        "ListImages to list the sandbox image with pinned: {} (containerd {})",
        release.pins(),
        release.name()
    );
    let pinned = support::wait_for(&what, Duration::from_secs(20), || async {
        let images = client.list_images().await.expect("ListImages answers");
        let listed = images
            .into_iter()
            .find(|i| i.id.as_str() == pause.image_id)?;
        (listed.pinned == release.pins()).then_some(listed.pinned)
    })
    .await;
    assert_eq!(
        pinned,
        release.pins(),
        "containerd {} pins its sandbox image: {}",
        release.name(),
        release.pins()
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_running_container_lists_its_image_id_and_keeps_it_after_exit() {
    let lab =
        support::lab("cri::lab::a_running_container_lists_its_image_id_and_keeps_it_after_exit")
            .await;
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35");
    client
        .pull_image(&busybox.reference, "", None)
        .await
        .expect("pull busybox");
    let sandbox = sandbox_spec(&lab, "ik-sleeper");
    let sandbox_id = client
        .run_pod_sandbox(&sandbox)
        .await
        .expect("RunPodSandbox of a host-network pod");
    let guard = PodGuard {
        endpoint: lab.endpoint.clone(),
        sandbox_id: sandbox_id.clone(),
    };
    let pods = client
        .list_pod_sandbox()
        .await
        .expect("ListPodSandbox answers");
    let pod = pods
        .iter()
        .find(|pod| pod.id == sandbox_id)
        .expect("the new sandbox is listed");
    assert!(pod.ready && pod.uid == sandbox.uid, "{pod:?}");

    let container = ContainerSpec {
        name: "sleeper".to_string(),
        image: busybox.reference.clone(),
        command: vec!["/bin/sleep".to_string(), "3600".to_string()],
        args: vec![],
        ..ContainerSpec::default()
    };
    let container_id = client
        .create_container(&sandbox_id, &sandbox, &container)
        .await
        .expect("CreateContainer");
    client
        .start_container(&container_id)
        .await
        .expect("StartContainer");

    let running = client
        .list_containers()
        .await
        .expect("ListContainers answers");
    let listed = running
        .iter()
        .find(|c| c.id == container_id)
        .expect("the container is listed");
    assert_eq!(listed.state, ContainerState::Running);
    assert_eq!(listed.image_id.as_str(), busybox.image_id);
    assert_eq!(listed.pod_sandbox_id, sandbox_id);
    let status = client
        .container_status(&container_id)
        .await
        .expect("ContainerStatus answers");
    assert_eq!(status.state, ContainerState::Running);
    assert!(
        status.image_volumes.is_empty(),
        "a container with no image mount has no image volumes on any release: {status:?}"
    );

    client
        .stop_container(&container_id, Duration::ZERO)
        .await
        .expect("StopContainer");
    let exited = support::wait_for(
        "the container to be listed as exited",
        Duration::from_secs(30),
        || async {
            let containers = client
                .list_containers()
                .await
                .expect("ListContainers answers");
            containers
                .into_iter()
                .find(|c| c.id == container_id && c.state == ContainerState::Exited)
        },
    )
    .await;
    assert_eq!(
        exited.image_id.as_str(),
        busybox.image_id,
        "an exited container still names its image"
    );

    // The guard's cleanup removes the pod and its container.
    drop(guard);
    let pods = client
        .list_pod_sandbox()
        .await
        .expect("ListPodSandbox answers");
    assert!(
        !pods.iter().any(|pod| pod.id == sandbox_id),
        "sandbox left behind: {pods:?}"
    );
    let containers = client
        .list_containers()
        .await
        .expect("ListContainers answers");
    assert!(
        !containers.iter().any(|c| c.id == container_id),
        "container left behind: {containers:?}"
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn client_recovers_after_containerd_restarts() {
    let lab = support::lab("cri::lab::client_recovers_after_containerd_restarts").await;
    let client = lab.client().await;
    client
        .version()
        .await
        .expect("containerd answers before the restart");
    // The script returns once containerd's CRI plugin answers (the explicit signal): the very
    // next call must succeed on the client's old, broken connection, since a broken connection
    // is retried once on a new one (no polling that would hide a failed first call).
    lab.run_lab_script("restart-containerd");
    let images = client
        .list_images()
        .await
        .expect("the first call after the restart succeeds: one retry on a new connection");
    assert!(
        !images.is_empty(),
        "containerd keeps its images across a restart"
    );
    client.version().await.expect("later calls keep working");
}
