//! Tests of reading the config file.

use std::path::Path;

use crate::config::tests::err_tail;

use super::*;

/// Issue 31: the config file is read through the operator-file reader. A FIFO (the agent
/// hung in open(2) waiting for a writer), a device (a zero device read gigabytes), a file
/// over 1 MiB (1.5 GB of TOML made the lexer ask for 10.8 GB) and a file nested deeper
/// than 64 brackets are each refused at once, the error naming the file and why.
#[test]
fn the_config_file_is_a_small_shallow_regular_file_or_refused_naming_it() {
    use crate::operator_file::{MAX_NESTING_DEPTH, MAX_OPERATOR_FILE_BYTES};
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
    // SAFETY: mkfifo(3) on a NUL-terminated path in the test's temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let large = dir.path().join("large.toml");
    let line = "# a comment line of padding\n";
    let lines = usize::try_from(MAX_OPERATOR_FILE_BYTES).expect("1 MiB") / line.len() + 1;
    std::fs::write(&large, line.repeat(lines)).expect("write");
    let deep = dir.path().join("deep.toml");
    let depth = MAX_NESTING_DEPTH + 1;
    std::fs::write(
        &deep,
        format!(
            "pinnedImages = {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    )
    .expect("write");
    let shallow = dir.path().join("shallow.toml");
    std::fs::write(&shallow, "pinnedImages = [\"a\"]\n").expect("write");
    let zero = Path::new("/dev/zero");
    let cases: [(&Path, &str); 4] = [
        (&fifo, "not a regular file (a FIFO)"),
        (zero, "not a regular file (a character device)"),
        (&large, "the file is larger than 1048576 bytes"),
        (&deep, "nested more than 64 levels deep at line 1"),
    ];
    for (path, why) in cases {
        for load in [FileConfig::load, FileConfig::load_for_reload] {
            let err = load(path).expect_err(why).to_string();
            assert_eq!(
                err,
                format!("config file {}: {}", path.display(), err_tail(&err, path)),
                "the file is named once"
            );
            assert!(err.contains(why), "{err} should say {why:?}");
        }
    }
    let loaded = FileConfig::load(&shallow).expect("a small regular file");
    assert_eq!(loaded.pinned_images, Some(vec!["a".to_owned()]));
}

/// Issue 31: a reload refuses a file that sets nothing (empty, white space, comments only:
/// an editor truncating it in place) unless it holds the line `# imagekeeper: empty`;
/// any setting makes it a file like any other. At start such a file is the defaults, as
/// before (nothing is running to keep).
#[test]
fn a_file_setting_nothing_is_refused_by_a_reload_unless_it_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("imagekeeper.toml");
    for text in [
        "",
        "\n  \n",
        "# pinnedImages = [\"a\"]\n# imagekeeper: emptied\n",
    ] {
        std::fs::write(&path, text).expect("write");
        let err = FileConfig::load_for_reload(&path)
            .expect_err(text)
            .to_string();
        assert!(
            err.contains("the file sets nothing") && err.contains(EMPTY_CONFIG_MARKER),
            "{text:?}: {err}"
        );
        assert_eq!(
            FileConfig::load(&path),
            Ok(FileConfig::default()),
            "{text:?}"
        );
    }
    for text in [
        "# imagekeeper: empty\n",
        "# reset on purpose\n  # imagekeeper: empty  \n",
    ] {
        std::fs::write(&path, text).expect("write");
        assert_eq!(
            FileConfig::load_for_reload(&path),
            Ok(FileConfig::default()),
            "{text:?}"
        );
    }
    std::fs::write(&path, "# only this\npinnedImages = []\n").expect("write");
    let loaded = FileConfig::load_for_reload(&path).expect("a key is set");
    assert_eq!(loaded.pinned_images, Some(Vec::new()));
}
