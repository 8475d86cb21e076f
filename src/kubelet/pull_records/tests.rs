use std::path::PathBuf;

use super::*;

/// The time the tests read intents at: the wall clock (files written by the test are fresh),
/// with the default intent max age.
fn now() -> IntentAge {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    IntentAge::new(
        UnixNanos(i64::try_from(since.as_nanos()).expect("before 2262")),
        DEFAULT_INTENT_MAX_AGE,
    )
}

/// A copy of the kubelet's testdata records (`tests/kubelet-pull-records`), written now: an
/// intent's age is its file's mtime, and a checkout more than a day old would make the
/// repository's files stale intents.
fn fixtures() -> tempfile::TempDir {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubelet-pull-records");
    let copy = tempfile::tempdir().expect("tempdir");
    copy_tree(&source, copy.path());
    copy
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read fixtures") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).expect("read")).expect("write");
        }
    }
}

fn intent_json(version: &str, image: &str) -> String {
    format!(
        r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/{version}","image":"{image}"}}"#
    )
}

fn pulled_json(image_ref: &str, time: &str) -> String {
    format!(
        r#"{{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"{time}","imageRef":"{image_ref}","credentialMapping":{{}}}}"#
    )
}

/// A kubelet root with the given files under image_manager/pulling and pulled.
fn root_with(pulling: &[(&str, &[u8])], pulled: &[(&str, &[u8])]) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    for (dir, files) in [("pulling", pulling), ("pulled", pulled)] {
        let dir = root.path().join("image_manager").join(dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write");
        }
    }
    root
}

#[test]
fn file_names_are_the_kubelets_sha256_of_the_image_or_image_ref() {
    // The names of the kubelet's own testdata files.
    assert_eq!(
        record_file_name("repo.repo/test/test:v1"),
        "sha256-ee81caca15454863449fb55a1d942904d56d5ed9f9b20a7cb3453944ea2c7e11"
    );
    assert_eq!(
        record_file_name("testimageref"),
        "sha256-b3c0cc4278800b03a308ceb2611161430df571ca733122f0a40ac8b9792a9064"
    );
}

#[test]
fn the_kubelets_testdata_and_v1beta1_records_are_read_and_tmp_files_ignored() {
    let fixtures = fixtures();
    let reader = PullRecordsReader::new(fixtures.path());
    let intents = reader.intents(now());
    assert!(intents.skipped.is_empty(), "{:?}", intents.skipped);
    let mut images: Vec<String> = intents.found.into_iter().map(|i| i.image).collect();
    images.sort();
    assert_eq!(
        images,
        vec!["docker.io/library/busybox:1.36", "repo.repo/test/test:v1"]
    );

    let pulled = reader.pulled();
    assert!(pulled.skipped.is_empty(), "{:?}", pulled.skipped);
    let mut records: Vec<(String, Option<UnixNanos>)> = pulled
        .found
        .into_iter()
        .map(|r| (r.image_ref, r.last_updated))
        .collect();
    records.sort();
    assert_eq!(
        records,
        vec![
            (
                "sha256:9ad63333ebc3a1cde6c5e2b6c5e9a0a2c1e4b6f0e3f8f6a1b2c3d4e5f6a7b8c9".into(),
                parse_rfc3339("2026-11-20T08:00:00Z")
            ),
            (
                "test-brokenhash".into(),
                parse_rfc3339("2024-10-21T12:26:40Z")
            ),
            ("testimageref".into(), parse_rfc3339("2024-10-21T12:26:40Z")),
        ]
    );
}

/// A file name, its bytes, and the error it must be skipped with.
type Case<'a> = (&'a str, &'a [u8], fn(&RecordError) -> bool);

