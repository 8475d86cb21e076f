//! The eviction journal through the GC manager (issue 15): GC's removals journaled with reason,
//! rank and the filesystem's usage; an image gone from the runtime that imagekeeper did not
//! remove journaled as external by detect, in the commit that deletes its record; an evicted
//! image seen again marked re-pulled and counted; names written at detect only when they
//! change.

use imagekeeper::model::{FsUsage, ImageNames, RemovalReason, Remover};

use super::*;

/// (image id, reason, rank, remover, re-pulled) of each journal entry, oldest first.
type Row = (String, Option<RemovalReason>, Option<u32>, Remover, bool);

fn journal(node: &Node) -> Vec<Row> {
    node.manager()
        .store()
        .journal()
        .expect("journal")
        .into_iter()
        .map(|(k, e)| {
            (
                k.key.image_id.0,
                e.reason,
                e.rank,
                e.remover,
                e.repulled_at.is_some(),
            )
        })
        .collect()
}

#[tokio::test]
async fn removals_by_gc_and_by_others_are_journaled_and_a_re_pull_is_marked_and_counted() {
    let node = Node::new(policy(80, 60, 0, 0));
    // Eviction order: a (never used), then b, c, d by last use; d stays in use.
    node.set_images(vec![
        image("a", 100),
        image("b", 100),
        image("c", 100),
        image("d", 100),
    ]);
    node.set_containers(vec![container("c1", "b")]);
    node.detect(10).await;
    node.set_containers(vec![container("c1", "c")]);
    node.detect(20).await;
    node.set_containers(vec![container("c1", "d")]);
    node.detect(30).await;
    // 1000 bytes, 100 available: 90% used; the low threshold (60%) frees 300.
    node.set_fs(1_000, 100);
    let report = node.gc(40).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["a", "b", "c"]);
    let entries = node.manager().store().journal().expect("journal");
    assert_eq!(
        journal(&node),
        [
            (
                "a".to_owned(),
                Some(RemovalReason::Space),
                Some(1),
                Remover::Imagekeeper,
                false
            ),
            (
                "b".to_owned(),
                Some(RemovalReason::Space),
                Some(2),
                Remover::Imagekeeper,
                false
            ),
            (
                "c".to_owned(),
                Some(RemovalReason::Space),
                Some(3),
                Remover::Imagekeeper,
                false
            ),
        ]
    );
    let (key, entry) = &entries[0];
    assert_eq!(key.removed_at, at(40));
    assert_eq!((entry.size, entry.first_detected), (100, at(10)));
    assert_eq!(
        entry.fs,
        Some(FsUsage {
            capacity: 1_000,
            used_before: 900,
            target_used: 600,
        })
    );
    // Every journaled image keeps its names for `inspect evictions`.
    let names = node
        .manager()
        .store()
        .names(&RecordKey::new("a", ""))
        .expect("names");
    assert_eq!(
        names.map(|n| n.repo_tags),
        Some(vec!["registry.example/a:1".to_owned()])
    );

    // Someone else removes d (crictl rmi): the next detect journals it as external.
    node.set_containers(vec![]);
    node.runtime.state().images.retain(|i| i.id.0 != "d");
    node.detect(50).await;
    assert_eq!(node.record("d"), None);
    let last = journal(&node).pop().expect("an entry");
    assert_eq!(last, ("d".to_owned(), None, None, Remover::External, false));
    assert!(
        node.manager()
            .store()
            .check_invariants()
            .expect("check")
            .is_empty()
    );

    // b is pulled back outside imagekeeper: the detect that sees it marks its entry re-pulled.
    node.runtime.state().images.push(image("b", 100));
    node.detect(100).await;
    let b = journal(&node).into_iter().find(|e| e.0 == "b").expect("b");
    assert!(b.4, "b is marked re-pulled");
    let counts = node.manager().metrics().repulls().counts();
    assert_eq!(
        counts,
        [
            ("age", 0),
            ("space", 1),
            ("unused", 0),
            ("inodes", 0),
            ("budget", 0),
            ("external", 0)
        ]
    );
    let delays = node.manager().metrics().repulls().delays();
    assert_eq!(delays.count(), 1);
    assert!((delays.sum() - 60.0).abs() < 1e-9, "{}", delays.sum());
    // Seen again at the next detect: no second count.
    node.detect(110).await;
    assert_eq!(node.manager().metrics().repulls().counts()[1], ("space", 1));

    // The dry run says that b, a candidate again, was evicted before and came back.
    let plan = node.manager().plan(at(120), true).await.expect("plan");
    let removal = plan
        .removals
        .iter()
        .find(|r| r.key.image_id.as_str() == "b")
        .expect("b is a candidate");
    assert!(
        removal
            .evicted_before
            .as_deref()
            .is_some_and(|n| n.starts_with("evicted before (space by imagekeeper")),
        "{removal:?}"
    );
    let b = plan
        .explanation
        .images
        .iter()
        .find(|i| i.key.image_id.as_str() == "b")
        .expect("b explained");
    let prior = b.evicted_before.expect("b was evicted before");
    assert_eq!((prior.removed_at, prior.repulled_at), (at(40), at(100)));
    assert!(
        b.reason.contains("evicted before (space by imagekeeper at")
            && b.reason.contains("1m0s later"),
        "{}",
        b.reason
    );
}

