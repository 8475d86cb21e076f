//! Image volumes on the lab's real containerd (named `gc::volumes::lab::...`, run one at a
//! time), on whichever release the lab runs (lab.env's CRI_LAB_CONTAINERD).
//!
//! containerd 2.1 serves them: a CreateContainer mount with `image` set (CRI Mount field 9, an
//! ImageSpec; it must be read-only) mounts the image's filesystem in the container, and its
//! ContainerStatus gives the mount back. imagekeeper reads those mounts at detect
//! (`ImageGcManager::read_image_volumes`, one ContainerStatus per container) and counts an
//! image so mounted as in use (`gc::detect::images_in_use` / `volume_uses`), as kubelet master
//! does (pkg/kubelet/images/image_gc_manager.go, `handleImageVolumes`: a mount whose
//! `Image.Image` is an image's id puts it in `imagesInUse`). 1.6 and 1.7 serve none: the test
//! asserts what each answers.

use std::sync::Arc;
use std::time::Duration;

use imagekeeper::cri::{ContainerSpec, CriClient, ImageRuntime, MountSpec};
use imagekeeper::gc::{GcConfig, ImageGcManager, PinPatterns};
use imagekeeper::model::UnixNanos;
use imagekeeper::store::Store;

use crate::support::{self, ContainerdRelease, Lab, LabImage};

const T0: i64 = 1_800_000_000;

/// A container of busybox that lists the image volume at /volume, then sleeps.
fn volume_user(busybox: &str, volume: &str, readonly: bool) -> ContainerSpec {
    ContainerSpec {
        name: "volume-user".to_owned(),
        image: busybox.to_owned(),
        command: vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "ls /volume/data; exec sleep 3600".to_owned(),
        ],
        mounts: vec![MountSpec {
            container_path: "/volume".to_owned(),
            readonly,
            image: Some(volume.to_owned()),
            ..MountSpec::default()
        }],
        ..ContainerSpec::default()
    }
}

/// A GC manager over the lab whose pins keep every image listed now except `volume` (so its
/// DeleteUnusedImages may remove only that one, and nothing another lab test needs).
async fn gc_sparing_all_but(
    client: &CriClient,
    dir: &std::path::Path,
    volume: &LabImage,
) -> ImageGcManager<CriClient> {
    let pins = client
        .list_images()
        .await
        .expect("ListImages answers")
        .into_iter()
        .filter(|image| image.id.as_str() != volume.image_id)
        .flat_map(|image| image.repo_tags.into_iter().chain(image.repo_digests))
        .collect();
    let store =
        Arc::new(Store::open(&dir.join("records.redb"), UnixNanos::from_secs(T0)).expect("store"));
    let config = GcConfig {
        pins: PinPatterns::new(pins),
        ..GcConfig::default()
    };
    ImageGcManager::new(client.clone(), store, config).expect("policy")
}

async fn listed(client: &CriClient, image: &LabImage) -> bool {
    support::listed_image_ids(client)
        .await
        .contains(&image.image_id)
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn on_2_1_an_image_mounted_as_a_volume_is_in_use_for_gc_until_its_container_goes_and_1_6_and_1_7_refuse_the_mount()
 {
    let lab = support::lab(
        "gc::volumes::lab::on_2_1_an_image_mounted_as_a_volume_is_in_use_for_gc_until_its_container_goes_and_1_6_and_1_7_refuse_the_mount",
    ).await;
    let release = lab.containerd_release();
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35").clone();
    let volume = lab.image("data:20mb").clone();
    for image in [&busybox, &volume] {
        client
            .pull_image(&image.reference, "", None)
            .await
            .expect("pull");
    }
    // The kubelet mounts the image id its PullImage returned.
    let spec = volume_user(&busybox.reference, &volume.image_id, true);
    if !release.is_v2() {
        refused_on_1_6_and_1_7(&lab, &client, release, &spec).await;
        return;
    }

    // 2.x refuses a writable image mount.
    let sandbox = support::sandbox_spec(&lab, "ik-volume-writable");
    let sandbox_id = client
        .run_pod_sandbox(&sandbox)
        .await
        .expect("RunPodSandbox");
    let writable_pod = support::PodGuard {
        endpoint: lab.endpoint.clone(),
        sandbox_id: sandbox_id.clone(),
    };
    let writable = volume_user(&busybox.reference, &volume.image_id, false);
    let err = client
        .create_container(&sandbox_id, &sandbox, &writable)
        .await
        .expect_err("containerd 2.1 refuses a writable image mount");
    assert!(
        err.to_string()
            .contains("readonly must be true while mount image"),
        "containerd 2.1's answer: {err}"
    );
    drop(writable_pod);

    // A read-only image mount runs: the container lists the image's files.
    let (pod, container_id) = support::run_in_new_pod(&lab, &client, "ik-volume-user", &spec).await;
    let log = lab
        .pod_log_dir
        .join(format!("ik-volume-user-{}", std::process::id()));
    let log = log.join("volume-user.log");
    // The container writes its log when it runs, on its own: polled (another process's
    // write, which no signal announces); the deadline only guards against a hang.
    support::wait_for(
        "the container to list the image volume's files in its log",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("blob-20mb.bin").then_some(())
        },
    )
    .await;
    let status = client
        .container_status(&container_id)
        .await
        .expect("ContainerStatus answers");
    assert!(
        status.image_volumes.contains(&volume.image_id),
        "ContainerStatus gives the image mount back: {status:?}"
    );

    // DeleteUnusedImages (the kubelet eviction manager's call: every unused image goes)
    // keeps the volume's image while its container exists...
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = gc_sparing_all_but(&client, dir.path(), &volume).await;
    let at = |s: i64| UnixNanos::from_secs(T0 + s);
    gc.detect(at(0)).await.expect("detect");
    let report = gc.delete_unused_images(at(3600)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        report.removed.is_empty(),
        "the volume's image is in use: {:?}",
        report.removed
    );
    assert!(
        listed(&client, &volume).await,
        "containerd still lists the image mounted as a volume"
    );

    // ...and removes it once the container is gone (the same call, so the test can fail).
    drop(pod);
    let report = gc.delete_unused_images(at(7200)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(removed, [volume.image_id.as_str()], "{report:?}");
    assert!(!listed(&client, &volume).await, "removed from containerd");
    // Leave it in place for whoever runs next.
    client
        .pull_image(&volume.reference, "", None)
        .await
        .expect("pull back");
}

/// containerd 1.6 and 1.7 have no image volumes. Both answer a CreateContainer with an image
/// mount with the same error (seen on this machine), asserted here.
async fn refused_on_1_6_and_1_7(
    lab: &Lab,
    client: &CriClient,
    release: ContainerdRelease,
    spec: &ContainerSpec,
) {
    let sandbox = support::sandbox_spec(lab, "ik-volume-user");
    let sandbox_id = client
        .run_pod_sandbox(&sandbox)
        .await
        .expect("RunPodSandbox");
    let _pod = support::PodGuard {
        endpoint: lab.endpoint.clone(),
        sandbox_id: sandbox_id.clone(),
    };
    let answer = client.create_container(&sandbox_id, &sandbox, spec).await;
    println!("containerd {}: {answer:?}", release.name());
    let err = answer.expect_err("containerd 1.6 and 1.7 create no container with an image mount");
    // Neither knows Mount's `image` (field 9): each takes the mount for a bind mount of its
    // empty host path and fails making it.
    assert!(
        err.to_string()
            .contains("failed to mkdir \"\": mkdir : no such file or directory"),
        "containerd {}: {err}",
        release.name()
    );
}
