//! The command line: parse, call the library, print. Exit codes: 0 success, 1 failure,
//! 2 bad usage or bad input (flags, trace, config).

mod agent_flags;
mod db;
mod disk_read;
mod docs;
mod doctor;
mod gc;
mod inspect;
mod output;
mod pin;
mod prune_orphans;
mod pull;
mod replay;
mod restore;
mod run;
mod runtime_pins;
mod simulate;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "imagekeeper",
    version,
    about = "Container image GC for Kubernetes nodes, with a memory",
    after_long_help = exit_codes_help()
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
    /// Run the node agent: detect, image cache and GC loops, admin socket, metrics. SIGHUP
    /// reloads --config; NOTIFY_SOCKET gets READY=1 after the first detect (systemd).
    Run(Box<run::RunArgs>),
    /// Run one image GC now (through the agent when it runs).
    Gc(Box<gc::GcArgs>),
    /// Remove every unused image now, as DeleteUnusedImages (through the agent when it runs);
    /// with --orphans, containerd's leftovers nothing uses, each journaled (--dry-run: the plan).
    Prune(Box<prune_orphans::PruneArgs>),
    /// Run the real GC manager and a real store against a scripted runtime (a trace).
    Replay(replay::ReplayArgs),
    /// What each GC policy would cost a workload in bytes pulled again: the real GC manager
    /// over a workload trace (kubelet, imagekeeper, adaptive, predictive, and a clairvoyant
    /// reference).
    Simulate(simulate::SimulateArgs),
    /// Read the record database offline or beside a running agent; never writes it.
    Inspect(inspect::InspectArgs),
    /// Ensure one image is present (kubelet's EnsureImageExists), with the backoff on disk.
    Pull(Box<pull::PullArgs>),
    /// Pull back the images removed externally (a wipe, another tool's GC) and used recently,
    /// most recently used first, within a byte budget and the disk's headroom (through the
    /// agent when it runs).
    Restore(Box<restore::RestoreArgs>),
    /// Pin an image: GC, prune and DeleteUnusedImages keep it until the pin expires (through
    /// the agent when it runs).
    Pin(Box<pin::PinArgs>),
    /// Delete a pin (through the agent when it runs).
    Unpin(Box<pin::UnpinArgs>),
    /// List the pins: what each keeps, until when, and why.
    Pins(Box<pin::PinsArgs>),
    /// Check the kubelet's configuration against imagekeeper's: each conflict and what to change.
    Doctor(Box<doctor::DoctorArgs>),
    /// Remove every io.cri-containerd.pinned label imagekeeper set in containerd (and only
    /// those): the uninstall step of the runtime pins (runtimePins). Stop the agent first.
    RemoveRuntimePins(Box<runtime_pins::RemoveRuntimePinsArgs>),
    /// Print a shell completion script (bash, zsh or fish).
    Completion(docs::CompletionArgs),
    /// Print the man page (or write one per command with --dir).
    Man(docs::ManArgs),
}

/// `--timeout`: how long a command waits for a running agent's answer (Go duration syntax,
/// greater than 0).
fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = imagekeeper::format::parse_go_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

/// Exit code of a command that failed (the runtime, the database, the agent, `inspect check`
/// finding a violation, `doctor` finding a conflict).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of bad usage or bad input: flags, a config file, a trace, a path that is not a
/// regular file, an invalid image name or pull secret.
pub const EXIT_USAGE: u8 = 2;

/// The exit codes, at the end of `imagekeeper --help` (and so in the generated reference,
/// `docs/src/reference/commands.md`).
fn exit_codes_help() -> String {
    format!(
        "Exit codes:\n  \
         0  success (also when stdout's reader goes away: `imagekeeper inspect list | head`)\n  \
         {EXIT_FAILURE}  failure: the runtime, the database or the agent failed; `inspect check` \
         found a violation; `doctor` found a conflict; `prune --orphans` could not remove a \
         leftover (its row says why)\n  \
         {EXIT_USAGE}  bad usage or bad input: a flag, a config file, a trace, a path that is \
         not a regular file, an invalid image name or pull secret"
    )
}

/// On stderr, when the agent cut a list to keep its answer within the admin socket's limit:
/// "and N more" (the list printed is the part it sent).
pub fn note_omitted(omitted: u64, what: &str) {
    if omitted > 0 {
        eprintln!(
            "imagekeeper: and {omitted} more {what}: the agent's answer is cut at {} MiB",
            imagekeeper::admin::MAX_ANSWER_BYTES >> 20
        );
    }
}

/// A failure with its exit code.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: EXIT_USAGE,
            error: error.into(),
        }
    }

    /// The same failure with the credentials `image` carries (`user:password@`), wherever its
    /// message shows them, replaced by `REDACTED` (the one redaction of image names,
    /// [`imagekeeper::pull::redact_credentials`]).
    pub fn redact(self, image: &str) -> Failure {
        let message = imagekeeper::pull::redact_credentials(&render(&self.error), image);
        Failure {
            code: self.code,
            error: anyhow::anyhow!(message),
        }
    }
}

/// The message of an error and its causes, each cause added only when the message so far does
/// not already say it (`StoreError::Io` prints its source, which is also its cause).
fn render(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether the failure is stdout's reader going away (`imagekeeper ... | head`).
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!` panics when stdout's reader has gone away (`imagekeeper inspect list | head`;
/// Rust ignores SIGPIPE): that is no error, so such a panic ends the process with exit 0 and
/// no message. Every other panic keeps the default report.
fn exit_quietly_on_broken_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            error: error.into(),
        }
    }
}

pub fn main() -> ExitCode {
    exit_quietly_on_broken_stdout();
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
        Command::Prune(args) => prune_orphans::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Pull(args) => pull::run(*args),
        Command::Restore(args) => restore::run(*args),
        Command::Pin(args) => pin::pin(*args),
        Command::Unpin(args) => pin::unpin(*args),
        Command::Pins(args) => pin::pins(*args),
        Command::Doctor(args) => doctor::run(*args),
        Command::RemoveRuntimePins(args) => runtime_pins::run(*args),
        Command::Completion(args) => docs::completion(args),
        Command::Man(args) => docs::man(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if is_broken_pipe(&failure.error) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("imagekeeper: {}", render(&failure.error));
            ExitCode::from(failure.code)
        }
    }
}

fn init_tracing(format: LogFormat, default_level: &str) {
    // kube-rs's watcher warns at every retry of a refused list; the cluster module's watch
    // loop says it once, with the error, so only the watcher's errors pass by default.
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("IMAGEKEEPER_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                "{default_level},kube_runtime::watcher=error"
            ))
        });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
