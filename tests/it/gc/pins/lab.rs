//! Pins and irreplaceable images against the real containerd of `scripts/cri-lab` (any release; named
//! `gc::pins::lab::...`, run one at a time): through the library with the injected clock (a
//! pin until T keeps its image through prune before T, and prune removes it at T), through the
//! CLI with the real clock (pin, prune, unpin, prune), an image imported with `ctr images
//! import` (no repo digest) kept by prune and removed with `protectIrreplaceable = false`,
//! and the sandbox image as containerd's verbose Status says it (1.6 and 1.7; 2.1 does not say).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use imagekeeper::cri::ImageRuntime;
use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager};
use imagekeeper::model::{ImagePin, PinKey, UnixNanos};
use imagekeeper::store::Batch;

use crate::support::{self, ContainerdRelease};

const T0: i64 = 1_800_000_000;

fn at(secs: i64) -> UnixNanos {
    UnixNanos::from_secs(T0 + secs)
}

fn imagekeeper(args: &[&str]) -> std::process::Output {
    support::bin::run(args)
}

fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_pin_for_3s_keeps_its_image_through_prune_and_prune_removes_it_once_expired() {
    let lab = support::lab("a_pin_for_3s_keeps_its_image_through_prune").await;
    let client = lab.client().await;
    let row = lab.image("data:1mb").clone();
    client
        .pull_image(&row.reference, "", None)
        .await
        .expect("pull");
    let (_dir, store) = crate::support::temp_store(at(0));
    let store = Arc::new(store);
    let manager = ImageGcManager::new(
        client.clone(),
        store.clone(),
        GcConfig {
            policy: GcPolicy {
                min_age: std::time::Duration::ZERO,
                ..GcPolicy::default()
            },
            sandbox_image: Some(lab.sandbox_image.clone()),
            protect_irreplaceable: true,
            ..GcConfig::default()
        },
    )
    .expect("manager");
    manager.detect(at(0)).await.expect("detect");
    // `pin REF --for 3s` at T0: until T0 + 3 s.
    let mut batch = Batch::new();
    batch.put_pin(
        PinKey::new(row.reference.clone(), ""),
        ImagePin {
            created_at: at(0),
            until: at(3),
            reason: "lab".into(),
        },
    );
    store.apply(&batch).expect("pin");
    let report = manager.delete_unused_images(at(1)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        !report
            .removed
            .iter()
            .any(|r| r.key.image_id.as_str() == row.image_id),
        "pinned until T0+3s, pruned at T0+1s"
    );
    assert!(
        support::listed_image_ids(&client)
            .await
            .contains(&row.image_id)
    );
    let report = manager.delete_unused_images(at(4)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        report
            .removed
            .iter()
            .any(|r| r.key.image_id.as_str() == row.image_id),
        "the pin expired at T0+3s: {:?}",
        report.removed
    );
    assert!(
        !support::listed_image_ids(&client)
            .await
            .contains(&row.image_id)
    );
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn the_cli_pin_keeps_an_image_through_prune_and_unpin_lets_prune_remove_it() {
    let lab = support::lab("the_cli_pin_keeps_an_image_through_prune").await;
    let client = lab.client().await;
    let row = lab.image("data:5mb").clone();
    client
        .pull_image(&row.reference, "", None)
        .await
        .expect("pull");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    let common = [
        "--db",
        db.to_str().expect("utf-8"),
        "--admin-socket",
        socket.to_str().expect("utf-8"),
        "--container-runtime-endpoint",
        lab.endpoint.as_str(),
        "--minimum-image-ttl-duration",
        "0s",
    ];
    let run = |first: &[&str]| {
        let mut args: Vec<&str> = first.to_vec();
        args.extend_from_slice(&common);
        imagekeeper(&args)
    };
    ok(&run(&[
        "pin",
        &row.reference,
        "--for",
        "1h",
        "--reason",
        "lab",
    ]));
    let listing = ok(&run(&["pins"]));
    assert!(
        listing.contains(&row.reference) && listing.contains("active"),
        "{listing}"
    );
    ok(&run(&["prune"]));
    assert!(
        support::listed_image_ids(&client)
            .await
            .contains(&row.image_id),
        "pinned: prune kept it"
    );
    let pins = ok(&run(&["pins", "-o", "json"]));
    assert!(
        pins.contains(&row.image_id),
        "the pin names the image: {pins}"
    );
    ok(&run(&["unpin", &row.reference]));
    ok(&run(&["prune"]));
    assert!(
        !support::listed_image_ids(&client)
            .await
            .contains(&row.image_id),
        "unpinned: prune removed it"
    );
}

/// `skopeo copy` of a lab image to a docker-archive, then `ctr images import`: an image with
/// a tag and no repo digest, as side-loaded and airgap images are.
fn import(lab: &support::Lab, reference: &str, name: &str, dir: &Path) {
    let tar = dir.join("image.tar");
    let status = Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("docker-archive:{}:{name}", tar.display()))
        .status()
        .expect("run skopeo");
    assert!(status.success(), "skopeo copy: {status}");
    let status = lab
        .ctr()
        .args(["images", "import"])
        .arg(&tar)
        .status()
        .expect("run ctr");
    assert!(status.success(), "ctr images import: {status}");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn an_imported_image_is_kept_by_prune_and_removed_with_protect_irreplaceable_false() {
    let lab = support::lab("an_imported_image_is_kept_by_prune").await;
    let client = lab.client().await;
    // containerd 1.6 and 1.7 name their sandbox image in the verbose Status (the CRI config's
    // sandboxImage); 2.x's Status carries no image config (its sandbox image is listed
    // `pinned: true` instead, which keeps it): imagekeeper then takes the configured one.
    let named = match lab.containerd_release() {
        ContainerdRelease::V1_6 | ContainerdRelease::V1_7 => Some(lab.sandbox_image.as_str()),
        ContainerdRelease::V2_1 | ContainerdRelease::V2_3 | ContainerdRelease::V2_4 => None,
    };
    assert_eq!(
        client.sandbox_image().await.expect("status").as_deref(),
        named,
        "containerd {}'s verbose Status",
        lab.containerd_release().name()
    );
    let row = lab.image("data:20mb").clone();
    let dir = tempfile::tempdir().expect("temp dir");
    let name = "docker.io/imagekeeper-lab/airgap:1";
    // The same image pulled earlier would lend the import its repo digest: gone first.
    let _ = client.remove_image(&row.image_id, "").await;
    import(&lab, &row.reference, name, dir.path());
    // containerd's CRI learns of an image created through the images service (as `ctr
    // images import` creates it) from its event stream, after `ctr` has returned: polled.
    let imported = support::wait_for(
        "the CRI to list the imported image",
        std::time::Duration::from_secs(30),
        || async { client.image_status(name, "").await.expect("image status") },
    )
    .await;
    assert!(imported.repo_digests.is_empty(), "{imported:?}");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "prune",
            "--db",
            db.to_str().expect("utf-8"),
            "--admin-socket",
            socket.to_str().expect("utf-8"),
            "--container-runtime-endpoint",
            lab.endpoint.as_str(),
            "--minimum-image-ttl-duration",
            "0s",
        ];
        args.extend_from_slice(extra);
        imagekeeper(&args)
    };
    ok(&run(&[]));
    assert!(
        support::listed_image_ids(&client)
            .await
            .contains(imported.id.as_str()),
        "irreplaceable: kept"
    );
    let plan = ok(&run(&["--dry-run", "-o", "json"]));
    assert!(!plan.contains(imported.id.as_str()), "{plan}");
    let plan = ok(&run(&[
        "--dry-run",
        "--protect-irreplaceable=false",
        "-o",
        "json",
    ]));
    assert!(plan.contains(imported.id.as_str()), "{plan}");
    ok(&run(&["--protect-irreplaceable=false"]));
    assert!(
        !support::listed_image_ids(&client)
            .await
            .contains(imported.id.as_str()),
        "--protect-irreplaceable=false: removed"
    );
}
