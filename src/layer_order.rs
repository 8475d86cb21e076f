//! Test only: the layer order ARCHITECTURE.md prints is the order the code keeps.
//!
//! ARCHITECTURE.md's "Layers" table lists every top-level module of `src/` with the top-level
//! modules it may import. This test reads every production file under `src/` (test code left
//! out: `tests.rs` and `*_tests.rs` files, files whose `mod` line is test-gated, and items
//! under a `#[cfg(...)]` that names `test` or the `testing`/`sim-mutants` features), collects
//! each `crate::<module>` path, and fails on any edge the table does not allow, naming the
//! file and the line. It also fails when a top-level module is missing from the table, so a
//! new module gets its row when it is added, and on an edge the table allows that no
//! production code uses, so the table says what the code does, not what it once did.
//! [`file_cycles`] holds the same line inside each module: no circle between its files.
//!
//! Invariant: the table is the only statement of the layer order; the README, the book and
//! the `//!` paragraphs link to it instead of repeating it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::size_limits::{blank_literals, is_test_file, rust_files};

mod file_cycles;

const BEGIN: &str = "<!-- layer-order: begin -->";
const END: &str = "<!-- layer-order: end -->";

/// The allowed table: module -> the modules it may import.
fn allowed_table(architecture: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = architecture
        .find(BEGIN)
        .expect("ARCHITECTURE.md has the layer-order table's begin marker");
    let end = architecture
        .find(END)
        .expect("ARCHITECTURE.md has the layer-order table's end marker");
    let mut table = BTreeMap::new();
    for line in architecture[start + BEGIN.len()..end].lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if cells.len() != 2 {
            continue;
        }
        let module = cells[0].trim().trim_matches('`');
        if module.is_empty() || module == "module" || module.starts_with('-') {
            continue;
        }
        let imports = cells[1]
            .split(',')
            .map(|name| name.trim().trim_matches('`').to_owned())
            .filter(|name| !name.is_empty() && name != "—" && name != "-")
            .collect();
        table.insert(module.to_owned(), imports);
    }
    table
}

/// Whether a `#[cfg(...)]` attribute line gates test code.
fn is_test_cfg(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("#[cfg(")
        && !line.starts_with("#[cfg(not(")
        && (line.contains("test)")
            || line.contains("test,")
            || line.contains("\"testing\"")
            || line.contains("\"sim-mutants\""))
}

/// The file's code (comments and literals blanked, [`blank_literals`]) with test-gated items
/// blanked out too, one entry per line of `text`, so line numbers hold. The attributes are
/// judged on `text` itself: a feature's name is a string literal.
fn production_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let blanked = blank_literals(text);
    let code: Vec<&str> = blanked.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut index = 0;
    while index < lines.len() {
        if is_test_cfg(lines[index]) {
            // Skip the attribute, any further attributes, and the item: up to its `;` or the
            // brace that closes its first `{`.
            let mut depth = 0i64;
            let mut opened = false;
            let mut cursor = index;
            while cursor < lines.len() {
                let line = code.get(cursor).copied().unwrap_or("");
                for ch in line.chars() {
                    match ch {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                let is_attribute = line.trim_start().starts_with("#[");
                out.push(String::new());
                cursor += 1;
                if is_attribute && !opened {
                    continue;
                }
                if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                    break;
                }
            }
            index = cursor;
        } else {
            out.push(code.get(index).copied().unwrap_or("").to_owned());
            index += 1;
        }
    }
    out
}

/// Files under `src/` that are test code as a whole: `tests.rs`, `*_tests.rs`, anything under
/// a `tests/` directory, and modules whose `mod` line in the parent is test-gated.
fn test_only_files(src: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let root = src.parent().unwrap_or(src);
    let mut test_only: BTreeSet<PathBuf> = files
        .iter()
        .filter(|file| is_test_file(file.strip_prefix(root).unwrap_or(file)))
        .cloned()
        .collect();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let dir = module_dir(file);
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim();
            let Some(rest) = trimmed
                .strip_prefix("pub mod ")
                .or_else(|| trimmed.strip_prefix("pub(crate) mod "))
                .or_else(|| trimmed.strip_prefix("mod "))
            else {
                continue;
            };
            let Some(name) = rest.strip_suffix(';') else {
                continue;
            };
            let gated = lines[..at]
                .iter()
                .rev()
                .take_while(|l| {
                    l.trim_start().starts_with("#[") || l.trim_start().starts_with("//")
                })
                .any(|l| is_test_cfg(l));
            if gated {
                let single = dir.join(format!("{name}.rs"));
                let nested = dir.join(name);
                for candidate in files {
                    if candidate == &single || candidate.starts_with(&nested) {
                        test_only.insert(candidate.clone());
                    }
                }
            }
        }
    }
    test_only
}

