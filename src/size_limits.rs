//! Test only: the size rule of the contributing page ("Small files") kept by a test, as the
//! limits page is. It walks `src/` and fails when a production `.rs` file passes
//! [`MAX_FILE_LINES`] lines or one `impl` block in it passes [`MAX_IMPL_LINES`] lines, naming
//! the file, the impl's header and the count. Test code is exempt: `tests.rs`, `*_tests.rs` and
//! every file under a `tests/` directory (the generated gRPC code lives in `OUT_DIR`, never
//! under `src/`). The page asks for a reason past about 800 and 400 lines; these are the hard
//! limits. In `src/gc`, `src/store` and `src/pull` no function, test code included, passes
//! [`MAX_FN_LINES`] lines. An impl block (a function) is counted from its `impl` (`fn`) line to the line of its closing brace,
//! matched after blanking comments, strings and character literals so a brace inside one of
//! them does not count.

use std::path::{Path, PathBuf};

/// No production file in `src/` may pass this many lines.
const MAX_FILE_LINES: usize = 1000;
/// No `impl` block in a production file may pass this many lines.
const MAX_IMPL_LINES: usize = 500;
/// No function in the modules holding the GC, store and pull logic ([`FN_LIMITED`]), their
/// tests included, may pass this many lines (issue 54: a rule is read in one screen).
const MAX_FN_LINES: usize = 80;
/// The directories whose functions [`MAX_FN_LINES`] bounds.
const FN_LIMITED: [&str; 3] = ["src/gc", "src/store", "src/pull"];

/// One `impl` block: its header (the text from `impl` to its opening brace, white space runs
/// as one space), the 1-based line it starts on, and its length in lines.
#[derive(Debug, PartialEq, Eq)]
struct ImplBlock {
    header: String,
    line: usize,
    lines: usize,
}

