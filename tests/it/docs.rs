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

/// The subcommands `imagekeeper ARGS --help` lists under "Commands:", in its order: the
/// commands the docs must name, derived from the binary so that a new command is checked
/// without a hand list to forget. clap's own `help` is left out (it has no page of its own).
fn commands_in_help(args: &[&str]) -> Vec<String> {
    let mut with_help = args.to_vec();
    with_help.push("--help");
    let help = imagekeeper(&with_help);
    let (_, section) = help
        .split_once("\nCommands:\n")
        .unwrap_or_else(|| panic!("{with_help:?} has no Commands: section: {help}"));
    // One line per command, indented by two spaces; a wrapped description continues on lines
    // indented further; a blank line ends the section.
    let commands: Vec<String> = section
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .map(str::to_owned)
        .collect();
    assert!(
        commands.len() >= 2,
        "{with_help:?} lists too few commands ({commands:?}): {help}"
    );
    commands
}

/// The top-level commands (`imagekeeper --help`).
fn commands() -> Vec<String> {
    let commands = commands_in_help(&[]);
    assert!(
        ["run", "inspect"]
            .iter()
            .all(|c| commands.iter().any(|listed| listed == c)),
        "the parse of --help lost run or inspect: {commands:?}"
    );
    commands
}

/// The `inspect` subcommands (`imagekeeper inspect --help`).
fn inspect_commands() -> Vec<String> {
    commands_in_help(&["inspect"])
}

/// A name as groff shows it in a page's text (`-` escaped as `\-`).
fn roff(name: &str) -> String {
    name.replace('-', "\\-")
}

#[test]
fn completion_scripts_name_every_command_and_the_output_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = imagekeeper(&["completion", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        let words = commands()
            .into_iter()
            .chain(inspect_commands())
            .chain(["no-headers", "kube-json", "image-gc-high-threshold"].map(str::to_owned));
        for word in words {
            assert!(script.contains(&word), "{shell} completion lacks {word}");
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
    let commands = commands();
    for command in &commands {
        assert!(
            page.contains(&format!("imagekeeper\\-{}(1)", roff(command))),
            "the page lacks {command}"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_arg = dir.path().join("man");
    imagekeeper(&["man", "--dir", dir_arg.to_str().expect("utf8")]);
    for command in &commands {
        let sub = std::fs::read_to_string(dir_arg.join(format!("imagekeeper-{command}.1")))
            .unwrap_or_else(|e| panic!("imagekeeper-{command}.1: {e}"));
        assert!(
            sub.contains(&format!(".TH imagekeeper-{command} 1")),
            "{command}"
        );
    }
    for command in inspect_commands() {
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