#[test]
fn damaged_misnamed_and_foreign_files_are_skipped_one_by_one() {
    let good = intent_json("v1alpha1", "busybox:1.36");
    let good_name = record_file_name("busybox:1.36");
    let truncated = &good.as_bytes()[..good.len() / 2];
    let other_version = intent_json("v2", "nginx:1");
    let pulled_as_intent = pulled_json("sha256:abc", "2026-01-01T00:00:00Z");
    let empty_image = intent_json("v1beta1", "");
    let nul = [0u8, 159, 146, 150];
    let cases: [Case; 7] = [
        ("sha256-aa01", truncated, |e| {
            matches!(e, RecordError::Json(_))
        }),
        ("sha256-aa02", b"", |e| matches!(e, RecordError::Json(_))),
        ("sha256-aa03", &nul, |e| matches!(e, RecordError::Json(_))),
        (
            "sha256-aa04",
            other_version.as_bytes(),
            |e| matches!(e, RecordError::ApiVersion(v) if v == "kubelet.config.k8s.io/v2"),
        ),
        ("sha256-aa05", pulled_as_intent.as_bytes(), |e| {
            matches!(e, RecordError::Kind { .. })
        }),
        ("sha256-aa06", empty_image.as_bytes(), |e| {
            matches!(e, RecordError::Empty("image"))
        }),
        // Valid content under a name that is not its hash.
        ("sha256-aa07", good.as_bytes(), |e| {
            matches!(e, RecordError::NameMismatch { .. })
        }),
    ];
    let mut files: Vec<(&str, &[u8])> = cases.iter().map(|(n, b, _)| (*n, *b)).collect();
    files.push((&good_name, good.as_bytes()));
    // Not named sha256-*: not the kubelet's, not read.
    files.push(("notes.txt", b"garbage"));
    let root = root_with(&files, &[]);
    let scan = PullRecordsReader::new(root.path()).intents(now());
    assert_eq!(
        scan.found,
        vec![PullIntent {
            image: "busybox:1.36".into()
        }]
    );
    assert_eq!(scan.skipped.len(), cases.len(), "{:?}", scan.skipped);
    for (name, _, expected) in cases {
        let (_, error) = scan
            .skipped
            .iter()
            .find(|(p, _)| p.file_name().is_some_and(|f| f == name))
            .unwrap_or_else(|| panic!("{name} not skipped"));
        assert!(expected(error), "{name}: {error}");
    }
}

#[test]
fn a_pulled_record_with_a_bad_time_or_no_image_ref_is_skipped() {
    let bad_time = pulled_json("sha256:a", "yesterday");
    let before_1970 = pulled_json("sha256:b", "1969-12-31T23:59:59Z");
    let no_ref = pulled_json("", "2026-01-01T00:00:00Z");
    let no_time = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","imageRef":"sha256:c","lastUpdatedTime":null}"#;
    let root = root_with(
        &[],
        &[
            (&record_file_name("sha256:a"), bad_time.as_bytes()),
            (&record_file_name("sha256:b"), before_1970.as_bytes()),
            (&record_file_name(""), no_ref.as_bytes()),
            (&record_file_name("sha256:c"), no_time.as_bytes()),
        ],
    );
    let scan = PullRecordsReader::new(root.path()).pulled();
    assert_eq!(
        scan.found,
        vec![PulledRecord {
            image_ref: "sha256:c".into(),
            last_updated: None
        }]
    );
    let mut reasons: Vec<String> = scan.skipped.iter().map(|(_, e)| e.to_string()).collect();
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("imageRef is empty")),
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.contains("lastUpdatedTime"))
            .count(),
        2,
        "{reasons:?}"
    );
}

#[test]
fn a_file_over_the_size_cap_is_skipped_without_being_read_whole() {
    let image = "big:1";
    let mut big = intent_json("v1alpha1", image).into_bytes();
    // Valid JSON with trailing whitespace, just over the cap.
    big.resize(
        usize::try_from(MAX_RECORD_FILE_BYTES).expect("fits") + 1,
        b' ',
    );
    let root = root_with(&[(&record_file_name(image), &big)], &[]);
    let scan = PullRecordsReader::new(root.path()).intents(now());
    assert!(scan.found.is_empty());
    assert!(matches!(scan.skipped[..], [(_, RecordError::TooLarge)]));
    // At the cap it is read.
    big.truncate(usize::try_from(MAX_RECORD_FILE_BYTES).expect("fits"));
    std::fs::write(
        root.path()
            .join("image_manager/pulling")
            .join(record_file_name(image)),
        &big,
    )
    .expect("write");
    assert_eq!(
        PullRecordsReader::new(root.path())
            .intents(now())
            .found
            .len(),
        1
    );
}

