//! Test only: no import cycle between the files of one module.
//!
//! Inside every module folder of `src/` (`store/`, `gc/manager/`, ...) the child modules (a
//! file `x.rs`, or `x.rs` with its folder `x/`, or `x/mod.rs`) import each other in one
//! direction only. A child's paths (`super::x::..`, `crate::store::x::..`, `self::..`, use
//! trees expanded) are resolved to the module they name; `a -> b` is an edge of the folder
//! when a file of child `a` names something in child `b`. A child using its folder's own file
//! (`mod.rs`, the module's door: `super::TxnError`, the re-exports) and a file using its own
//! children are not edges between siblings; a name the door only re-exports (`pub use
//! x::Thing`, or a private `use`) is followed to the child that defines it, so a circle cannot
//! hide behind the door. Test code is left out as `layer_order` leaves it out; top-level
//! modules are the layer table's ([`super`]), not this check's.
//!
//! Invariant: a shared helper lives below both of its users, so every folder's children have
//! floors, and a change to one file cannot ripple back into a file it depends on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{production_lines, test_only_files};
use crate::size_limits::rust_files;

/// A folder (module path) -> (child, child) -> where the edge is first seen.
type FolderEdges = BTreeMap<Vec<String>, BTreeMap<(String, String), String>>;

/// The module path of a file under `src/`: `store/mod.rs` and `store.rs` -> `[store]`,
/// `store/codec/history.rs` -> `[store, codec, history]`, `lib.rs` -> `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .iter()
        .filter_map(|part| part.to_str().map(str::to_owned))
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
        if !matches!(stem.as_str(), "mod" | "lib" | "main") {
            parts.push(stem);
        }
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The index of the first character at or after `at` that is not white space.
fn skip_space(chars: &[char], mut at: usize) -> usize {
    while chars.get(at).is_some_and(|c| c.is_whitespace()) {
        at += 1;
    }
    at
}

/// Reads the identifier at `at` (after whitespace); returns it and the index after it.
fn ident_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    let start = skip_space(chars, at);
    let mut at = start;
    while chars.get(at).is_some_and(|c| is_ident(*c)) {
        at += 1;
    }
    (at > start).then(|| (chars[start..at].iter().collect(), at))
}

/// Index after `::` at `at` (after whitespace), if there is one.
fn colons_at(chars: &[char], at: usize) -> Option<usize> {
    let at = skip_space(chars, at);
    (chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':')).then_some(at + 2)
}

/// Parses a path from `at` on, expanding `{a, b::c}` groups: each full path is pushed onto
/// `out` as `prefix` + its segments. Returns the index after the path.
fn parse_tree(chars: &[char], at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    let mut at = at;
    loop {
        let probe = skip_space(chars, at);
        if chars.get(probe) == Some(&'{') {
            at = probe + 1;
            loop {
                let mut next = at;
                while chars
                    .get(next)
                    .is_some_and(|c| c.is_whitespace() || *c == ',')
                {
                    next += 1;
                }
                match chars.get(next) {
                    None => return next,
                    Some('}') => return next + 1,
                    _ => {}
                }
                let after = parse_tree(chars, next, path.clone(), out);
                // `a as b`: skip the rename.
                let mut skip = after;
                while chars.get(skip).is_some_and(|c| *c != ',' && *c != '}') {
                    skip += 1;
                }
                if skip == next {
                    return skip;
                }
                at = skip;
            }
        }
        if chars.get(probe) == Some(&'*') {
            out.push(path);
            return probe + 1;
        }
        let Some((segment, after)) = ident_at(chars, at) else {
            out.push(path);
            return at;
        };
        if segment != "self" || path.is_empty() {
            path.push(segment);
        }
        at = after;
        match colons_at(chars, at) {
            Some(next) => at = next,
            None => {
                out.push(path);
                return at;
            }
        }
    }
}

/// The 1-based line of each character.
fn lines_of(chars: &[char]) -> Vec<usize> {
    let mut line_of = Vec::with_capacity(chars.len());
    let mut line = 1;
    for c in chars {
        line_of.push(line);
        if *c == '\n' {
            line += 1;
        }
    }
    line_of
}

/// Whether the code before `at` ends with the keyword `use` (a `use` statement's path).
fn after_use(chars: &[char], at: usize) -> bool {
    let mut end = at;
    while end > 0 && chars[end - 1].is_whitespace() {
        end -= 1;
    }
    end < at
        && end >= 3
        && chars[end - 3..end] == ['u', 's', 'e']
        && (end == 3 || !is_ident(chars[end - 4]))
}

/// A path the code names: absolute, the line it starts on, and whether a `use` names it.
type NamedPath = (Vec<String>, usize, bool);

/// Every absolute path the code names through `crate::`, `super::` or `self::`, and every
/// `use child::...` (a path that starts at one of the file's own child modules, as Rust 2018
/// allows in `use`). `module` is the file's module path; `modules`, every module's.
fn named_paths(module: &[String], modules: &BTreeSet<Vec<String>>, code: &str) -> Vec<NamedPath> {
    let chars: Vec<char> = code.chars().collect();
    let line_of = lines_of(&chars);
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        if !is_ident(chars[at]) || (at > 0 && (is_ident(chars[at - 1]) || chars[at - 1] == ':')) {
            at += 1;
            continue;
        }
        let Some((word, after)) = ident_at(&chars, at) else {
            at += 1;
            continue;
        };
        let used = after_use(&chars, at);
        let base: Option<Vec<String>> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(module.to_vec()),
            "super" => Some(module[..module.len().saturating_sub(1)].to_vec()),
            child if used => {
                let mut path = module.to_vec();
                path.push(child.to_owned());
                modules.contains(&path).then_some(path)
            }
            _ => None,
        };
        let (Some(mut base), Some(mut next)) = (base, colons_at(&chars, after)) else {
            at = after;
            continue;
        };
        // `super::super::...`
        while let Some((word, after)) = ident_at(&chars, next) {
            if word != "super" {
                break;
            }
            let Some(colons) = colons_at(&chars, after) else {
                break;
            };
            base.pop();
            next = colons;
        }
        let mut paths = Vec::new();
        let end = parse_tree(&chars, next, base, &mut paths);
        found.extend(paths.into_iter().map(|path| (path, line_of[at], used)));
        at = end.max(after);
    }
    found
}

