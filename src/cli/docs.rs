//! `imagekeeper completion bash|zsh|fish` and `imagekeeper man`: shell completion scripts and
//! man pages, both generated from the clap definitions of [`super::Cli`], so they never drift
//! from the flags the binary takes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory, ValueEnum};

use super::{Cli, Failure};

/// A shell to complete in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// The shell, e.g. `source <(imagekeeper completion bash)`.
    shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write imagekeeper.1 and one imagekeeper-COMMAND.1 per command into this directory
    /// (created if missing) instead of printing imagekeeper.1 on stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn completion(args: CompletionArgs) -> Result<(), Failure> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "imagekeeper", &mut out);
    std::io::stdout()
        .lock()
        .write_all(&out)
        .context("writing the completion script")?;
    Ok(())
}

pub fn man(args: ManArgs) -> Result<(), Failure> {
    let command = Cli::command();
    let Some(dir) = args.dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut out)
            .context("rendering the man page")?;
        std::io::stdout()
            .lock()
            .write_all(&out)
            .context("writing the man page")?;
        return Ok(());
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(command, &dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    Ok(())
}
