//! The shared operator-file reader (`imagekeeper::operator_file`) from arbitrary bytes:
//! `check_nesting` never panics and agrees with a reference depth counter written here from
//! the documented rules (`[`/`{` nest outside `"…"` strings with backslash escapes, `'…'`
//! strings and `#` comments, a `#` opening a comment only at the start or after white space,
//! `[`, `{` or `,`; a quote or comment ends at the line's end; the error names the line where
//! the limit was passed), and `read_bytes_limited` of the bytes written to a regular file
//! returns exactly those bytes at or under its cap and `TooLarge` over it.
#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use imagekeeper::operator_file::{
    Follow, MAX_NESTING_DEPTH, NestingTooDeep, OperatorFileError, check_nesting,
    check_nesting_limited, read_bytes, read_bytes_limited,
};
use libfuzzer_sys::fuzz_target;

/// The reference: a scanner that skips strings and comments whole (the library runs a
/// byte-at-a-time state machine). `Err(line)` is the 1-based line of the `[`/`{` that went
/// past `limit`.
fn reference(text: &[u8], limit: usize) -> Result<(), usize> {
    let opens_comment = |i: usize| {
        i == 0
            || matches!(
                text[i - 1],
                b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b','
            )
    };
    // A quote opens a string only where a value may start.
    let opens_value = |i: usize| {
        i == 0
            || matches!(
                text[i - 1],
                b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':' | b'=' | b'-' | b'?'
            )
    };
    let line_at = |i: usize| 1 + text[..i].iter().filter(|&&b| b == b'\n').count();
    let mut depth = 0usize;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' if opens_value(i) => {
                i += 1;
                while i < text.len() {
                    match text[i] {
                        // The escaped byte, whatever it is (a line end too), stays inside.
                        b'\\' => i += 2,
                        b'"' | b'\n' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'\'' if opens_value(i) => {
                i += 1;
                while i < text.len() {
                    let end = matches!(text[i], b'\'' | b'\n');
                    i += 1;
                    if end {
                        break;
                    }
                }
            }
            b'#' if opens_comment(i) => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(line_at(i));
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

fn agree(text: &str, limit: usize, got: Result<(), NestingTooDeep>) {
    match (reference(text.as_bytes(), limit), got) {
        (Ok(()), Ok(())) => {}
        (Err(line), Err(e)) => {
            assert_eq!(e.line, line, "the line where {limit} was passed: {text:?}");
            assert_eq!(e.limit, limit);
        }
        (want, got) => panic!("limit {limit}: reference {want:?}, check_nesting {got:?}: {text:?}"),
    }
}

/// One file rewritten by every run, on tmpfs where there is one.
fn scratch() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .expect("a temp dir");
        // Kept for the process's life: the fuzzer runs until it is stopped.
        dir.keep().join("operator-file")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    agree(&text, MAX_NESTING_DEPTH, check_nesting(&text));
    let small = usize::from(data.first().copied().unwrap_or(0) % 8);
    agree(&text, small, check_nesting_limited(&text, small));

    let path = scratch();
    let mut file = std::fs::File::create(path).expect("create the scratch file");
    file.write_all(data).expect("write the scratch file");
    drop(file);
    // A cap around the input's length, so both sides of it are reached.
    let cap = u64::from(data.get(1).copied().unwrap_or(0)) * 2;
    let len = data.len() as u64;
    match read_bytes_limited(path, Follow::No, cap) {
        Ok(bytes) => {
            assert!(len <= cap, "{len} bytes read under a cap of {cap}");
            assert_eq!(bytes, data);
        }
        Err(OperatorFileError::TooLarge { size, limit, .. }) => {
            assert!(len > cap, "{len} bytes refused under a cap of {cap}");
            assert_eq!(limit, cap);
            assert!(size > cap && size <= len, "size {size}, cap {cap}, len {len}");
        }
        Err(e) => panic!("a regular file of {len} bytes: {e}"),
    }
    // Under the real cap (fuzz inputs are far smaller than 1 MiB): exactly the bytes.
    assert_eq!(read_bytes(path, Follow::Yes).expect("a small regular file"), data);
});
