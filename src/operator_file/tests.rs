use super::*;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("test path has no NUL");
    // SAFETY: c is a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

#[test]
fn a_regular_file_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg.toml");
    std::fs::write(&path, "a = 1\n").unwrap();
    assert_eq!(read_bytes(&path, Follow::Yes).unwrap(), b"a = 1\n");
    assert_eq!(read_text(&path, Follow::No).unwrap(), "a = 1\n");
}

#[test]
fn a_fifo_is_refused_at_once_without_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg.toml");
    mkfifo(&path);
    let error = read_bytes(&path, Follow::Yes).unwrap_err();
    assert!(
        matches!(error, OperatorFileError::NotRegular { kind: "a FIFO", .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("{}: not a regular file (a FIFO)", path.display())
    );
}

#[tokio::test]
async fn a_fifo_read_from_async_code_is_refused_off_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    mkfifo(&path);
    let error = read_async(path.clone(), Follow::Yes).await.unwrap_err();
    assert!(
        matches!(error, OperatorFileError::NotRegular { .. }),
        "{error:?}"
    );
    let error = read_text_async(path, Follow::Yes).await.unwrap_err();
    assert!(
        matches!(error, OperatorFileError::NotRegular { .. }),
        "{error:?}"
    );
}

#[test]
fn a_zero_device_is_refused_not_read_to_its_end() {
    let error = read_bytes(Path::new("/dev/zero"), Follow::Yes).unwrap_err();
    assert!(
        matches!(
            error,
            OperatorFileError::NotRegular {
                kind: "a character device",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_directory_and_a_socket_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = read_bytes(dir.path(), Follow::Yes).unwrap_err();
    assert!(
        matches!(
            error,
            OperatorFileError::NotRegular {
                kind: "a directory",
                ..
            }
        ),
        "{error:?}"
    );
    let socket = dir.path().join("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let error = read_bytes(&socket, Follow::Yes).unwrap_err();
    assert!(
        matches!(
            error,
            OperatorFileError::NotRegular {
                kind: "a socket",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_file_over_the_cap_is_refused_by_its_size_and_by_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, vec![b'a'; 11]).unwrap();
    let error = read_bytes_limited(&path, Follow::Yes, 10).unwrap_err();
    assert!(
        matches!(
            error,
            OperatorFileError::TooLarge {
                size: 11,
                limit: 10,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        read_bytes_limited(&path, Follow::Yes, 11).unwrap().len(),
        11
    );
    // The real cap: one byte over 1 MiB is refused, exactly 1 MiB is read.
    let at_cap = dir.path().join("at-cap.yaml");
    std::fs::write(&at_cap, vec![b'#'; 1 << 20]).unwrap();
    assert_eq!(read_bytes(&at_cap, Follow::Yes).unwrap().len(), 1 << 20);
    std::fs::write(&at_cap, vec![b'#'; (1 << 20) + 1]).unwrap();
    assert!(matches!(
        read_bytes(&at_cap, Follow::Yes).unwrap_err(),
        OperatorFileError::TooLarge { .. }
    ));
}

#[test]
fn symlinks_are_followed_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.json");
    std::fs::write(&target, "{}").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_eq!(read_bytes(&link, Follow::Yes).unwrap(), b"{}");
    let error = read_bytes(&link, Follow::No).unwrap_err();
    assert!(
        matches!(
            error,
            OperatorFileError::NotRegular {
                kind: "a symlink",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_missing_file_is_told_apart_from_other_errors() {
    let dir = tempfile::tempdir().unwrap();
    let error = read_bytes(&dir.path().join("absent"), Follow::Yes).unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    let looped = dir.path().join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let error = read_bytes(&looped, Follow::Yes).unwrap_err();
    assert!(matches!(error, OperatorFileError::Io { .. }), "{error:?}");
    assert!(!error.is_not_found());
}

#[test]
fn text_must_be_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg.toml");
    std::fs::write(&path, [0xff, 0xfe, b'a']).unwrap();
    assert!(matches!(
        read_text(&path, Follow::Yes).unwrap_err(),
        OperatorFileError::NotText { .. }
    ));
}

#[test]
fn a_hundred_thousand_levels_of_nesting_are_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.json");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    std::fs::write(&path, deep).unwrap();
    let error = read_text(&path, Follow::Yes).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: nested more than 64 levels deep at line 1",
            path.display()
        )
    );
}

#[test]
fn nesting_counts_only_brackets_outside_strings_and_comments() {
    let cases: &[(&str, usize, bool)] = &[
        ("[[1]]", 2, true),
        ("[[[1]]]", 2, false),
        ("a: {b: {c: 1}}", 2, true),
        ("a: {b: {c: {d: 1}}}", 2, false),
        ("a = \"[[[[[[\"", 1, true),
        ("a = '{{{{{{'", 1, true),
        ("a = \"\\\"[[[[\"", 1, true),
        ("# [[[[[[[[\nb = 1", 1, true),
        ("a = 1 # {{{{{{{{", 1, true),
        // '#' inside a plain word is not a comment (YAML): its brackets count.
        ("a: x#[[[", 2, false),
        // Closing more than was opened never goes below zero.
        ("]]]]][[", 2, true),
        (
            "[[warm]]\nimage = \"a\"\n[[warm]]\nimage = \"b\"\n",
            2,
            true,
        ),
        ("line1\nline2\n[[[", 2, false),
        // A quote inside a plain YAML scalar opens no string: the brackets after it count.
        ("a: [b'c, [[[1]]]]", 2, false),
        ("a: [b\"c, [[[1]]]]", 2, false),
        ("a: ['b', [1]]", 2, true),
        ("a: \"[[[[\"", 1, true),
        ("- '[[[['", 1, true),
    ];
    for (text, limit, ok) in cases {
        let result = check_nesting_limited(text, *limit);
        assert_eq!(result.is_ok(), *ok, "{text:?} at limit {limit}: {result:?}");
    }
    assert_eq!(
        check_nesting_limited("line1\nline2\n[[[", 2),
        Err(NestingTooDeep { line: 3, limit: 2 })
    );
}