#[test]
fn symlinks_fifos_and_directories_are_not_followed_or_blocked_on() {
    let target = tempfile::NamedTempFile::new().expect("temp");
    std::fs::write(target.path(), intent_json("v1alpha1", "linked:1")).expect("write");
    let root = root_with(&[], &[]);
    let pulling = root.path().join("image_manager/pulling");
    std::os::unix::fs::symlink(target.path(), pulling.join(record_file_name("linked:1")))
        .expect("symlink");
    let fifo = pulling.join(record_file_name("fifo:1"));
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(pulling.join(record_file_name("dir:1"))).expect("mkdir");
    let scan = PullRecordsReader::new(root.path()).intents(now());
    assert!(scan.found.is_empty());
    assert_eq!(scan.skipped.len(), 2, "{:?}", scan.skipped);
    assert!(
        scan.skipped
            .iter()
            .all(|(_, e)| matches!(e, RecordError::NotAFile))
    );
}

#[test]
fn a_missing_image_manager_directory_reads_as_no_records() {
    let root = tempfile::tempdir().expect("tempdir");
    let reader = PullRecordsReader::new(root.path());
    for _ in 0..2 {
        let (intents, pulled) = (reader.intents(now()), reader.pulled());
        assert!(intents.found.is_empty() && intents.skipped.is_empty());
        assert!(pulled.found.is_empty() && pulled.skipped.is_empty());
    }
    assert!(lock(&reader.warned).missing_logged);
    assert!(
        !root.path().join("image_manager").exists(),
        "created a directory"
    );
}

#[test]
fn each_bad_file_is_warned_about_once_and_nothing_is_changed() {
    let root = root_with(&[("sha256-bad", b"{")], &[("sha256-bad", b"[]")]);
    let before = listing(root.path());
    let reader = PullRecordsReader::new(root.path());
    for _ in 0..3 {
        assert_eq!(reader.intents(now()).skipped.len(), 1);
        assert_eq!(reader.pulled().skipped.len(), 1);
    }
    assert_eq!(lock(&reader.warned).files.len(), 2);
    assert_eq!(listing(root.path()), before);
}

/// Every path under `dir` with its content and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            let content = if meta.is_file() {
                std::fs::read(&path).expect("read")
            } else {
                Vec::new()
            };
            out.push((path, content, meta.modified().expect("mtime")));
        }
    }
    out.sort();
    out
}

/// The file's mtime set to `t`.
fn set_mtime(path: &Path, t: UnixNanos) {
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    let at = std::time::SystemTime::UNIX_EPOCH
        + std::time::Duration::from_nanos(u64::try_from(t.0).expect("after 1970"));
    file.set_modified(at).expect("set mtime");
}

#[test]
fn an_intent_older_than_the_max_age_is_stale_and_not_found() {
    let image = "busybox:1.36";
    let root = root_with(
        &[(
            &record_file_name(image),
            intent_json("v1alpha1", image).as_bytes(),
        )],
        &[],
    );
    let file = root
        .path()
        .join("image_manager/pulling")
        .join(record_file_name(image));
    let written = UnixNanos::from_secs(1_800_000_000);
    set_mtime(&file, written);
    let reader = PullRecordsReader::new(root.path());
    let at = |now: UnixNanos| IntentAge::new(now, DEFAULT_INTENT_MAX_AGE);

    // Read when written: it protects.
    let scan = reader.intents(at(written));
    assert_eq!(
        scan.found,
        vec![PullIntent {
            image: image.into()
        }]
    );
    assert!(scan.stale.is_empty());
    assert_eq!(reader.stale_intents(), 0);
    // At the max age exactly it still does.
    assert_eq!(
        reader
            .intents(at(written.saturating_add(DEFAULT_INTENT_MAX_AGE)))
            .found
            .len(),
        1
    );

    // Read 48 h later: stale, found no more.
    let later = written.saturating_add(std::time::Duration::from_secs(48 * 3600));
    let scan = reader.intents(at(later));
    assert!(scan.found.is_empty(), "{:?}", scan.found);
    assert!(scan.skipped.is_empty(), "{:?}", scan.skipped);
    assert_eq!(
        scan.stale,
        vec![StaleIntent {
            image: image.into(),
            file: file.clone(),
            written,
            age_seconds: 48 * 3600,
            max_age_seconds: 24 * 3600,
        }]
    );
    assert_eq!(reader.stale_intents(), 1, "the metric's gauge");
    assert!(
        scan.stale[0].describe().contains("written 48h0m0s ago"),
        "{}",
        scan.stale[0].describe()
    );
    // A zero max age never makes an intent stale.
    assert_eq!(
        reader
            .intents(IntentAge::new(later, std::time::Duration::ZERO))
            .found
            .len(),
        1
    );
}