#[tokio::test]
async fn a_max_age_removal_is_journaled_with_reason_age_and_its_rank() {
    let node = Node::new(policy(90, 80, 0, 3_600));
    node.set_images(vec![image("old", 10), image("new", 10)]);
    node.set_fs(1_000, 900);
    node.detect(0).await;
    node.set_containers(vec![container("c1", "new")]);
    node.detect(3_000).await;
    node.set_containers(vec![]);
    let report = node.gc(3_700).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["old"]);
    let entries = node.manager().store().journal().expect("journal");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].1.reason, Some(RemovalReason::Age));
    assert_eq!(entries[0].1.rank, Some(1));
    assert_eq!(entries[0].1.fs, None);
}

#[tokio::test]
async fn names_are_written_at_detect_only_when_they_change() {
    let node = Node::new(GcPolicy::default());
    node.set_images(vec![image("a", 1)]);
    node.detect(10).await;
    let store = node.manager().store().clone();
    let key = RecordKey::new("a", "");
    let first = store.names(&key).expect("names").expect("stored");
    assert_eq!(first.repo_tags, ["registry.example/a:1"]);
    // Every detect commits once, its heartbeat; one repeated at the same instant commits
    // nothing: unchanged names are not written.
    node.detect(20).await;
    let commits = store.commits();
    node.detect(20).await;
    assert_eq!(store.commits(), commits, "unchanged names commit nothing");
    // Changed names ride in the next detect's one commit.
    node.runtime.state().images[0].repo_tags = vec!["registry.example/a:2".into()];
    node.runtime.state().images[0].repo_digests = vec!["registry.example/a@sha256:feed".into()];
    node.detect(30).await;
    assert_eq!(store.commits(), commits + 1);
    assert_eq!(
        store.names(&key).expect("names"),
        Some(ImageNames {
            repo_tags: vec!["registry.example/a:2".into()],
            repo_digests: vec!["registry.example/a@sha256:feed".into()],
        })
    );
}

/// Regression: `imagekeeper gc` (or `prune`) without journal flags builds its manager from a
/// config resolved with none; it prunes with the retention the file records (an agent's
/// 50,000 entries / 90 days), not the defaults (10,000 / 30 days), and leaves meta as it was.
#[tokio::test]
async fn a_manager_resolved_without_retention_flags_keeps_the_retention_the_file_records() {
    use imagekeeper::config::{AgentConfig, FileConfig, FlagValues};
    use imagekeeper::model::{EvictionNote, JournalRetention};
    use imagekeeper::store::{Batch, retention_keys};
    const DAY: i64 = 86_400;
    let resolved =
        AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default()).expect("valid");
    // The fake's images have no repo digest: irreplaceable by the agent's default.
    let mut node = Node::with_config(GcConfig {
        policy: policy(80, 60, 0, 0),
        protect_irreplaceable: false,
        ..resolved.gc
    });
    // The agent's run: its retention, and a removal journaled at day 10.
    let agents = JournalRetention {
        max_age: Duration::from_secs(90 * DAY as u64),
        max_entries: 50_000,
    };
    let store = node.manager().store().clone();
    store.set_journal_retention(agents);
    let old = RecordKey::new("old", "");
    let mut batch = Batch::new();
    batch.upsert(
        old.clone(),
        ImageRecord {
            first_detected: at(0),
            last_used: at(0),
            size: 10,
            pinned: false,
        },
    );
    store.apply(&batch).expect("apply");
    let mut batch = Batch::new();
    batch.evict(
        old.clone(),
        EvictionNote {
            removed_at: at(10 * DAY),
            reason: RemovalReason::Space,
            rank: 1,
            fs: None,
        },
    );
    store.apply(&batch).expect("apply");
    drop(store);
    // `gc` at day 50: a new process opens the file and builds its manager.
    node.maybe_restart(true);
    node.set_images(vec![image("a", 300), image("b", 300)]);
    node.detect(50 * DAY).await;
    node.set_fs(1_000, 100);
    let report = node.gc(50 * DAY).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(!removed_ids(&report).is_empty());
    let ids: Vec<String> = journal(&node).into_iter().map(|r| r.0).collect();
    assert!(
        ids.contains(&"old".to_owned()),
        "the 40-day-old entry was pruned: {ids:?}"
    );
    let store = node.manager().store();
    assert_eq!(store.journal_retention(), agents);
    assert_eq!(
        store.meta(retention_keys::MAX_ENTRIES).expect("meta"),
        Some(50_000)
    );
    assert_eq!(
        store.meta(retention_keys::MAX_AGE_SECS).expect("meta"),
        Some(90 * DAY)
    );
}

/// A reload (SIGHUP) applies a retention a flag or field sets to the store; one resolved with
/// none keeps the store's.
#[tokio::test]
async fn reconfigure_applies_a_set_journal_retention_and_keeps_the_store_s_otherwise() {
    use imagekeeper::model::JournalRetention;
    let node = Node::new(policy(80, 60, 0, 0));
    let set = JournalRetention {
        max_age: Duration::from_secs(7 * 86_400),
        max_entries: 123,
    };
    let config = node.manager().config();
    node.manager()
        .reconfigure(GcConfig {
            journal_retention: Some(set),
            ..config.clone()
        })
        .await
        .expect("valid");
    assert_eq!(node.manager().store().journal_retention(), set);
    node.manager()
        .reconfigure(GcConfig {
            journal_retention: None,
            ..config
        })
        .await
        .expect("valid");
    assert_eq!(node.manager().store().journal_retention(), set);
}
