//! Unit tests of the trace parser: every op and its rejections, the typed and by-value
//! parsers agreeing, and the line reader's limits.

use super::*;
use crate::format::parse_rfc3339;
use crate::gc::{ByteBudget, InodeThresholds};

#[test]
fn rfc3339_times() {
    let cases = [
        ("1970-01-01T00:00:00Z", Some(0)),
        ("2026-11-21T19:53:00Z", Some(1_795_290_780)),
        ("2024-02-29T12:00:00+02:00", Some(1_709_200_800)),
        ("2023-02-29T12:00:00Z", None),
        ("2026-11-21 19:53:00", None),
        ("not a time at all!!", None),
        // The replay fuzz target's crash: a two-byte character across the offset's
        // colon position panicked on a string slice.
        ("2026-02-02T03:04:05.5+0\u{3fd}0 ", None),
        ("2026-02-02T03:04:05+-5:00", None),
        ("2026-02-02T03:04:05+05:-0", None),
    ];
    for (s, want) in cases {
        assert_eq!(parse_rfc3339(s).map(UnixNanos::as_secs), want, "{s}");
    }
    assert_eq!(
        parse_rfc3339("1970-01-01T00:00:01.5Z"),
        Some(UnixNanos(1_500_000_000))
    );
}

#[test]
fn bad_lines_name_the_line_and_the_reason() {
    let cases = [
        ("{\"at\": 1, \"detect\": {}}\nnope", 2, "not JSON"),
        ("{\"detect\": {}}", 1, "missing \"at\""),
        ("{\"at\": 1}", 1, "no operation"),
        (
            "{\"at\": 1, \"gc\": {}, \"detect\": {}}",
            1,
            "more than one operation",
        ),
        ("{\"at\": 1, \"explode\": {}}", 1, "unknown operation"),
        (
            "{\"at\": 1, \"policy\": {\"high\": 101, \"low\": 80, \"min_age_s\": 0, \"max_age_s\": 0}}",
            1,
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (
            "{\"at\": 5, \"gc\": {}}\n{\"at\": 4, \"gc\": {}}",
            2,
            "goes back in time",
        ),
        (
            "{\"at\": 1, \"containers\": [{\"id\": \"c\", \"image_id\": \"i\", \"state\": \"paused\"}]}",
            1,
            "is not \"running\"",
        ),
        (
            "{\"at\": 1, \"images\": [{\"id\": \"i\"}]}",
            1,
            "missing field `size`",
        ),
        (
            "{\"at\": -3, \"gc\": {}}",
            1,
            "-3 seconds is outside the representable range",
        ),
        ("{\"at\": 1.5, \"gc\": {}}", 1, "not a whole number"),
        (
            "{\"at\": 99999999999999, \"gc\": {}}",
            1,
            "outside the representable range (1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z)",
        ),
        (
            "{\"at\": \"9999-12-31T23:59:59Z\", \"gc\": {}}",
            1,
            "\"9999-12-31T23:59:59Z\" is outside the representable range",
        ),
        (
            "{\"at\": \"1969-12-31T23:59:59Z\", \"gc\": {}}",
            1,
            "is outside the representable range",
        ),
        (
            "{\"at\": \"2026-13-01T00:00:00Z\", \"gc\": {}}",
            1,
            "is not RFC 3339",
        ),
        (
            "{\"at\": 1, \"images\": [{\"id\": \"\", \"size\": 1}]}",
            1,
            "image \"id\" is empty",
        ),
        (
            "{\"at\": 1, \"containers\": [{\"id\": \"c\", \"image_id\": \"a\\u0000b\", \"state\": \"running\"}]}",
            1,
            "container \"image_id\" contains a NUL byte",
        ),
        (
            "{\"at\": 1, \"remove_fails\": [\"\"]}",
            1,
            "\"remove_fails\" entry is empty",
        ),
        ("{\"at\": 1, \"gc\": 7}", 1, "takes an empty object"),
    ];
    for (text, line, reason) in cases {
        let err = parse_trace(text).expect_err(text);
        assert_eq!(err.line, line, "{text}");
        assert!(err.reason.contains(reason), "{text}: {}", err.reason);
    }
}

/// A reader that serves `text` and then fails: a reader that read ahead of the line it
/// yields would meet the failure first.
struct ThenFail<'a>(&'a [u8]);

