//! `diskPruneOrphans` against the lab's real containerd: an agent started with it removes, at
//! its first disk accounting, an orphaned snapshot made with the release's own `ctr` (gone from
//! containerd's listing and from the disk), journals it (reason orphan) and counts it in
//! `imagekeeper_disk_orphans_pruned_*`; the CRI images and a running container stay.

use imagekeeper::cri::ImageRuntime;

use super::{
    MIB, ctr, orphan_journal, run_ctr, scrape_until, spawn_disk_agent, upperdir, write_random,
};
use crate::support;

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn an_agent_with_disk_prune_orphans_removes_an_orphaned_snapshot_and_journals_it() {
    let lab = support::lab(
        "disk::lab::agent_prune::an_agent_with_disk_prune_orphans_removes_an_orphaned_snapshot_and_journals_it",
    )
    .await;
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35").reference.clone();
    client
        .pull_image(&busybox, "", None)
        .await
        .expect("pull busybox");
    let (_pod, container) = support::run_in_new_pod(
        &lab,
        &client,
        "disk-lab-auto",
        &support::sleeper("kept", &busybox),
    )
    .await;
    let orphan = format!("imagekeeper-disk-lab-auto-{}", std::process::id());
    // Removed whatever happens (an error ignored: the agent should have removed it).
    struct Gone<'a>(&'a support::Lab, &'a str);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            let _ = ctr(self.0, "k8s.io")
                .args(["snapshots", "rm", self.1])
                .output();
        }
    }
    let _gone = Gone(&lab, &orphan);
    let parent = run_ctr(&lab, "k8s.io", &["snapshots", "ls"])
        .lines()
        .find(|l| l.trim_end().ends_with("Committed"))
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .expect("a committed snapshot in k8s.io");
    run_ctr(&lab, "k8s.io", &["snapshots", "prepare", &orphan, &parent]);
    let upper = upperdir(&lab, "k8s.io", &orphan);
    write_random(&upper.join("written"), MIB);
    let images_before = run_ctr(&lab, "k8s.io", &["images", "ls", "-q"]);

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let (mut agent, _notify) = spawn_disk_agent(&lab, dir.path(), &["diskPruneOrphans=0s"]);
    let metrics = agent.metrics_address().await;
    // The agent's first accounting runs at its start; its prune follows it.
    let scraped = scrape_until(
        &metrics,
        "the agent's prune after its first disk accounting",
        std::time::Duration::from_secs(90),
        |text| {
            text.lines().any(|l| {
                l.strip_prefix("imagekeeper_disk_orphans_pruned_total{result=\"removed\"} ")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .is_some_and(|n| n >= 1)
            })
        },
    )
    .await;
    let freed: u64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix("imagekeeper_disk_orphans_pruned_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("imagekeeper_disk_orphans_pruned_bytes_total");
    assert!(
        freed >= MIB,
        "freed {freed} bytes, the orphan held 1 MiB:\n{scraped}"
    );

    let snapshots = run_ctr(&lab, "k8s.io", &["snapshots", "ls"]);
    assert!(!snapshots.contains(&orphan), "{snapshots}");
    assert!(!upper.exists(), "the orphan's directory is freed");
    assert_eq!(
        run_ctr(&lab, "k8s.io", &["images", "ls", "-q"]),
        images_before,
        "the CRI images stay"
    );
    let tasks = run_ctr(&lab, "k8s.io", &["tasks", "ls"]);
    assert!(
        tasks
            .lines()
            .any(|l| l.contains(container.as_str()) && l.contains("RUNNING")),
        "the container runs: {tasks}"
    );

    let journal = orphan_journal(&db);
    assert!(
        journal.as_array().expect("entries").iter().any(|e| e["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("snapshot:k8s.io/")
                && id.ends_with(&format!("/{orphan}"))
                && e["reason"] == "orphan")),
        "{journal:#}"
    );
    drop(agent);
}
