//! The command line: parse, call the library, print. Exit codes: 0 success, 1 failure,
//! 2 bad usage or bad input (flags, trace, config).

mod agent_flags;
mod gc;
mod inspect;
mod pull;
mod replay;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "imagekeeper",
    version,
    about = "Container image GC for Kubernetes nodes, with a memory"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the node agent: detect, image cache and GC loops, admin socket, metrics.
    Run(Box<run::RunArgs>),
    /// Run one image GC now (through the agent when it runs).
    Gc(Box<gc::GcArgs>),
    /// Remove every unused image now, as DeleteUnusedImages (through the agent when it runs).
    Prune(Box<gc::GcArgs>),
    /// Run the real GC manager and a real store against a scripted runtime (a trace).
    Replay(replay::ReplayArgs),
    /// Read the record database offline or beside a running agent; never writes it.
    Inspect(inspect::InspectArgs),
    /// Ensure one image is present (kubelet's EnsureImageExists), with the backoff on disk.
    Pull(pull::PullArgs),
}

/// A failure with its exit code.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 2,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure {
            code: 1,
            error: error.into(),
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    };
    init_tracing(cli.log_format, level);
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Gc(args) => gc::run(*args, gc::Cycle::GarbageCollect),
        Command::Prune(args) => gc::run(*args, gc::Cycle::DeleteUnused),
        Command::Replay(args) => replay::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Pull(args) => pull::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("imagekeeper: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn init_tracing(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("IMAGEKEEPER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