impl std::io::Read for ThenFail<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() {
            return Err(std::io::Error::other("read past the line asked for"));
        }
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Issue 31: a trace line was held whole however long. A line over the cap is refused
/// naming its number, after reading at most the cap and its line end plus one byte of it;
/// a line of exactly the cap (with `\n` or `\r\n`) is read.
#[test]
fn a_line_over_the_cap_is_refused_naming_it_having_read_no_more_than_the_cap() {
    const CAP: usize = 64;
    let ok = r#"{"at": 1, "detect": {}}"#;
    let exact = format!("{ok}{}", " ".repeat(CAP - ok.len()));
    for end in ["\n", "\r\n", ""] {
        let text = format!("{ok}\n{exact}{end}");
        let lines: Vec<_> = TraceReader::with_max_line(text.as_bytes(), CAP).collect();
        assert_eq!(lines.len(), 2, "{end:?}");
        assert!(lines.iter().all(Result::is_ok), "{lines:?}");
    }
    // An endless second line: the reader stops past the cap and says which line it was.
    struct Counted<R>(R, std::rc::Rc<std::cell::Cell<usize>>);
    impl<R: std::io::Read> std::io::Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n);
            Ok(n)
        }
    }
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let endless = format!("{ok}\n").into_bytes();
    let input = Counted(
        std::io::Read::chain(&endless[..], std::io::repeat(b' ')),
        read.clone(),
    );
    let mut lines = TraceReader::with_max_line(std::io::BufReader::with_capacity(1, input), CAP);
    assert!(lines.next().expect("line 1").is_ok());
    match lines.next() {
        Some(Err(TraceReadError::Line(e))) => {
            assert_eq!(e.line, 2);
            assert_eq!(
                e.reason,
                "the line is longer than 64 bytes, the most a trace line may hold"
            );
        }
        other => panic!("expected line 2 refused, got {other:?}"),
    }
    assert_eq!(read.get(), endless.len() + CAP + 3, "read no further");
    // The same over the real cap, as the command reads it.
    let long = format!("{ok}\n{}\n", " ".repeat(MAX_TRACE_LINE_BYTES + 1));
    match check_trace(long.as_bytes()) {
        Err(TraceReadError::Line(e)) => assert_eq!(
            e.to_string(),
            "line 2: the line is longer than 67108864 bytes, the most a trace line may hold"
        ),
        other => panic!("{other:?}"),
    }
}

/// After a refused line the rest is still checked to be UTF-8, in chunks that cut a
/// character in two (a one-byte buffer): a valid rest passes, an invalid one is reported.
#[test]
fn the_rest_after_a_bad_line_is_checked_for_utf8_across_chunk_ends() {
    let good = "{\"at\": 1, \"nope\": 1}\n\u{e9}t\u{e9} \u{1f600}\n";
    let reader = std::io::BufReader::with_capacity(1, good.as_bytes());
    assert!(matches!(check_trace(reader), Err(TraceReadError::Line(_))));
    let mut bad = b"{\"at\": 1, \"nope\": 1}\n".to_vec();
    bad.extend_from_slice(&[0xc3, b'\n']);
    let reader = std::io::BufReader::with_capacity(1, &bad[..]);
    assert!(matches!(check_trace(reader), Err(TraceReadError::Io(_))));
}

#[test]
fn the_reader_reads_no_further_than_the_line_it_yields() {
    let text = "{\"at\": 1, \"images\": [{\"id\": \"sha256:a\", \"size\": 5}]}\n";
    // A one-byte buffer: every byte read is a read call.
    let mut lines = TraceReader::new(std::io::BufReader::with_capacity(
        1,
        ThenFail(text.as_bytes()),
    ));
    let first = lines.next().expect("a line").expect("parses");
    assert_eq!(first.line, 1);
    assert!(matches!(first.op, TraceOp::Images(ref i, _) if i.len() == 1));
    // Only now does it read on, and meets the end of the input.
    match lines.next() {
        Some(Err(TraceReadError::Io(e))) => assert!(e.to_string().contains("read past")),
        other => panic!("expected the read error, got {other:?}"),
    }
    assert!(lines.next().is_none(), "nothing after an error");
}

