//! `imagekeeper inspect`: read-only inspection of the record database, alongside a running
//! agent or after a crash (and `inspect disk`, read-only inspection of the runtime's disk). Parses flags, calls `imagekeeper::inspect` and
//! `imagekeeper::gc::explain_in`, and prints (`print.rs`). It never writes the database file and
//! reads only a verified copy of it; a damaged file is refused (exit 1), a path that is not a
//! regular file too (exit 2).

mod disk;
mod explain;
mod print;
mod settings;
use imagekeeper::inspect::workload;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args, Subcommand, ValueEnum};
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::DEFAULT_GC_PERIOD;
use imagekeeper::format::{go_duration, parse_go_duration};
use imagekeeper::gc::{
    DEFAULT_WATCH_PERIOD, ExplainContext, FsSpace, GcConfig, Irreplaceable, OfflineKubelet,
    RuntimePinsSeen, WatchHistory, explain_in, fold_offline, note_prior_evictions,
};
use imagekeeper::inspect::{
    InspectError, Snapshot, SortKey, escape_control, repull_rate, resolve_query, sort_records,
    stats,
};
use imagekeeper::kubelet::{DEFAULT_INTENT_MAX_AGE, PullRecordsReader};
use imagekeeper::model::{JournalEntry, PullOrigin, RemovalReason, UnixNanos};

use super::Failure;
use super::output::OutputArgs;
use explain::{explain, runtime_pins_seen};
use settings::{Explain, GcSettingArgs, Workload};

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The record database.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = "/var/lib/imagekeeper/records.redb"
    )]
    db: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
    /// Evaluate at this time instead of the wall clock (RFC 3339, e.g. 2026-01-02T08:00:00Z,
    /// or unix seconds): for a database written by `replay` with a trace's own times, or
    /// copied from a node whose clock was off, so `check` reports no false future stamps and
    /// `stats`, `explain` and the ages are as of that time.
    #[arg(long, global = true, value_name = "TIME", value_parser = parse_now)]
    now: Option<UnixNanos>,
    #[command(subcommand)]
    command: InspectCommand,
}

#[derive(Subcommand, Debug)]
enum InspectCommand {
    /// Every image record, like `crictl images`, in eviction order by default.
    List {
        /// Order: eviction (GC's walk order), size (largest first), last-used (most recent
        /// first), first-detected (newest first).
        #[arg(long, value_enum, default_value_t = Sort::Eviction)]
        sort: Sort,
    },
    /// One image by a unique prefix of its id (with or without `sha256:`) or by a name
    /// (`busybox:1.35`, a full reference, a digest), with its removals.
    Show {
        /// The image id or a unique prefix of it, or a name.
        id: String,
    },
    /// The eviction journal, newest first: removals by imagekeeper (reason, rank) and by
    /// others, with names and whether each image was pulled again.
    Evictions {
        /// Only removals within this long before now (Go duration, e.g. 24h).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        since: Option<Duration>,
        /// Only removals for this reason (`external`: not by imagekeeper).
        #[arg(long, value_enum)]
        reason: Option<ReasonFilter>,
    },
    /// The image-pull backoff entries.
    Backoff,
    /// Counts, total size, a histogram by last use, and the database's meta entries.
    Stats,
    /// For each image, whether GC would remove it now, and why or why not.
    Explain(Box<ExplainArgs>),
    /// The store's invariants and redb's integrity (on a temporary copy); exit 1 on any
    /// violation.
    Check,
    /// Every record as JSON lines (with -o table, wide or json), or as the List (-o kube-json,
    /// yaml, name).
    Export,
    /// The pull history (schema 5), newest first: imagekeeper's own pulls (`pull`), warm and
    /// restore pulls, and images first detected that someone else pulled (`detected`).
    Pulls {
        /// Only pulls within this long before now (Go duration, e.g. 24h).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        since: Option<Duration>,
        /// Only pulls of this origin.
        #[arg(long, value_enum)]
        origin: Option<OriginFilter>,
    },
    /// The node's recorded history as a workload trace for `imagekeeper simulate` (JSON lines;
    /// -o is ignored): a `node` line, then a `run` line per recorded use, a `restart` line per
    /// stretch no detect watched, and the `cronjob`, `bound` and `rollout` lines of what the
    /// cluster declared as the agent recorded it with clusterSignals on (each change at the
    /// detect that saw it; with --since, the last line of each before it at the trace's start).
    Workload(Box<WorkloadArgs>),
    /// Where the image filesystem's bytes are: containerd's images, containers, snapshots,
    /// blobs, ingests and leases of every namespace by owner, each byte once, orphaned
    /// snapshots and unreferenced blobs, and what statvfs's usage leaves unexplained. Reads
    /// the runtime (read-only), not the database.
    Disk(Box<disk::DiskArgs>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OriginFilter {
    Pull,
    Warm,
    Restore,
    Detected,
}

impl OriginFilter {
    fn keeps(self, origin: PullOrigin) -> bool {
        matches!(
            (self, origin),
            (OriginFilter::Pull, PullOrigin::Pull)
                | (OriginFilter::Warm, PullOrigin::Warm)
                | (OriginFilter::Restore, PullOrigin::Restore)
                | (OriginFilter::Detected, PullOrigin::Detected)
        )
    }
}

#[derive(Args, Debug)]
struct WorkloadArgs {
    /// Only the history from this time on: a Go duration before now (24h) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION|RFC3339", value_parser = parse_since)]
    since: Option<Since>,
    /// The node line's image filesystem size in bytes (default: the newest size the journal
    /// recorded, else a size where every image of the trace fits under the low threshold).
    #[arg(long, value_name = "BYTES")]
    capacity: Option<u64>,
    /// The node line's bytes used by other things than images (default: derived from the
    /// newest usage the journal recorded, else 0).
    #[arg(long, value_name = "BYTES")]
    other_used: Option<u64>,
    /// The node line's pull rate in bytes per second (default: measured from imagekeeper's own
    /// pulls, else 100000000).
    #[arg(long, value_name = "BYTES")]
    pull_bytes_per_s: Option<u64>,
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_duration,
        help = format!(
            "How often GC runs (Go duration; `run`'s --gc-period): the kubelet's ImageGCPeriod \
             (pkg/kubelet/kubelet.go) [default: {}]",
            go_duration(DEFAULT_GC_PERIOD)
        )
    )]
    gc_period: Option<Duration>,
    // The node line's policy: the thresholds and ages, as `run` takes them.
    #[command(flatten, next_help_heading = "GC settings (as `run` takes them)")]
    settings: GcSettingArgs<Workload>,
}

