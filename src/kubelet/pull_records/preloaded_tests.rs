//! The kubelet's observed preloaded records (`image_manager/observed-preloaded/`, kubelet
//! master pkg/kubelet/images/pullmanager/fs_pullrecords.go: `preloadedDir`,
//! `WriteImagePreloadedRecord`, `cacheFilename(record.ImageRef)`), read with the pulled
//! records' limits and damaged-file handling: one case per kind of file.

use super::*;

fn preloaded_json(version: &str, image_ref: &str, observed: &str) -> String {
    format!(
        r#"{{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/{version}","imageRef":"{image_ref}","observedImages":{observed}}}"#
    )
}

/// A kubelet root with `files` under image_manager/`dir`.
fn root_with(dir: &str, files: &[File]) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("image_manager").join(dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
    root
}

/// A record file's name and bytes.
type File = (String, Vec<u8>);

/// What reading one file must give: the record, or the error it is skipped with.
enum Want {
    Found(PreloadedRecord),
    Skipped(fn(&RecordError) -> bool),
}

fn record(image_ref: &str, observed: &[&str]) -> PreloadedRecord {
    PreloadedRecord {
        image_ref: image_ref.into(),
        observed_images: observed.iter().map(|s| (*s).to_owned()).collect(),
    }
}

#[test]
fn preloaded_records_are_read_or_skipped_like_pulled_records() {
    let named = |image_ref: &str, json: String| (record_file_name(image_ref), json.into_bytes());
    let good = preloaded_json("v1beta1", "sha256:a", r#"{"registry.example/app":{}}"#);
    let mut oversize = preloaded_json("v1beta1", "sha256:big", "{}").into_bytes();
    oversize.resize(
        usize::try_from(MAX_RECORD_FILE_BYTES).expect("fits") + 1,
        b' ',
    );
    let cases: Vec<(&str, File, Want)> = vec![
        (
            "v1beta1, two names (sorted), values of any shape skipped unread",
            named(
                "sha256:b",
                preloaded_json(
                    "v1beta1",
                    "sha256:b",
                    r#"{"registry.example/z":{"someField":"x"},"docker.io/library/busybox":{}}"#,
                ),
            ),
            Want::Found(record(
                "sha256:b",
                &["docker.io/library/busybox", "registry.example/z"],
            )),
        ),
        (
            "v1alpha1, unknown fields ignored",
            named(
                "sha256:c",
                r#"{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","imageRef":"sha256:c","observedImages":{"app":{}},"newerField":[1,2]}"#.to_owned(),
            ),
            Want::Found(record("sha256:c", &["app"])),
        ),
        (
            "no observedImages: a record with no names",
            named(
                "sha256:d",
                r#"{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"sha256:d"}"#.to_owned(),
            ),
            Want::Found(record("sha256:d", &[])),
        ),
        (
            "truncated",
            (
                record_file_name("sha256:a"),
                good.as_bytes()[..good.len() / 2].to_vec(),
            ),
            Want::Skipped(|e| matches!(e, RecordError::Json(_))),
        ),
        (
            "empty file",
            ("sha256-ee01".to_owned(), Vec::new()),
            Want::Skipped(|e| matches!(e, RecordError::Json(_))),
        ),
        (
            "observedImages not an object",
            named(
                "sha256:e",
                preloaded_json("v1beta1", "sha256:e", r#"["app"]"#),
            ),
            Want::Skipped(|e| matches!(e, RecordError::Json(_))),
        ),
        (
            "wrong kind: a pulled record in observed-preloaded",
            named(
                "sha256:f",
                r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"sha256:f","lastUpdatedTime":"2026-01-01T00:00:00Z"}"#.to_owned(),
            ),
            Want::Skipped(
                |e| matches!(e, RecordError::Kind { expected: "ImagePreloadedRecord", .. }),
            ),
        ),
        (
            "an apiVersion the kubelet does not write",
            named("sha256:g", preloaded_json("v2", "sha256:g", "{}")),
            Want::Skipped(|e| matches!(e, RecordError::ApiVersion(_))),
        ),
        (
            "empty imageRef",
            named("", preloaded_json("v1beta1", "", r#"{"app":{}}"#)),
            Want::Skipped(|e| matches!(e, RecordError::Empty("imageRef"))),
        ),
        (
            "valid content under another record's name",
            ("sha256-ee02".to_owned(), good.clone().into_bytes()),
            Want::Skipped(|e| matches!(e, RecordError::NameMismatch { .. })),
        ),
        (
            "larger than the cap",
            (record_file_name("sha256:big"), oversize),
            Want::Skipped(|e| matches!(e, RecordError::TooLarge)),
        ),
    ];
    for (what, file, want) in cases {
        let root = root_with("observed-preloaded", std::slice::from_ref(&file));
        let reader = PullRecordsReader::new(root.path());
        let scan = reader.preloaded();
        match want {
            Want::Found(expected) => {
                assert_eq!(scan.found, vec![expected], "{what}");
                assert!(scan.skipped.is_empty(), "{what}: {:?}", scan.skipped);
            }
            Want::Skipped(is) => {
                assert!(scan.found.is_empty(), "{what}: {:?}", scan.found);
                assert!(
                    matches!(&scan.skipped[..], [(_, e)] if is(e)),
                    "{what}: {:?}",
                    scan.skipped
                );
                // Warned about once, however often it is read.
                reader.preloaded();
                assert_eq!(reader.warning_lines(), 1, "{what}");
            }
        }
    }
}

#[test]
fn a_preloaded_record_in_pulled_is_refused_as_the_wrong_kind() {
    let preloaded = preloaded_json("v1beta1", "sha256:a", r#"{"app":{}}"#);
    let root = root_with(
        "pulled",
        &[(record_file_name("sha256:a"), preloaded.into_bytes())],
    );
    let scan = PullRecordsReader::new(root.path()).pulled();
    assert!(scan.found.is_empty());
    assert!(matches!(
        &scan.skipped[..],
        [(
            _,
            RecordError::Kind {
                expected: "ImagePulledRecord",
                ..
            }
        )]
    ));
}

#[test]
fn a_missing_observed_preloaded_directory_is_no_records_and_not_logged() {
    // The kubelet creates `pulling` and `pulled` at its start and `observed-preloaded` only at
    // its first preloaded record: its absence beside the other two is the normal case.
    let root = root_with("pulled", &[]);
    let reader = PullRecordsReader::new(root.path());
    let scan = reader.preloaded();
    assert!(scan.found.is_empty() && scan.skipped.is_empty());
    assert!(!lock(&reader.warned).missing_logged);
    assert_eq!(reader.warning_lines(), 0);
    assert!(
        !root
            .path()
            .join("image_manager/observed-preloaded")
            .exists(),
        "created a directory"
    );
}

#[test]
fn a_symlinked_observed_preloaded_directory_is_not_followed() {
    let elsewhere = root_with(
        "observed-preloaded",
        &[(
            record_file_name("sha256:a"),
            preloaded_json("v1beta1", "sha256:a", r#"{"app":{}}"#).into_bytes(),
        )],
    );
    let root = root_with("pulled", &[]);
    std::os::unix::fs::symlink(
        elsewhere.path().join("image_manager/observed-preloaded"),
        root.path().join("image_manager/observed-preloaded"),
    )
    .expect("symlink");
    let reader = PullRecordsReader::new(root.path());
    assert!(reader.preloaded().found.is_empty());
    assert_eq!(lock(&reader.warned).linked_dirs.len(), 1);
    assert_eq!(
        PullRecordsReader::new(elsewhere.path())
            .preloaded()
            .found
            .len(),
        1
    );
}

/// Past the cap on named files, bad preloaded records are counted in one line per scan, as
/// bad intents and pulled records are.
#[test]
fn past_the_cap_bad_preloaded_records_are_counted_not_named() {
    let files: Vec<File> = (0..5)
        .map(|n| (format!("sha256-bad{n}"), b"{".to_vec()))
        .collect();
    let root = root_with("observed-preloaded", &files);
    let reader = PullRecordsReader::new(root.path()).with_warn_cap(2);
    assert_eq!(reader.preloaded().skipped.len(), 5);
    // Two named, one summary line.
    assert_eq!(reader.warning_lines(), 3);
    assert_eq!(reader.preloaded().skipped.len(), 5);
    assert_eq!(reader.warning_lines(), 4);
}