#[test]
fn the_typed_path_and_the_original_rules_agree() {
    // Lines the typed path refuses but the original rules accept (a key given twice: the
    // last wins), and lines both accept: each parses to what the original rules give.
    let lines = [
        r#"{"at": 1, "at": 2, "gc": {}}"#,
        r#"{"at": 1, "gc": {}, "gc": {}}"#,
        r#"{"at": 1, "images": [{"id": "x", "id": "sha256:b", "size": 3}]}"#,
        r#"{"images": [["sha256:c", 4, true, ["c:1"], "runc"]], "at": "1970-01-01T00:00:09Z"}"#,
        r#"{"at": 1, "containers": [{"id": "c", "image_id": "sha256:b", "state": "exited"}]}"#,
        r#"{"at": 1, "fs": {"available": 1, "capacity": 9}}"#,
        r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 60, "max_age_s": 0}}"#,
        r#"{"at": 1, "remove_fails": ["sha256:b"]}"#,
        r#"{"at": 1, "restart": {}}"#,
        r#"{"at": 1, "fs_fails": "error"}"#,
        r#"{"at": 1, "fs_fails": null}"#,
        r#"{"at": 1, "note": "ports the kubelet's TestGarbageCollectCadvisorFailure"}"#,
        r#"{"at": 1, "images": [{"id": "sha256:b", "size": 3, "inodes": 7}]}"#,
        r#"{"at": 1, "fs": {"available": 1, "capacity": 9, "inodes": 5, "inodes_free": 2}}"#,
        r#"{"at": 1, "container_fs": {"available": 1, "capacity": 9}}"#,
        r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 0, "max_age_s": 0, "inodes_high": 90, "inodes_low": 70, "bytes_high": 9, "bytes_low": 8}}"#,
    ];
    for raw in lines {
        let typed = serde_json::from_str::<TypedLine>(raw)
            .ok()
            .and_then(|l| parse_at(&l.at).ok().map(|at| (at, l.op)));
        let by_value = parse_line_by_value(raw).expect(raw);
        assert_eq!(parse_line(raw).expect(raw), by_value, "{raw}");
        if let Some(typed) = typed {
            assert_eq!(typed, by_value, "{raw}");
        }
    }
    assert_eq!(
        parse_line(r#"{"at": 1, "at": 2, "gc": {}}"#)
            .expect("parses")
            .0,
        UnixNanos::from_secs(2)
    );
    // The typed path alone takes the common lines (no second parse).
    assert!(serde_json::from_str::<TypedLine>(lines[4]).is_ok());
    assert!(serde_json::from_str::<TypedLine>(lines[0]).is_err());
}

/// Issue 28's fields: per-image inodes, the filesystems' inodes, `container_fs` and the
/// policy's inode thresholds and byte budget, refused by the same rules as the others.
#[test]
fn inode_and_budget_fields_parse_and_bad_ones_are_named() {
    let (_, op) = parse_line(
        r#"{"at": 1, "images": [{"id": "sha256:a", "size": 3, "inodes": 7}, {"id": "sha256:b", "size": 3}]}"#,
    )
    .expect("parses");
    let TraceOp::Images(images, inodes) = op else {
        panic!("images: {op:?}")
    };
    assert_eq!(images.len(), 2);
    assert_eq!(inodes, ImageInodes::from([("sha256:a".to_owned(), 7)]));
    assert_eq!(
        parse_line(r#"{"at": 1, "container_fs": {"capacity": 9, "available": 1, "inodes": 5, "inodes_free": 0}}"#)
            .expect("parses")
            .1,
        TraceOp::ContainerFs {
            capacity: 9,
            available: 1,
            inodes: Some((5, 0))
        }
    );
    let (_, op) = parse_line(
        r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 0, "max_age_s": 0, "inodes_high": 90, "inodes_low": 70, "bytes_high": 9, "bytes_low": 8}}"#,
    )
    .expect("parses");
    let TraceOp::Policy(policy) = op else {
        panic!("policy: {op:?}")
    };
    assert_eq!(policy.inodes, Some(InodeThresholds { high: 90, low: 70 }));
    assert_eq!(policy.bytes, Some(ByteBudget { high: 9, low: 8 }));
    let bad = [
        (
            r#"{"at": 1, "fs": {"capacity": 9, "available": 1, "inodes": 5}}"#,
            "\"fs\": \"inodes\" and \"inodes_free\" are given together or not at all",
        ),
        (
            r#"{"at": 1, "container_fs": {"capacity": 9, "available": 1, "inodes": 5, "inodes_free": 6}}"#,
            "\"container_fs\": \"inodes_free\" 6 is more than \"inodes\" 5",
        ),
        (
            r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 0, "max_age_s": 0, "inodes_high": 90}}"#,
            "\"inodes_high\" and \"inodes_low\" are given together or not at all",
        ),
        (
            r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 0, "max_age_s": 0, "inodes_high": 70, "inodes_low": 70}}"#,
            "imageGCLowInodesThresholdPercent 70 must be less than",
        ),
        (
            r#"{"at": 1, "policy": {"high": 90, "low": 80, "min_age_s": 0, "max_age_s": 0, "bytes_high": 5, "bytes_low": 6}}"#,
            "LowBytes 6 can not be higher than HighBytes 5",
        ),
    ];
    for (raw, want) in bad {
        let err = parse_trace(raw).expect_err(raw);
        assert!(err.reason.contains(want), "{raw}: {}", err.reason);
    }
}