/// `source` with every comment, string literal (plain, raw, byte) and character literal
/// replaced by spaces, newlines kept, so line numbers and the braces of code are unchanged.
pub(crate) fn blank_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0usize;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    blank(&mut out, '/');
                    blank(&mut out, '*');
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    blank(&mut out, '*');
                    blank(&mut out, '/');
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && (i == 0 || !ident(chars[i - 1]))
            && {
                // A raw string: r"…", r#"…"#, br"…", br#"…"#.
                let mut j = i + if c == 'b' { 2 } else { 1 };
                while chars.get(j) == Some(&'#') {
                    j += 1;
                }
                chars.get(j) == Some(&'"')
            }
        {
            let start = i;
            i += if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while chars[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1; // the opening quote
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            for &ch in &chars[start..i.min(chars.len())] {
                blank(&mut out, ch);
            }
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() {
                let ch = chars[i];
                blank(&mut out, ch);
                i += 1;
                if ch == '\\' {
                    if let Some(&escaped) = chars.get(i) {
                        blank(&mut out, escaped);
                        i += 1;
                    }
                } else if ch == '"' {
                    break;
                }
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{7d}') or a lifetime / label ('a, 'static).
            let end = if next == Some('\\') {
                // Skip the escaped character itself: '\'' is a quote.
                chars
                    .get(i + 3..)
                    .and_then(|rest| rest.iter().position(|&ch| ch == '\''))
                    .map(|p| i + 3 + p + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &ch in &chars[i..end] {
                        blank(&mut out, ch);
                    }
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every `impl` block of `source`, nested ones included (an `impl` inside a function or a
/// `mod tests`, at any indentation). An `impl` keyword starts a block only where an item may
/// start: at the file's start or after `{`, `}`, `;` or an attribute's `]` (optionally behind
/// `unsafe`), so `-> impl Trait` and `x: impl Fn()` are not blocks.
fn impl_blocks(source: &str) -> Vec<ImplBlock> {
    let code: Vec<char> = blank_literals(source).chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let previous_significant = |mut at: usize| -> Option<usize> {
        while at > 0 {
            at -= 1;
            if !code[at].is_whitespace() {
                return Some(at);
            }
        }
        None
    };
    let word_ending_at = |end: usize| -> String {
        let mut start = end + 1;
        while start > 0 && ident(code[start - 1]) {
            start -= 1;
        }
        code[start..=end].iter().collect()
    };
    let mut blocks = Vec::new();
    let mut i = 0;
    while i + 4 <= code.len() {
        let is_impl = code[i..i + 4] == ['i', 'm', 'p', 'l']
            && (i == 0 || !ident(code[i - 1]))
            && code.get(i + 4).is_none_or(|&c| !ident(c));
        if !is_impl {
            i += 1;
            continue;
        }
        let mut before = previous_significant(i);
        if let Some(b) = before
            && ident(code[b])
            && word_ending_at(b) == "unsafe"
        {
            before = previous_significant(b + 1 - "unsafe".len());
        }
        let item_start = before.is_none_or(|b| matches!(code[b], '{' | '}' | ';' | ']'));
        // The block opens at the first `{` after the header (generic bounds hold no braces in
        // this crate); a `;` first means no block.
        let open = code[i..]
            .iter()
            .position(|&c| c == '{' || c == ';')
            .map(|p| i + p);
        let (true, Some(open)) = (item_start, open) else {
            i += 4;
            continue;
        };
        if code[open] == ';' {
            i = open;
            continue;
        }
        let close = closing_brace(&code, open);
        let header: String = code[i..open].iter().collect();
        let line = line_of(&code, i);
        blocks.push(ImplBlock {
            header: header.split_whitespace().collect::<Vec<_>>().join(" "),
            line,
            lines: line_of(&code, close) - line + 1,
        });
        // Go on inside the block: an impl in a function body or a test module counts too.
        i = open + 1;
    }
    blocks
}

/// The 1-based line of position `at` in `code`.
fn line_of(code: &[char], at: usize) -> usize {
    1 + code[..at].iter().filter(|&&c| c == '\n').count()
}

/// The position of the brace that closes the one at `open` in `code` (literals and comments
/// blanked), or the last position when none does.
fn closing_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return at;
                }
            }
            _ => {}
        }
    }
    code.len() - 1
}

/// Every function with a body in `source` (test functions and nested ones too): `fn NAME`, its
/// line and its length, from the `fn` line to the line of its closing brace, matched after
/// blanking comments and literals. A declaration without a body (`fn f();`) is none.
fn fn_blocks(source: &str) -> Vec<ImplBlock> {
    let code: Vec<char> = blank_literals(source).chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut blocks = Vec::new();
    let mut i = 0;
    while i + 2 < code.len() {
        let is_fn = code[i..i + 2] == ['f', 'n']
            && (i == 0 || !ident(code[i - 1]))
            && code[i + 2].is_whitespace();
        if !is_fn {
            i += 1;
            continue;
        }
        let name_start = (i + 2..code.len())
            .find(|&at| !code[at].is_whitespace())
            .unwrap_or(code.len());
        let name: String = code[name_start..]
            .iter()
            .take_while(|&&c| ident(c))
            .collect();
        let open = code[name_start..]
            .iter()
            .position(|&c| c == '{' || c == ';')
            .map(|p| name_start + p);
        let (false, Some(open)) = (name.is_empty(), open) else {
            i += 2;
            continue;
        };
        if code[open] == ';' {
            i = open;
            continue;
        }
        let close = closing_brace(&code, open);
        let line = line_of(&code, i);
        blocks.push(ImplBlock {
            header: format!("fn {name}"),
            line,
            lines: line_of(&code, close) - line + 1,
        });
        i = open + 1;
    }
    blocks
}

/// Whether `path` (relative to the crate root) is test code: `tests.rs`, `*_tests.rs`, or
/// anything under a `tests/` directory.
pub(crate) fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// Every `.rs` file under `dir`, sorted.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}"));
        for entry in entries {
            let path = entry.expect("a directory entry of src/").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// What breaks the rule in one file's `source`, one message per breach.
fn breaches(path: &str, source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lines = source.lines().count();
    if lines > MAX_FILE_LINES {
        found.push(format!(
            "{path}: {lines} lines (a production file may have at most {MAX_FILE_LINES})"
        ));
    }
    for block in impl_blocks(source) {
        if block.lines > MAX_IMPL_LINES {
            found.push(format!(
                "{path}:{}: `{}` is {} lines (an impl block may have at most {MAX_IMPL_LINES})",
                block.line, block.header, block.lines
            ));
        }
    }
    found
}

#[test]
fn no_production_file_or_impl_block_passes_the_size_limits() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut checked = 0;
    for file in rust_files(&root.join("src")) {
        let relative = file
            .strip_prefix(root)
            .expect("a file under the crate root");
        if is_test_file(relative) {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        checked += 1;
        found.extend(breaches(&relative.display().to_string(), &source));
    }
    assert!(
        checked > 50,
        "walked only {checked} production files of src/"
    );
    assert!(
        found.is_empty(),
        "split these along their seams (docs/src/design/contributing.md, \"Small files\"):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_function_in_gc_store_or_pull_passes_80_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut functions = 0;
    for dir in FN_LIMITED {
        for file in rust_files(&root.join(dir)) {
            let relative = file
                .strip_prefix(root)
                .expect("a file under the crate root");
            let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
            for block in fn_blocks(&source) {
                functions += 1;
                if block.lines > MAX_FN_LINES {
                    found.push(format!(
                        "{}:{}: `{}` is {} lines (at most {MAX_FN_LINES} here)",
                        relative.display(),
                        block.line,
                        block.header,
                        block.lines
                    ));
                }
            }
        }
    }
    assert!(functions > 500, "found only {functions} functions");
    assert!(
        found.is_empty(),
        "split these by what they do (a step, a case table, a check):\n{}",
        found.join("\n")
    );
}

#[test]
fn functions_are_measured_by_their_braces_and_declarations_are_none() {
    let source = "trait T {\n    fn declared(&self);\n}\nfn outer() {\n    let s = \"}\";\n    fn inner() {\n    }\n}\nlet f: fn(u8) = g;\n";
    let found: Vec<(String, usize, usize)> = fn_blocks(source)
        .into_iter()
        .map(|b| (b.header, b.line, b.lines))
        .collect();
    assert_eq!(
        found,
        [("fn outer".to_owned(), 4, 5), ("fn inner".to_owned(), 6, 2)]
    );
}

#[test]
fn test_files_are_told_apart_from_production_files() {
    for (path, test) in [
        ("src/doctor/tests.rs", true),
        ("src/gc/predictive_tests.rs", true),
        ("src/pull/credentials/tests/plugins.rs", true),
        ("src/doctor/mod.rs", false),
        ("src/gc/contests.rs", false),
        ("src/store/tests_support.rs", false),
    ] {
        assert_eq!(is_test_file(Path::new(path)), test, "{path}");
    }
}

#[test]
fn impl_blocks_are_measured_by_their_braces_not_those_in_literals_or_comments() {
    let source = r##"
/// impl Doc { }
#[derive(Debug)]
struct A;
impl A {
    fn braces(&self) -> (char, char, char, &'static str, &'static str) {
        // a stray } in a comment
        /* and { in /* a nested */ block } */
        ('{', '}', '\'', "}}\"{", r#"}"{"#)
    }
    fn opens(&self, c: char) -> bool { c == '{' || c == '"' }
    fn iter(&self) -> impl Iterator<Item = u8> {
        let f = |x: impl Fn()| x;
        std::iter::empty()
    }
}

mod inner {
    #[cfg(test)]
    unsafe impl<T: Send> Send for super::Wrapper<T> {}
    fn body() {
        struct B;
        impl B {
            fn b() {}
        }
    }
}
"##;
    let blocks = impl_blocks(source);
    let seen: Vec<(&str, usize, usize)> = blocks
        .iter()
        .map(|b| (b.header.as_str(), b.line, b.lines))
        .collect();
    assert_eq!(
        seen,
        [
            ("impl A", 5, 12),
            ("impl<T: Send> Send for super::Wrapper<T>", 20, 1),
            ("impl B", 23, 3),
        ]
    );
}

#[test]
fn a_breach_names_the_file_the_impl_and_the_count() {
    let long_impl = format!(
        "impl Big {{\n{}}}\n",
        "    fn f() {}\n".repeat(MAX_IMPL_LINES)
    );
    assert_eq!(
        breaches("src/big.rs", &long_impl),
        [format!(
            "src/big.rs:1: `impl Big` is {} lines (an impl block may have at most {MAX_IMPL_LINES})",
            MAX_IMPL_LINES + 2
        )]
    );
    let long_file = "\n".repeat(MAX_FILE_LINES + 1);
    assert_eq!(
        breaches("src/long.rs", &long_file),
        [format!(
            "src/long.rs: {} lines (a production file may have at most {MAX_FILE_LINES})",
            MAX_FILE_LINES + 1
        )]
    );
    assert!(breaches("src/fits.rs", &"\n".repeat(MAX_FILE_LINES)).is_empty());
}
