//! `imagekeeper completion` and `imagekeeper man`, generated from the clap definitions: every
//! script and page names every command, and the man page renders.

use crate::support::bin;
use std::process::Command;

fn imagekeeper(args: &[&str]) -> String {
    let out = bin::run(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

const COMMANDS: [&str; 9] = [
    "run",
    "gc",
    "prune",
    "replay",
    "inspect",
    "pull",
    "doctor",
    "completion",
    "man",
];

const INSPECT_COMMANDS: [&str; 7] = [
    "list", "show", "backoff", "stats", "explain", "check", "export",
];

#[test]
fn completion_scripts_name_every_command_and_the_output_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = imagekeeper(&["completion", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for word in COMMANDS.iter().chain(&INSPECT_COMMANDS).chain(&[
            "no-headers",
            "kube-json",
            "image-gc-high-threshold",
        ]) {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = bin::run(&["completion", "powershell"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn bash_accepts_the_bash_completion_script() {
    let script = imagekeeper(&["completion", "bash"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("imagekeeper.bash");
    std::fs::write(&path, script).expect("write");
    match Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p imagekeeper",
            path.display()
        ))
        .output()
    {
        // scripts/test itself runs on bash: a test machine without it is broken, not a skip.
        Err(e) => panic!("run bash: {e}"),
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(stdout.contains("imagekeeper"), "{stdout}");
        }
    }
}

/// The page lists every command; `--dir` writes one page per command; `man -l` (groff) renders
/// the top page with no warning, when man is installed.
#[test]
fn the_man_page_names_every_command_and_renders() {
    let page = imagekeeper(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH imagekeeper 1"),
        "{page}"
    );
    for command in COMMANDS {
        assert!(
            page.contains(&format!("imagekeeper\\-{command}(1)")),
            "the page lacks {command}"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_arg = dir.path().join("man");
    imagekeeper(&["man", "--dir", dir_arg.to_str().expect("utf8")]);
    for command in COMMANDS {
        let sub = std::fs::read_to_string(dir_arg.join(format!("imagekeeper-{command}.1")))
            .unwrap_or_else(|e| panic!("imagekeeper-{command}.1: {e}"));
        assert!(
            sub.contains(&format!(".TH imagekeeper-{command} 1")),
            "{command}"
        );
    }
    for command in INSPECT_COMMANDS {
        assert!(
            dir_arg
                .join(format!("imagekeeper-inspect-{command}.1"))
                .exists()
        );
    }
    let run_page =
        std::fs::read_to_string(dir_arg.join("imagekeeper-run.1")).expect("the run page");
    assert!(
        run_page.contains("\\-\\-config"),
        "run's page names --config"
    );

    match Command::new("man")
        .args(["--warnings", "-l"])
        .arg(dir_arg.join("imagekeeper.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        // Only a missing `man` skips the rendering check; any other failure to run it fails.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("man -l: skipped (man is not installed)")
        }
        Err(e) => panic!("run man -l: {e}"),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let warnings = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{warnings}");
            assert!(warnings.trim().is_empty(), "groff warns: {warnings}");
            assert!(text.contains("SUBCOMMANDS"), "{text}");
            assert!(text.contains("imagekeeper-inspect(1)"), "{text}");
        }
    }
}