#[test]
fn a_trace_not_utf8_after_a_bad_line_is_reported_as_not_utf8() {
    // The whole trace was read before parsing in the first version: a file that is not
    // UTF-8 is reported as such whatever its lines say.
    let mut text = b"{\"at\": 1, \"gc\": {}}\n{\"at\": 1, \"boom\": {}}\n".to_vec();
    let bad_line = check_trace(text.as_slice()).expect_err("line 2");
    assert!(matches!(
        bad_line,
        TraceReadError::Line(TraceError { line: 2, .. })
    ));
    text.extend_from_slice(b"\xff\xfe\n");
    match check_trace(text.as_slice()) {
        Err(TraceReadError::Io(e)) => {
            assert_eq!(e.to_string(), "stream did not contain valid UTF-8")
        }
        other => panic!("expected the UTF-8 error, got {other:?}"),
    }
    assert_eq!(
        check_trace(&b"{\"at\": 1, \"gc\": {}}\r\n\n  \n{\"at\": 2, \"gc\": {}}"[..])
            .expect("good"),
        2
    );
}

/// Issue 29: the scripted runtime holds an `images` line's list for the whole replay;
/// read element by element, the list and each image's tags had room to spare (tags for
/// four: 96 bytes where one tag needs 24). Both paths hold them at their length.
#[test]
fn an_images_line_is_held_at_its_exact_length() {
    let entries: Vec<String> = (0..5)
        .map(|i| format!(r#"{{"id": "sha256:{i}", "size": 1, "tags": ["t:{i}"]}}"#))
        .collect();
    let typed = format!(r#"{{"at": 1, "images": [{}]}}"#, entries.join(", "));
    // A key given twice: the original rules' path.
    let by_value = format!(
        r#"{{"at": 1, "at": 1, "images": [{}]}}"#,
        entries.join(", ")
    );
    for raw in [typed, by_value] {
        let (_, op) = parse_line(&raw).expect("parses");
        let TraceOp::Images(images, _) = op else {
            panic!("images: {op:?}")
        };
        assert_eq!(images.len(), 5);
        assert_eq!(images.capacity(), images.len(), "{raw}");
        for image in &images {
            assert_eq!(image.repo_tags.capacity(), 1, "{raw}");
        }
    }
}

#[test]
fn a_good_trace_parses() {
    let text = r#"{"at": 10, "images": [{"id": "sha256:a", "size": 5, "tags": ["a:1"]}]}

{"at": "1970-01-01T00:00:20Z", "containers": [{"id": "c1", "image_id": "sha256:a", "state": "running"}]}
{"at": 30, "fs": {"capacity": 100, "available": 10}}
{"at": 40, "gc": {}}"#;
    let trace = parse_trace(text).expect("parses");
    assert_eq!(trace.len(), 4);
    assert_eq!(trace[1].line, 3);
    assert_eq!(trace[1].at, UnixNanos::from_secs(20));
    assert_eq!(trace[3].op, TraceOp::Gc);
}

/// Issue 40: the line reader reads what `read_until` reads, line for line across the reader's
/// chunk ends, but grows its buffer by a quarter: a line of 1.1 MB read in 8 KiB chunks ends in
/// a buffer of at most a quarter more (doubling took up to twice the line: 32 MiB for the
/// 100k replay's 18.9 MB `images` line).
#[test]
fn the_line_reader_reads_as_read_until_and_grows_its_buffer_by_a_quarter() {
    let long = "x".repeat(1_100_000);
    let text = format!("a\n\nbc\r\n{long}\nlast without end");
    let mut ours = std::io::BufReader::with_capacity(8192, text.as_bytes());
    let mut theirs = std::io::BufReader::with_capacity(8192, text.as_bytes());
    loop {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let n = read_line_growing_by_a_quarter(&mut ours, &mut a).expect("ours");
        assert_eq!(n, theirs.read_until(b'\n', &mut b).expect("theirs"));
        assert_eq!(a, b);
        assert!(
            a.capacity() <= a.len() + a.len() / 4 + 8192,
            "{}",
            a.capacity()
        );
        if n == 0 {
            break;
        }
    }
}