#[test]
fn past_the_cap_each_scan_logs_one_summary_line_not_one_per_file() {
    let files: Vec<(String, &[u8])> = (0..5)
        .map(|i| (format!("sha256-bad{i}"), &b"{"[..]))
        .collect();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let root = root_with(&files, &[]);
    let reader = PullRecordsReader::new(root.path()).with_warn_cap(2);
    for _ in 0..3 {
        assert_eq!(reader.intents(now()).skipped.len(), 5);
    }
    // Two files named once, then one summary line per scan for the three others.
    assert_eq!(reader.warning_lines(), 2 + 3);
    assert_eq!(lock(&reader.warned).files.len(), 2);
}

#[test]
fn symlinked_record_directories_are_not_followed_out_of_the_root() {
    let image = "linked:1";
    let elsewhere = root_with(
        &[(
            &record_file_name(image),
            intent_json("v1alpha1", image).as_bytes(),
        )],
        &[(
            &record_file_name("sha256:x"),
            pulled_json("sha256:x", "2026-01-01T00:00:00Z").as_bytes(),
        )],
    );
    // `pulling` and `pulled` links to directories outside the root.
    let root = tempfile::tempdir().expect("tempdir");
    let im = root.path().join("image_manager");
    std::fs::create_dir(&im).expect("mkdir");
    for dir in ["pulling", "pulled"] {
        std::os::unix::fs::symlink(
            elsewhere.path().join("image_manager").join(dir),
            im.join(dir),
        )
        .expect("symlink");
    }
    let reader = PullRecordsReader::new(root.path());
    for _ in 0..2 {
        let (intents, pulled) = (reader.intents(now()), reader.pulled());
        assert!(intents.found.is_empty() && intents.skipped.is_empty());
        assert!(pulled.found.is_empty() && pulled.skipped.is_empty());
        assert_eq!(reader.pulled_for("sha256:x"), None);
    }
    assert_eq!(
        lock(&reader.warned).linked_dirs.len(),
        2,
        "each logged once"
    );

    // `image_manager` itself a link.
    let root = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        elsewhere.path().join("image_manager"),
        root.path().join("image_manager"),
    )
    .expect("symlink");
    let reader = PullRecordsReader::new(root.path());
    assert!(reader.intents(now()).found.is_empty());
    assert!(reader.pulled().found.is_empty());
    assert_eq!(reader.pulled_for("sha256:x"), None);
    // The same directories read directly hold the records.
    let direct = PullRecordsReader::new(elsewhere.path());
    assert_eq!(direct.intents(now()).found.len(), 1);
    assert!(direct.pulled_for("sha256:x").is_some());
}

/// A stale intent in a file whose name is not its image's is refused as misnamed (skipped),
/// and so not counted stale as well.
#[test]
fn a_stale_intent_in_a_misnamed_file_is_skipped_not_stale() {
    let image = "busybox:1.36";
    let root = root_with(
        &[(
            &record_file_name("other:1"),
            intent_json("v1alpha1", image).as_bytes(),
        )],
        &[],
    );
    let file = root
        .path()
        .join("image_manager/pulling")
        .join(record_file_name("other:1"));
    let written = UnixNanos::from_secs(1_800_000_000);
    set_mtime(&file, written);
    let reader = PullRecordsReader::new(root.path());
    let later = written.saturating_add(std::time::Duration::from_secs(48 * 3600));
    let scan = reader.intents(IntentAge::new(later, DEFAULT_INTENT_MAX_AGE));
    assert!(scan.found.is_empty());
    assert!(scan.stale.is_empty(), "{:?}", scan.stale);
    assert_eq!(scan.skipped.len(), 1, "{:?}", scan.skipped);
    assert_eq!(reader.stale_intents(), 0);
}
