use super::*;
use crate::model::ImageId;

fn image(id: &str, tag: &str, size: u64, pinned: bool) -> RuntimeImage {
    RuntimeImage {
        id: ImageId(id.to_owned()),
        repo_tags: vec![tag.to_owned()],
        repo_digests: Vec::new(),
        size,
        pinned,
        runtime_handler: String::new(),
    }
}

fn set(name: &str, images: &[&str], until: i64) -> KeepSet {
    KeepSet {
        name: name.to_owned(),
        generation: 3,
        images: images.iter().map(|s| (*s).to_owned()).collect(),
        until: UnixNanos(until),
        priority: 0,
        reason: String::new(),
    }
}

#[test]
fn only_the_images_of_sets_in_force_that_the_runtime_does_not_list_are_pulled() {
    let listed = [image("sha256:a", "docker.io/library/x:1", 10, true)];
    let sets = [set("now", &["x:1", "y:1"], 0), set("over", &["z:1"], 50)];
    assert_eq!(absent_images(&sets, &listed, UnixNanos(100)), vec!["y:1"]);
}

#[test]
fn a_report_counts_present_pinned_failed_and_bytes_of_each_set() {
    let listed = [
        image("sha256:a", "docker.io/library/x:1", 10, true),
        image("sha256:b", "docker.io/library/y:1", 20, false),
    ];
    let sets = [
        set("a", &["x:1", "y:1", "bad:1"], 0),
        set("over", &["x:1"], 50),
    ];
    let failures = BTreeMap::from([(
        ("a".to_owned(), "bad:1".to_owned()),
        "ErrImagePull: not found".to_owned(),
    )]);
    let reports = reports(&sets, &listed, &failures, UnixNanos(100));
    assert_eq!(
        reports["a"],
        KeepSetReport {
            generation: 3,
            images: 3,
            present: 2,
            pinned: 1,
            failed: 1,
            bytes: 30,
            failures: vec![("bad:1".to_owned(), "ErrImagePull: not found".to_owned())],
            expired: false,
        }
    );
    assert!(!reports["a"].ready());
    assert!(reports["over"].expired);
    assert_eq!(reports["over"].present, 0);
}

#[test]
fn the_next_cycle_comes_just_after_the_first_lifetime_ends_or_sooner_when_failing() {
    let now = UnixNanos(1_000_000_000);
    let sets = [set("a", &["x:1"], 0), set("b", &["x:1"], 31_000_000_000)];
    assert_eq!(
        next_wait(&sets, false, now),
        Duration::from_secs(30) + Duration::from_millis(10)
    );
    assert_eq!(next_wait(&sets[..1], false, now), REFRESH_PERIOD);
    assert_eq!(next_wait(&sets[..1], true, now), RETRY_PERIOD);
}