/// `--since`: a duration before now, or a time.
#[derive(Clone, Copy, Debug)]
enum Since {
    Ago(Duration),
    At(UnixNanos),
}

fn parse_since(s: &str) -> Result<Since, String> {
    if let Ok(d) = parse_go_duration(s) {
        return Ok(Since::Ago(d));
    }
    imagekeeper::format::parse_rfc3339(s)
        .map(Since::At)
        .ok_or_else(|| format!("{s:?} is neither a Go duration (24h) nor an RFC 3339 time"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ReasonFilter {
    Age,
    Space,
    Unused,
    // A containerd leftover `prune --orphans` removed (an orphaned snapshot, an unreferenced
    // blob).
    Orphan,
    External,
}

impl ReasonFilter {
    fn keeps(self, entry: &JournalEntry) -> bool {
        matches!(
            (self, entry.reason),
            (ReasonFilter::External, None)
                | (ReasonFilter::Age, Some(RemovalReason::Age))
                | (ReasonFilter::Space, Some(RemovalReason::Space))
                | (ReasonFilter::Unused, Some(RemovalReason::Unused))
                | (ReasonFilter::Orphan, Some(RemovalReason::Orphan))
        )
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Sort {
    Eviction,
    Size,
    LastUsed,
    FirstDetected,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The image filesystem's size in bytes; with --available, evaluates the space pass.
    #[arg(long, value_name = "BYTES", requires = "available")]
    capacity: Option<u64>,
    /// The image filesystem's available bytes.
    #[arg(long, value_name = "BYTES", requires = "capacity")]
    available: Option<u64>,
    /// A running agent's admin socket: when the agent there keeps this --db, each kept image
    /// says whether the runtime carries it as pinned (its last runtime-pins reconcile);
    /// otherwise that is unknown, and the note says why.
    #[arg(long, value_name = "PATH", default_value = imagekeeper::config::DEFAULT_ADMIN_SOCKET)]
    admin_socket: PathBuf,
    // The policy, the space pass's order, the kubelet's root directory and intent age, and
    // the irreplaceable images kept (with the sandbox image), as `run` takes them (the
    // kubelet's pull records count as GC counts them, matched by image id only, without the
    // runtime; the database does not hold the runtime's own sandbox image).
    #[command(flatten, next_help_heading = "GC settings (as `run` takes them)")]
    settings: GcSettingArgs<Explain>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| e.to_string())
}

fn parse_now(s: &str) -> Result<UnixNanos, String> {
    if let Ok(secs) = s.parse::<i64>() {
        return Ok(UnixNanos::from_secs(secs));
    }
    imagekeeper::format::parse_rfc3339(s)
        .ok_or_else(|| format!("{s:?} is neither RFC 3339 nor unix seconds"))
}

pub fn run(args: InspectArgs) -> Result<(), Failure> {
    // The one reading of the wall clock; everything below takes `now`.
    let now = args.now.unwrap_or_else(|| SystemClock.now());
    let out = &args.output;
    let db = args.db.as_path();
    let mut stdout = std::io::stdout().lock();
    let w = &mut stdout;
    match args.command {
        InspectCommand::Check => check(w, out, db, now),
        InspectCommand::Explain(explain_args) => {
            // The running agent's runtime pins are its state now: not an answer for another
            // time.
            let seen = match args.now {
                Some(_) => RuntimePinsSeen::unknown(
                    "unknown: --now evaluates another time than the running agent's last \
                     reconcile",
                ),
                None => runtime_pins_seen(&explain_args.admin_socket, db),
            };
            explain(w, out, db, &explain_args, now, &seen)
        }
        InspectCommand::List { sort } => {
            let snap = open(db, true)?;
            let mut records = snap.records_in_eviction_order().map_err(inspect_failure)?;
            sort_records(&mut records, sort_key(sort));
            let names = snap.names().map_err(inspect_failure)?;
            let protections = snap.protections(&records, now).map_err(inspect_failure)?;
            let warm = snap.warm_rows().map_err(inspect_failure)?;
            Ok(print::list(
                w,
                out,
                &records,
                &names,
                &protections,
                &warm,
                now,
            )?)
        }
        InspectCommand::Show { id } => show(w, out, db, &id, now),
        InspectCommand::Evictions { since, reason } => {
            let snap = open(db, true)?;
            let names = snap.names().map_err(inspect_failure)?;
            let from = since.map(|d| now.saturating_sub(d));
            let entries: Vec<_> = snap
                .journal()
                .map_err(inspect_failure)?
                .into_iter()
                .rev()
                .filter(|(k, _)| from.is_none_or(|from| k.removed_at >= from))
                .filter(|(_, e)| reason.is_none_or(|r| r.keeps(e)))
                .collect();
            Ok(print::evictions(w, out, &entries, &names, now)?)
        }
        InspectCommand::Backoff => {
            let snap = open(db, true)?;
            let entries = snap.backoff_entries().map_err(inspect_failure)?;
            Ok(print::backoff(w, out, &entries, now)?)
        }
        InspectCommand::Stats => stats_command(w, out, db, now),
        InspectCommand::Pulls { since, origin } => {
            let snap = open(db, true)?;
            let names = snap.names().map_err(inspect_failure)?;
            let from = since.map(|d| now.saturating_sub(d));
            let pulls: Vec<_> = snap
                .pulls()
                .map_err(inspect_failure)?
                .into_iter()
                .rev()
                .filter(|(k, _)| from.is_none_or(|from| k.at >= from))
                .filter(|(_, e)| origin.is_none_or(|o| o.keeps(e.origin)))
                .collect();
            Ok(print::pulls(w, out, &pulls, &names, now)?)
        }
        InspectCommand::Workload(args) => workload_command(w, db, &args, now),
        InspectCommand::Disk(args) => disk::disk(w, out, &args, now),
        InspectCommand::Export => {
            let snap = open(db, true)?;
            let mut records = snap.records().map_err(inspect_failure)?;
            records.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(print::export(w, out, &records)?)
        }
    }
}

/// `inspect check`: exit 1 on any violation (a copy is checked; the file is never modified).
fn check(w: &mut dyn Write, out: &OutputArgs, db: &Path, now: UnixNanos) -> Result<(), Failure> {
    let mut snap = open(db, false)?;
    let report = snap.check(now).map_err(inspect_failure)?;
    if report.needed_recovery {
        eprintln!(
            "imagekeeper: database {} needs recovery (it was not closed cleanly); \
             checked a repaired copy, the file itself was not modified",
            db.display()
        );
    }
    print::check(w, out, &report)?;
    if report.violations.is_empty() {
        Ok(())
    } else {
        Err(Failure::from(anyhow!(
            "database {}: {} violation(s)",
            db.display(),
            report.violations.len()
        )))
    }
}

/// `inspect show ID`: the image's records and its removals, newest first.
fn show(
    w: &mut dyn Write,
    out: &OutputArgs,
    db: &Path,
    id: &str,
    now: UnixNanos,
) -> Result<(), Failure> {
    let snap = open(db, true)?;
    let records = snap.records_in_eviction_order().map_err(inspect_failure)?;
    let names = snap.names().map_err(inspect_failure)?;
    let journal = snap.journal().map_err(inspect_failure)?;
    let image = resolve_query(&records, &names, &journal, id, db).map_err(inspect_failure)?;
    let found: Vec<_> = records
        .iter()
        .filter(|r| r.key.image_id == image)
        .cloned()
        .collect();
    let removals: Vec<_> = journal
        .into_iter()
        .rev()
        .filter(|(k, _)| k.key.image_id == image)
        .collect();
    let shown = print::Shown {
        found: &found,
        all: &records,
        names: &names,
        removals: &removals,
    };
    Ok(print::show(w, out, &shown, now)?)
}

/// `inspect stats`: counts, sizes, the last-use histogram, meta and the journal's re-pull rates.
fn stats_command(
    w: &mut dyn Write,
    out: &OutputArgs,
    db: &Path,
    now: UnixNanos,
) -> Result<(), Failure> {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let snap = open(db, true)?;
    let records = snap.records_in_eviction_order().map_err(inspect_failure)?;
    let backoff = snap.backoff_entries().map_err(inspect_failure)?;
    let meta = snap.meta().map_err(inspect_failure)?;
    let s = stats(&records, backoff.len(), now);
    let journal = snap.journal().map_err(inspect_failure)?;
    let journal_stats = print::JournalStats {
        entries: u64::try_from(journal.len()).unwrap_or(u64::MAX),
        last_day: repull_rate(&journal, now, DAY),
        last_week: repull_rate(&journal, now, 7 * DAY),
    };
    Ok(print::stats(w, out, &s, &meta, &journal_stats, now)?)
}

/// `inspect workload`: the recorded history as a workload trace.
fn workload_command(
    w: &mut dyn Write,
    db: &Path,
    args: &WorkloadArgs,
    now: UnixNanos,
) -> Result<(), Failure> {
    let policy = args.settings.resolve()?;
    let gc_period = args.gc_period.unwrap_or(DEFAULT_GC_PERIOD);
    if gc_period.is_zero() {
        return Err(Failure::usage(anyhow!(
            "invalid value 0 for --gc-period: GC must run at some period"
        )));
    }
    if args.capacity == Some(0) {
        return Err(Failure::usage(anyhow!(
            "invalid value 0 for --capacity: the image filesystem's size must be greater than 0"
        )));
    }
    if args.pull_bytes_per_s == Some(0) {
        return Err(Failure::usage(anyhow!(
            "invalid value 0 for --pull-bytes-per-s: pulls must take finite time"
        )));
    }
    let snap = open(db, true)?;
    let records = snap.records().map_err(inspect_failure)?;
    let names = snap.names().map_err(inspect_failure)?;
    let journal = snap.journal().map_err(inspect_failure)?;
    let uses = snap.uses().map_err(inspect_failure)?;
    let pulls = snap.pulls().map_err(inspect_failure)?;
    let meta = snap.meta_entries().map_err(inspect_failure)?;
    let signals = snap.signals().map_err(inspect_failure)?;
    let since = args.since.map(|s| match s {
        Since::Ago(d) => now.saturating_sub(d),
        Since::At(t) => t,
    });
    let history = workload::History {
        records: &records,
        names: &names,
        journal: &journal,
        uses: &uses,
        pulls: &pulls,
        meta: &meta,
        signals: &signals,
    };
    let overrides = workload::Overrides {
        capacity: args.capacity,
        other_used: args.other_used,
        pull_bytes_per_s: args.pull_bytes_per_s,
        high: policy.high,
        low: policy.low,
        min_age: policy.min_age,
        max_age: policy.max_age,
        gc_period,
    };
    Ok(workload::write(w, &history, since, &overrides)?)
}

fn sort_key(sort: Sort) -> SortKey {
    match sort {
        Sort::Eviction => SortKey::Eviction,
        Sort::Size => SortKey::Size,
        Sort::LastUsed => SortKey::LastUsed,
        Sort::FirstDetected => SortKey::FirstDetected,
    }
}

/// Opens the snapshot and says on stderr when the file changed while it was being copied, and
/// (if `say_repaired`) when it is a repaired copy.
fn open(db: &std::path::Path, say_repaired: bool) -> Result<Snapshot, Failure> {
    let snap = Snapshot::open(db).map_err(inspect_failure)?;
    say_how_it_was_copied(db, &snap, say_repaired);
    Ok(snap)
}

/// Says on stderr what `inspect` says of a snapshot: copies discarded while the file was
/// written, and (if `say_repaired`) that it is a repaired copy.
pub(super) fn say_how_it_was_copied(db: &std::path::Path, snap: &Snapshot, say_repaired: bool) {
    if snap.discarded_copies() > 0 {
        eprintln!(
            "imagekeeper: database {} changed while it was being copied (it is being written); \
             {} cop{} discarded, showing a verified copy",
            db.display(),
            snap.discarded_copies(),
            if snap.discarded_copies() == 1 {
                "y"
            } else {
                "ies"
            }
        );
    }
    if say_repaired && snap.repaired() {
        eprintln!(
            "imagekeeper: database {} needs recovery; showing a repaired copy, the file itself \
             was not modified",
            db.display()
        );
    }
}

pub(super) fn inspect_failure(e: InspectError) -> Failure {
    if e.is_usage() {
        Failure::usage(e)
    } else {
        Failure::from(e)
    }
}
