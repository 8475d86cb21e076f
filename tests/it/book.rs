//! The book (`docs/`) and the README: the reference pages generated from the code, and every
//! relative link between them resolving.
//!
//! Invariants: `docs/src/reference/{commands,exit-codes,metrics,config}.md` are exactly what
//! this module renders from the binary's clap help, `telemetry::METRICS` and `config::CONFIG_FIELDS`
//! (`IMAGEKEEPER_WRITE_DOCS=1` rewrites them; `scripts/docs` does that); every relative link
//! in README.md and docs/src/**/*.md names a file that exists, and an anchor a heading of it;
//! the book links nothing outside docs/src (mdBook would not copy it); SUMMARY.md lists every
//! page; no deprecated flag in scripts/, deploy/ or a command the README or the book shows.
//! No network: external links are not followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use imagekeeper::config::FlagStatus;
use imagekeeper::config::{AgentConfig, CONFIG_FIELDS, OnReload};
use imagekeeper::telemetry::{METRICS, MetricKind};

use crate::support::bin;

/// The command that regenerates the pages, named in every failure.
const REGENERATE: &str = "run scripts/docs and commit the result";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by scripts/docs (tests/it/book.rs): do not edit by hand. -->\n"
    )
}

fn help(path: &[&str]) -> String {
    let mut args: Vec<&str> = path.to_vec();
    args.push("--help");
    let out = bin::run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "imagekeeper {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.is_empty() || !line.starts_with("  ") {
            break;
        }
        // An entry starts two spaces in; its wrapped help lines are indented further.
        if line.as_bytes().get(2).is_some_and(|b| *b != b' ') {
            let name = line.split_whitespace().next().expect("a name");
            if name != "help" {
                out.push(name.to_owned());
            }
        }
    }
    out
}