/// The directory a file's child modules live in (`a/mod.rs` -> `a/`, `a/b.rs` -> `a/b/`).
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod") | Some("lib") | Some("main") => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
        None => parent.to_path_buf(),
    }
}

/// The top-level module a file under `src/` belongs to; `None` for the crate root and the
/// binaries (`lib.rs`, `main.rs`, `cli/`, `bin/`), which may import anything.
fn top_level_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    match name {
        "lib" | "main" | "cli" | "bin" => None,
        other => Some(other.to_owned()),
    }
}

/// Every `crate::<module>` edge of the production code: (from, to) -> the first place seen.
fn edges(src: &Path) -> BTreeMap<(String, String), String> {
    let modules = top_level_modules(src);
    let files = rust_files(src);
    let test_only = test_only_files(src, &files);
    let mut found = BTreeMap::new();
    for file in &files {
        if test_only.contains(file) {
            continue;
        }
        let Some(from) = top_level_module(src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file is readable");
        for (number, code) in production_lines(&text).iter().enumerate() {
            let mut rest = code.as_str();
            while let Some(at) = rest.find("crate::") {
                let before = rest[..at].chars().last();
                let after = &rest[at + "crate::".len()..];
                rest = after;
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                    continue;
                }
                let to: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `crate::name!` of a `#[macro_export]` macro is not a module edge.
                if to.is_empty() || to == from || !modules.contains(&to) {
                    continue;
                }
                found
                    .entry((from.clone(), to))
                    .or_insert_with(|| format!("{}:{}", file.display(), number + 1));
            }
        }
    }
    found
}

fn top_level_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("src/ is readable")
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let name = path.file_name()?.to_str()?.to_owned();
            let name = name.strip_suffix(".rs").map(str::to_owned).unwrap_or(name);
            if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
                Some(name)
            } else {
                None
            }
        })
        .filter(|name| !matches!(name.as_str(), "lib" | "main" | "cli" | "bin"))
        .collect()
}

#[test]
fn every_import_between_top_level_modules_is_one_the_layer_table_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    let table = allowed_table(&architecture);
    let src = root.join("src");

    let missing: Vec<String> = top_level_modules(&src)
        .into_iter()
        .filter(|module| !table.contains_key(module))
        .collect();
    assert!(
        missing.is_empty(),
        "top-level modules without a row in ARCHITECTURE.md's layer table: {missing:?}"
    );

    let forbidden: Vec<String> = edges(&src)
        .into_iter()
        .filter(|((from, to), _)| !table.get(from).is_some_and(|allowed| allowed.contains(to)))
        .map(|((from, to), at)| format!("{from} -> {to} (first at {at})"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "imports the layer table in ARCHITECTURE.md does not allow:\n  {}",
        forbidden.join("\n  ")
    );
}

#[test]
fn every_edge_the_layer_table_allows_is_one_the_code_uses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    let used = edges(&root.join("src"));
    let unused: Vec<String> = allowed_table(&architecture)
        .into_iter()
        .flat_map(|(from, imports)| imports.into_iter().map(move |to| (from.clone(), to)))
        .filter(|edge| !used.contains_key(edge))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(
        unused.is_empty(),
        "edges ARCHITECTURE.md's layer table allows that no production code uses (remove them \
         from the table):\n  {}",
        unused.join("\n  ")
    );
}

#[test]
fn the_layer_table_has_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    let table = allowed_table(&architecture);
    // Kahn's algorithm over the allowed edges: every module must come out.
    let mut remaining = table.clone();
    loop {
        let leaves: Vec<String> = remaining
            .iter()
            .filter(|(_, imports)| imports.iter().all(|to| !remaining.contains_key(to)))
            .map(|(module, _)| module.clone())
            .collect();
        if leaves.is_empty() {
            break;
        }
        for leaf in leaves {
            remaining.remove(&leaf);
        }
    }
    assert!(
        remaining.is_empty(),
        "the layer table allows a cycle among: {:?}",
        remaining.keys().collect::<Vec<_>>()
    );
}

#[test]
fn test_gated_items_are_left_out_of_the_edges() {
    let text = "use crate::a::X;\n#[cfg(test)]\nmod tests {\n    use crate::b::Y;\n}\nfn f() { crate::c::z(); }\n";
    let lines = production_lines(text);
    let joined = lines.join("\n");
    assert!(joined.contains("crate::a::X"));
    assert!(!joined.contains("crate::b::Y"));
    assert!(joined.contains("crate::c::z"));
    assert_eq!(lines.len(), text.lines().count());
}