/// Follows the names a module only imports or re-exports (`(module, name)` -> the path it
/// stands for) to where they are defined.
fn follow_imports(
    imports: &BTreeMap<(Vec<String>, String), Vec<String>>,
    path: Vec<String>,
) -> Vec<String> {
    let mut path = path;
    // A bound instead of cycle detection: a chain of re-exports is short.
    for _ in 0..8 {
        let hop = (1..path.len()).rev().find_map(|len| {
            imports
                .get(&(path[..len].to_vec(), path[len].clone()))
                .map(|target| (len, target))
        });
        let Some((len, target)) = hop else {
            return path;
        };
        if path.starts_with(target) && target.len() > len {
            return path;
        }
        let mut next = target.clone();
        next.extend(path[len + 1..].iter().cloned());
        path = next;
    }
    path
}

/// The edges between sibling modules, per folder, over the production files under `src`.
fn folder_edges(src: &Path) -> FolderEdges {
    let files = rust_files(src);
    let test_only = test_only_files(src, &files);
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter(|file| !test_only.contains(*file))
        .map(|file| module_path(src, file))
        .collect();
    // Each production file's paths, and what each of its `use` lines makes a name of it stand
    // for (the last segment of an imported path).
    let mut per_file = Vec::new();
    let mut imports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for file in &files {
        if test_only.contains(file) {
            continue;
        }
        let from = module_path(src, file);
        let text = std::fs::read_to_string(file).expect("a source file is readable");
        let code = production_lines(&text).join("\n");
        let paths = named_paths(&from, &modules, &code);
        for (path, _, used) in &paths {
            if let Some(name) = path.last().filter(|_| *used && path.len() > 1) {
                imports
                    .entry((from.clone(), name.clone()))
                    .or_insert_with(|| path.clone());
            }
        }
        per_file.push((file, from, paths));
    }
    let mut edges: FolderEdges = BTreeMap::new();
    for (file, from, paths) in per_file {
        for (path, line, _) in paths {
            let path = follow_imports(&imports, path);
            let Some(to) = (1..=path.len())
                .rev()
                .map(|len| path[..len].to_vec())
                .find(|prefix| modules.contains(prefix))
            else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            // Top-level modules are the layer table's; a file and its own door or children
            // are one room.
            if common == 0 || common == from.len() || common == to.len() {
                continue;
            }
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert_with(|| format!("{}:{line}", file.display()));
        }
    }
    edges
}

/// The cycles of each folder: the children that reach each other, with the edges among them.
fn cycles(edges: &FolderEdges) -> Vec<String> {
    let mut found = Vec::new();
    for (folder, folder_edges) in edges {
        let reaches = |from: &str, to: &str| -> bool {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.to_owned()];
            while let Some(node) = stack.pop() {
                for ((a, b), _) in folder_edges.range((node.clone(), String::new())..) {
                    if *a != node {
                        break;
                    }
                    if b == to {
                        return true;
                    }
                    if seen.insert(b.clone()) {
                        stack.push(b.clone());
                    }
                }
            }
            false
        };
        let in_cycle: Vec<String> = folder_edges
            .iter()
            .filter(|((a, b), _)| reaches(b, a))
            .map(|((a, b), at)| format!("{a} -> {b} ({at})"))
            .collect();
        if !in_cycle.is_empty() {
            found.push(format!("src/{}: {}", folder.join("/"), in_cycle.join(", ")));
        }
    }
    found
}

#[test]
fn no_module_folder_has_an_import_cycle_between_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&folder_edges(&src));
    assert!(
        found.is_empty(),
        "files of one module that import each other in a circle (move the shared part below \
         both):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_cycle_between_two_files_of_a_module_is_found_and_a_file_using_its_door_is_not() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("src");
    let write = |name: &str, text: &str| {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().expect("a file has a parent"))
            .expect("create the folder");
        std::fs::write(path, text).expect("write the file");
    };
    write("lib.rs", "mod m;\n");
    write(
        "m/mod.rs",
        "mod a;\nmod b;\nmod c;\npub use a::A;\npub struct Door;\n",
    );
    write(
        "m/a.rs",
        "use super::{Door, b::{B, self}};\npub struct A;\n",
    );
    write("m/b.rs", "pub struct B;\nfn f() { crate::m::c::g(); }\n");
    write("m/c.rs", "use super::Door;\npub fn g() {}\n");

    let edges = folder_edges(&src);
    let m = edges.get(&vec!["m".to_owned()]).expect("edges in m/");
    assert_eq!(
        m.keys().cloned().collect::<Vec<_>>(),
        vec![
            ("a".to_owned(), "b".to_owned()),
            ("b".to_owned(), "c".to_owned())
        ],
        "the door (mod.rs) is no sibling"
    );
    assert!(cycles(&edges).is_empty());

    // c now reaches back to a through a nested group and `super::super`: one circle of three.
    write(
        "m/c.rs",
        "use super::super::m::{Door, a::{self as x}};\npub fn g() {}\n",
    );
    let found = cycles(&folder_edges(&src));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("src/m: a -> b (")
            && found[0].contains("b -> c (")
            && found[0].contains("c -> a ("),
        "{found:?}"
    );
}