fn commands_page() -> String {
    let mut page = String::from("# Commands and flags\n\n");
    page.push_str(&header("the clap definitions (`imagekeeper ... --help`)"));
    page.push_str(
        "\nEvery command of `imagekeeper` with its `--help`, as the binary prints it. \
         The exit codes are on [their own page](exit-codes.md); the config file's fields, \
         which most `run` flags override, are in [Configuration fields](config.md).\n",
    );
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = queue.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let title = if path.is_empty() {
            "imagekeeper".to_owned()
        } else {
            format!("imagekeeper {}", path.join(" "))
        };
        page.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
        // Depth first, in the order the help lists them.
        for sub in subcommands(&text).into_iter().rev() {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    page
}

fn exit_codes_page() -> String {
    let text = help(&[]);
    let codes = text
        .split_once("Exit codes:\n")
        .map(|(_, rest)| rest)
        .expect("imagekeeper --help ends with its exit codes");
    let mut page = String::from("# Exit codes\n\n");
    page.push_str(&header("`imagekeeper --help` (src/cli/mod.rs)"));
    page.push_str(
        "\nEvery command exits with one of these codes.\n\n| code | meaning |\n|---|---|\n",
    );
    for line in codes.lines().filter(|l| !l.trim().is_empty()) {
        let (code, meaning) = line
            .trim()
            .split_once("  ")
            .unwrap_or_else(|| panic!("an exit code line is `CODE  MEANING`: {line:?}"));
        page.push_str(&format!("| {code} | {} |\n", cell(meaning.trim())));
    }
    page
}

/// A table cell: `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn metrics_page() -> String {
    let mut page = String::from("# Metrics\n\n");
    page.push_str(&header("`METRICS` in src/telemetry/metrics/families.rs"));
    page.push_str(
        "\nEvery metric the agent serves at `/metrics` on `--metrics-address` (OpenMetrics \
         text). A counter's sample is its name with `_total`; a histogram's are `_bucket`, \
         `_sum` and `_count`. No label ever takes an image name. See \
         [Observing the agent](../operators/observing.md) for the alerts and the dashboard.\n\n\
         | metric | type | labels | help | absent |\n|---|---|---|---|---|\n",
    );
    for family in METRICS {
        let mut name = family.exposed_name();
        if family.kind == MetricKind::Counter {
            name.push_str("_total");
        }
        let labels = if family.labels.is_empty() {
            String::new()
        } else {
            family
                .labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        page.push_str(&format!(
            "| `{name}` | {} | {labels} | {} | {} |\n",
            family.kind.as_str(),
            cell(family.help),
            cell(family.absent_when.unwrap_or("")),
        ));
    }
    page.push_str(&kep6053_section());
    page
}

/// The KEP-6053 section of the metrics page: the label values and the mappings, read from
/// the enums and the mapping functions themselves.
fn kep6053_section() -> String {
    use imagekeeper::gc::{
        AttemptReason, AttemptResult, DeletionReason, GcOperation, GcTrigger, RemovalReason,
        RescueReason, SkipReason, Verdict,
    };
    let values = |v: Vec<&str>| {
        v.iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let verdict_name = |v: Verdict| {
        serde_json::to_value(v)
            .expect("a verdict serializes")
            .as_str()
            .expect("a verdict is a string")
            .to_owned()
    };
    let mut out = String::from(
        "\n## Image GC attempts (KEP-6053)\n\n\
         Each of `imagekeeper_image_gc_attempts_total`, \
         `imagekeeper_image_gc_duration_seconds`, `imagekeeper_image_gc_freed_bytes`, \
         `imagekeeper_image_gc_target_bytes`, `imagekeeper_image_gc_image_deletions_total`, \
         `imagekeeper_image_gc_skipped_images_total` and \
         `imagekeeper_image_gc_image_fs_usage_percent` follows KEP-6053 as proposed (alpha, \
         text of 2026), \"Kubelet Image Garbage Collection Observability\": the kubelet's \
         name with `imagekeeper_` for `kubelet_`, the KEP's label names and values. They are alpha \
         as the KEP's are: a later text of the KEP may change them, and these with it. Every \
         name that was here before stays: `imagekeeper_image_garbage_collected_total{reason}` \
         counts every successful deletion, as \
         `imagekeeper_image_gc_image_deletions_total{result=\"success\"}` does (the KEP keeps \
         both); `imagekeeper_image_gc_duration_seconds` gained the labels `operation`, \
         `trigger` and `result` (a query that sums `by (le)` reads as before); \
         `imagekeeper_image_gc_cycles_total{result}` still counts the agent's GarbageCollect \
         cycles (its loop's and `gc` through it).\n\n\
         | label | of | values |\n|---|---|---|\n",
    );
    let rows: [(&str, &str, Vec<&str>); 8] = [
        (
            "operation",
            "all but the usage gauge",
            GcOperation::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        (
            "trigger",
            "all but the usage gauge",
            GcTrigger::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        (
            "result",
            "attempts, duration, freed bytes",
            AttemptResult::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        (
            "reason",
            "attempts, freed bytes",
            AttemptReason::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        (
            "reason",
            "image deletions",
            DeletionReason::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        ("result", "image deletions", vec!["success", "error"]),
        (
            "reason",
            "skipped images",
            SkipReason::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        ("phase", "image filesystem usage", vec!["before"]),
    ];
    for (label, of, v) in rows {
        out.push_str(&format!("| `{label}` | {of} | {} |\n", values(v)));
    }
    out.push_str(
        "\n**Operations and triggers.** The agent's GC loop (`--gc-period`) is \
         `operation=\"garbage_collect\"`, `trigger=\"periodic\"`; `imagekeeper gc` through the \
         agent is `garbage_collect`, `unknown`; `imagekeeper prune` through the agent is \
         `delete_unused_images`, `unknown` (an operator's request, not an eviction manager's \
         node reclaim). imagekeeper has no eviction manager and never reports `eviction` \
         itself: a program that embeds the library reports it with \
         `ImageGcManager::delete_unused_images_for(GcTrigger::Eviction, ..)` \
         (`garbage_collect` and `delete_unused_images` report `unknown`). One-shot `gc` and \
         `prune`, `replay` and `simulate` count as `unknown` too, and serve no `/metrics`. \
         MaxAge, the byte budget, the inode rule and the measured pass on further image \
         filesystems are parts of `garbage_collect`, not operations of their own; the budget \
         and the inode rule are threshold rules. Dry runs count nothing.\n\n\
         **Result and reason of an attempt**, read from the cycle's report when it ends: an \
         error before its detect completed is `error`, `detect_error`; an ImageFsInfo failure \
         `error`, `stats_error`; capacity 0 `error`, `invalid_capacity`; a failed RemoveImage \
         (MaxAge's or a walk's) `error`, `delete_error`; a threshold rule (the percentage, the \
         byte budget, the inode rule) that freed too little is `partial`, \
         `insufficient_freed` when the attempt removed an image, and `noop`, \
         `insufficient_freed` when it removed none; any other error (the store's, a container \
         list at the last look) `error`, `unknown`. Without an error, `delete_unused_images` \
         is `success` (it removed an image) or `noop`, with `all_unused`; `garbage_collect` is \
         `success`, `threshold` when a threshold rule removed an image, `success`, `age` when \
         only MaxAge did, and `noop`, `threshold` when nothing was removed (usage under the \
         thresholds, or GC disabled).\n\n\
         **Bytes.** `freed_bytes` observes every attempt's freed bytes: the sizes the runtime \
         listed for the images it removed (an estimate from image metadata, not a filesystem \
         measurement), 0 for an attempt that removed nothing. `target_bytes` observes a \
         `garbage_collect`'s amount to free on the first image filesystem when a byte rule \
         needed room (nothing for an attempt under the thresholds, or one only the inode rule \
         ran), and every `delete_unused_images`' total size of the images it found eligible and \
         tried to remove (0 when none), never a sentinel. Their buckets are powers of 4 from \
         1 MiB to 1 TiB (the KEP names none); the duration's are the kubelet's default \
         buckets, and only the attempts the agent runs (its loop, `gc` and `prune` through it) \
         are timed. `image_fs_usage_percent{phase=\"before\"}` is the usage the percentage rule \
         computed at the last `garbage_collect`, after MaxAge and before the threshold pass; \
         absent until one did.\n\n\
         **Series.** A series exists once counted. The agent creates at 0, when it starts, the \
         deletion series of `garbage_collect`, `periodic` for `space` and `age` with each \
         result, and its skip series for each reason, so a rate has a series before the first \
         removal.\n\n\
         **Deletions** count each RemoveImage call of GC under the reason of its removal:\n\n\
         | removal reason | `reason` |\n|---|---|\n",
    );
    // `orphan` is no GC removal: `prune --orphans` journals a containerd leftover under it,
    // and makes no RemoveImage call.
    for r in RemovalReason::ALL
        .into_iter()
        .filter(|r| *r != RemovalReason::Orphan)
    {
        out.push_str(&format!(
            "| `{}` | `{}` |\n",
            r.as_str(),
            DeletionReason::of_removal(r).as_str()
        ));
    }
    out.push_str(
        "\n**Skipped images** count each record a space walk read and passed over, by its \
         verdict (a walk stops once it has freed its amount, and does not read the records \
         after; `delete_unused_images` reads them all), and each victim the last look before \
         RemoveImage kept, by why. MaxAge counts only its last look's keeps. A record a \
         container uses or mounts as an image volume, the sandbox image, or one a kubelet pull \
         intent names has the verdict `in_use`.\n\n\
         | walk verdict | `reason` |\n|---|---|\n",
    );
    for v in Verdict::ALL {
        if let Some(why) = v.skip_reason() {
            out.push_str(&format!("| `{}` | `{}` |\n", verdict_name(v), why.as_str()));
        }
    }
    out.push_str("\n| last look kept it for | `reason` |\n|---|---|\n");
    for why in RescueReason::ALL {
        out.push_str(&format!(
            "| `{}` | `{}` |\n",
            why.as_str(),
            why.skip_reason().as_str()
        ));
    }
    out
}

fn config_page() -> String {
    let defaults = AgentConfig::defaults().expect("the defaults are valid");
    let mut page = String::from("# Configuration fields\n\n");
    page.push_str(&header("the settings table in src/config/settings.rs"));
    page.push_str(
        "\nThe fields of the `--config` file (TOML, KubeletConfiguration's field names), the \
         `run` flag that overrides each, or `--set KEY=VALUE` for the keys that have no flag or \
         whose flag is deprecated (a flag wins over `--set`, which wins over the file), the \
         kubelet setting it \
         matches (none: imagekeeper's own), its default, and whether a reload (SIGHUP, \
         `--config-watch-period`) applies it or it waits for a restart. Durations use Go's \
         syntax (`90s`, `2m`, `1h30m`). How the file is read and reloaded: \
         [Configuration](../operators/configuration.md).\n\n\
         | field | flag | kubelet | default | on reload | meaning |\n|---|---|---|---|---|---|\n",
    );
    for field in CONFIG_FIELDS {
        let kubelet = field
            .kubelet
            .map(|k| format!("`{k}`"))
            .unwrap_or_else(|| "(imagekeeper's own)".to_owned());
        let reload = match field.on_reload {
            OnReload::Applied => "applied",
            OnReload::NeedsRestart => "needs a restart",
        };
        page.push_str(&format!(
            "| `{}` | `{}` | {} | `{}` | {reload} | {} |\n",
            field.key,
            field.flag,
            cell(&kubelet),
            cell(&(field.default)(&defaults)),
            cell(field.help),
        ));
    }
    page
}

/// Compares each generated page with the committed file, or writes it when
/// `IMAGEKEEPER_WRITE_DOCS=1`.
#[test]
fn reference_pages_match_the_code() {
    let write = std::env::var("IMAGEKEEPER_WRITE_DOCS").is_ok_and(|v| v == "1");
    let pages = [
        ("commands.md", commands_page()),
        ("exit-codes.md", exit_codes_page()),
        ("metrics.md", metrics_page()),
        ("config.md", config_page()),
    ];
    let dir = root().join("docs/src/reference");
    let mut stale = Vec::new();
    for (name, want) in pages {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(format!("docs/src/reference/{name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from what the code generates: {REGENERATE}",
        stale.join(", ")
    );
}

/// The generated pages name what the issue asks of them: every top-level command, every
/// metric and every config field (a check on the renderers themselves).
#[test]
fn reference_pages_list_every_command_metric_and_field() {
    let commands = commands_page();
    for command in subcommands(&help(&[])) {
        assert!(
            commands.contains(&format!("## `imagekeeper {command}`")),
            "{command}"
        );
    }
    for sub in subcommands(&help(&["inspect"])) {
        assert!(
            commands.contains(&format!("## `imagekeeper inspect {sub}`")),
            "inspect {sub}"
        );
    }
    assert!(commands.contains("--image-gc-high-threshold"));
    let metrics = metrics_page();
    for family in METRICS {
        assert!(metrics.contains(&family.exposed_name()), "{}", family.name);
    }
    let config = config_page();
    for field in CONFIG_FIELDS {
        assert!(
            config.contains(&format!("`{}`", field.key)),
            "{}",
            field.key
        );
    }
    assert!(exit_codes_page().contains("| 2 | bad usage"));
}

/// Markdown files the check reads: README.md and the book's sources.
fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut stack = vec![root().join("docs/src")];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for ch in line.chars() {
            if ch == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(ch);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `[text](target)` in a Markdown text.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_owned());
        rest = &after[end..];
    }
    out
}

/// A heading's anchor as mdBook and GitHub make it: lower case, letters, digits, `-` and `_`
/// kept, white space turned into `-`, everything else dropped; a repeated one gets `-1`, `-2`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '-' || c == '_' {
                    Some(c.to_lowercase().next().unwrap_or(c))
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        out.insert(candidate);
    }
    out
}

/// Every relative link in README.md and the book resolves to a file, and an anchor to one of
/// its headings; no link from the book leaves docs/src.
#[test]
fn book_and_readme_links_resolve() {
    let book = root().join("docs/src");
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        let shown = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                normalize(&file.parent().expect("a parent").join(path))
            };
            if file.starts_with(&book) && !resolved.starts_with(&book) {
                broken.push(format!(
                    "{shown}: {target} leaves docs/src (the book cannot link it; name the file in backticks)"
                ));
                continue;
            }
            if !resolved.exists() {
                broken.push(format!("{shown}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}: {target}: no heading makes #{anchor}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// SUMMARY.md lists every page of docs/src, so none is left out of the book.
#[test]
fn summary_lists_every_page() {
    let book = root().join("docs/src");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&summary)
        .into_iter()
        .map(|l| normalize(&book.join(l)))
        .collect();
    let missing: Vec<String> = markdown_files()
        .into_iter()
        .filter(|f| f.starts_with(&book) && !f.ends_with("SUMMARY.md") && !listed.contains(f))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages SUMMARY.md does not list: {missing:?}"
    );
}

/// The link and anchor rules themselves, on a small text.
#[test]
fn links_and_anchors_follow_the_markdown() {
    let text = "# A `code` Title!\n\n## Same\n## Same\n\n[x](a.md#b) `[no](c.md)`\n```\n[no](d.md)\n```\n[y](#same-1 \"t\")\n";
    assert_eq!(links(text), ["a.md#b", "#same-1"]);
    let a = anchors(text);
    assert!(a.contains("a-code-title"), "{a:?}");
    assert!(a.contains("same") && a.contains("same-1"), "{a:?}");
}

/// The flags the settings table deprecates (`--pinned-image`, `--warm-set-dir`, ...): each
/// still works, printing a warning.
fn deprecated_flags() -> Vec<&'static str> {
    let flags: Vec<&'static str> = CONFIG_FIELDS
        .iter()
        .filter(|f| f.flag_status == Some(FlagStatus::Deprecated))
        .filter_map(|f| f.flag_name)
        .collect();
    assert!(flags.contains(&"--warm-set-dir"), "{flags:?}");
    flags
}

/// The deprecated flags `text` names, each as a whole word (`--warm-set-dir`, not
/// `--warm-set-dirs`).
fn deprecated_flags_in(text: &str, flags: &[&'static str]) -> Vec<&'static str> {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-');
    flags
        .iter()
        .copied()
        .filter(|flag| {
            text.match_indices(flag).any(|(at, _)| {
                !word(text[..at].chars().next_back())
                    && !word(text[at + flag.len()..].chars().next())
            })
        })
        .collect()
}

/// Nothing the project ships or shows operators as a command prints a deprecation warning:
/// no deprecated flag in `scripts/` or `deploy/` (the chart, its render, the unit file), nor
/// in a command of a fenced code block of the README or the book, nor in their prose (issue
/// 38: the text names the config key and `--set`), the generated reference pages aside;
/// `remove-runtime-pins` has a `--containerd-address` of its own. The one paragraph that
/// documents the deprecation (it quotes the warning) names the old flags.
#[test]
fn what_the_project_runs_or_shows_as_a_command_uses_no_deprecated_flag() {
    let flags = deprecated_flags();
    let mut found = Vec::new();
    let mut stack = vec![root().join("scripts"), root().join("deploy")];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            // Binary files hold no command.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                for flag in deprecated_flags_in(line, &flags) {
                    found.push(format!("{}:{}: {flag}", path.display(), n + 1));
                }
            }
        }
    }
    let reference = root().join("docs/src/reference");
    for path in markdown_files() {
        if path.starts_with(&reference) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("markdown");
        let mut fenced = false;
        let mut command = String::new();
        let mut paragraph: Vec<(usize, &str)> = Vec::new();
        for (n, line) in text.lines().chain(std::iter::once("")).enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if !fenced {
                if !line.trim().is_empty() {
                    paragraph.push((n, line));
                    continue;
                }
                let documents_the_deprecation = paragraph
                    .iter()
                    .any(|(_, l)| l.contains("is deprecated; use --set"));
                if !documents_the_deprecation {
                    for (n, line) in &paragraph {
                        for flag in deprecated_flags_in(line, &flags) {
                            found.push(format!("{}:{}: {flag}", path.display(), n + 1));
                        }
                    }
                }
                paragraph.clear();
                continue;
            }
            // A command continued with `\` is one command.
            command.push_str(line);
            if line.ends_with('\\') {
                continue;
            }
            let own_flags = command.contains("remove-runtime-pins");
            if !own_flags {
                for flag in deprecated_flags_in(&command, &flags) {
                    found.push(format!("{}:{}: {flag}", path.display(), n + 1));
                }
            }
            command.clear();
        }
    }
    assert!(
        found.is_empty(),
        "deprecated flags (use the config file key, or --set KEY=VALUE):\n{}",
        found.join("\n")
    );
    // The check sees a deprecated flag where there is one.
    assert_eq!(
        deprecated_flags_in(
            "run --pinned-image 'a:*' --warm-set-dir=/w --warm-period-x",
            &flags
        ),
        ["--pinned-image", "--warm-set-dir"]
    );
}
