//! `imagekeeper gc [--dry-run]` and `imagekeeper prune [--dry-run]`: one GarbageCollect or
//! DeleteUnusedImages, through the running agent's admin socket when it answers, else
//! directly against the runtime and the database.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use imagekeeper::admin::{AdminClient, AdminError, GcOutcome};
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::FlagValues;
use imagekeeper::cri::CriClient;
use imagekeeper::format::format_size;
use imagekeeper::gc::{ImageGcManager, Removal};

use super::agent_flags::AgentFlags;
use super::output::{Column, Format, KubeList, OutputArgs, is_list, write_table};
use super::{Failure, db};

#[derive(Args, Debug)]
pub struct GcArgs {
    #[command(flatten)]
    pub(super) flags: AgentFlags,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
    /// How long to wait for a running agent's answer; the agent goes on with the cycle after
    /// it (Go duration syntax).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::parse_timeout)]
    pub(super) timeout: std::time::Duration,
}

/// Which cycle to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cycle {
    GarbageCollect,
    DeleteUnused,
}

pub fn run(args: GcArgs, cycle: Cycle) -> Result<(), Failure> {
    let config = args.flags.resolve(FlagValues::default())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (outcome, via) = rt.block_on(async {
        match AdminClient::connect_with_timeout(&config.admin_socket, args.timeout).await {
            // An agent there that cannot take the call now: not a reason to go around it.
            Err(e @ (AdminError::PermissionDenied { .. } | AdminError::Busy { .. })) => {
                Err(Failure::from(e))
            }
            Ok(mut client) => {
                let outcome = match cycle {
                    Cycle::GarbageCollect => client.garbage_collect(args.dry_run).await,
                    Cycle::DeleteUnused => client.delete_unused(args.dry_run).await,
                }
                .context("calling the running agent")?;
                Ok::<_, Failure>((outcome, "the running agent"))
            }
            Err(_) => {
                let now = SystemClock.now();
                // A dry run opens the database read-only: it creates and changes nothing.
                // (A dry run's verified copy lives while `_copy` does.)
                let (store, _copy) = if args.dry_run {
                    let db::DryRunStore { store, copy } = db::open_for_dry_run(&config.db)?;
                    (store, Some(copy))
                } else {
                    (db::open_waiting(&config.db, now).await?, None)
                };
                let store = Arc::new(store);
                let client = CriClient::connect(config.cri.clone())
                    .await
                    .context("connecting to the runtime")?;
                // A one-shot GC after the agent was down counts that downtime as unwatched
                // (MaxAge leaves it out), with the periods the agent would have run at.
                let manager = ImageGcManager::new(client, store, config.gc.clone())
                    .context("GC policy")?
                    // Both loops detect, and so write a heartbeat: in normal operation one comes at
                    // the shorter period (a longer wait, a GC cycle holding the lock, only leaves a
                    // stretch unwatched: images kept longer, never removed sooner).
                    .with_watch_period(config.detect_period.min(config.gc_period));
                let outcome = match (cycle, args.dry_run) {
                    (Cycle::GarbageCollect, false) => {
                        GcOutcome::from_report(manager.garbage_collect(now).await, false)
                    }
                    (Cycle::DeleteUnused, false) => {
                        GcOutcome::from_report(manager.delete_unused_images(now).await, false)
                    }
                    (Cycle::GarbageCollect, true) => {
                        GcOutcome::from_plan(manager.plan(now, false).await)
                    }
                    (Cycle::DeleteUnused, true) => {
                        GcOutcome::from_plan(manager.plan(now, true).await)
                    }
                };
                Ok((
                    outcome,
                    "the database directly (no agent answered on the admin socket)",
                ))
            }
        }
    })?;
    eprintln!("imagekeeper: ran through {via}");
    match &outcome.error {
        // A failed run that removed (or, dry, planned) nothing: the error alone, not an
        // empty table above it.
        Some(e) if outcome.removed.is_empty() => Err(Failure::from(anyhow::anyhow!("{e}"))),
        Some(e) => {
            print(&outcome, &args.output)?;
            Err(Failure::from(anyhow::anyhow!("{e}")))
        }
        None => print(&outcome, &args.output),
    }
}

fn print(outcome: &GcOutcome, output: &OutputArgs) -> Result<(), Failure> {
    super::note_omitted(outcome.removed_omitted, "removals");
    super::note_omitted(
        outcome.warm_does_not_fit_omitted,
        "warm entries that do not fit",
    );
    let mut stdout = std::io::stdout().lock();
    let w: &mut dyn std::io::Write = &mut stdout;
    match output.format() {
        Format::Json => {
            writeln!(
                w,
                "{}",
                serde_json::to_string_pretty(outcome).context("encoding JSON")?
            )?;
        }
        f if is_list(f) => {
            let mut list = KubeList::new("ImageRemoval");
            for r in &outcome.removed {
                list.push(
                    r.key.image_id.as_str(),
                    serde_json::json!({
                        "id": r.key.image_id.as_str(),
                        "runtimeHandler": r.key.runtime_handler,
                        "sizeBytes": r.size,
                        "reason": r.reason.as_str(),
                        "dryRun": outcome.dry_run,
                        "evictedBefore": r.evicted_before,
                    }),
                );
            }
            list.write(w, f)?;
        }
        _ => {
            let verb = if outcome.dry_run {
                "would remove"
            } else {
                "removed"
            };
            let columns = [
                Column::new("IMAGE ID", |r: &Removal| {
                    if output.no_trunc {
                        r.key.image_id.to_string()
                    } else {
                        r.key.image_id.short().to_owned()
                    }
                }),
                Column::new("HANDLER", |r: &Removal| r.key.runtime_handler.clone()),
                Column::new("SIZE", |r: &Removal| format_size(r.size)),
                Column::wide("BYTES", |r: &Removal| r.size.to_string()),
                Column::new("REASON", |r: &Removal| r.reason.as_str().to_owned()),
            ];
            write_table(w, &columns, &outcome.removed, output.table())?;
            if !output.no_headers {
                for r in &outcome.removed {
                    if let Some(note) = &r.evicted_before {
                        writeln!(w, "note: {} was {note}", r.key.image_id.short())?;
                    }
                }
                for warm in &outcome.warm_does_not_fit {
                    writeln!(
                        w,
                        "warm: {} does not fit, not pulled: {}",
                        warm.image, warm.detail
                    )?;
                }
                if outcome.warm_does_not_fit_omitted > 0 {
                    writeln!(
                        w,
                        "warm: and {} more entries that do not fit",
                        outcome.warm_does_not_fit_omitted
                    )?;
                }
                for left_out in &outcome.not_pulled_ahead {
                    writeln!(w, "prefetch: {}: {}", left_out.image, left_out.reason)?;
                }
                if outcome.not_pulled_ahead_omitted > 0 {
                    writeln!(
                        w,
                        "prefetch: and {} more images not pulled ahead",
                        outcome.not_pulled_ahead_omitted
                    )?;
                }
                let total = u64::try_from(outcome.removed.len())
                    .unwrap_or(u64::MAX)
                    .saturating_add(outcome.removed_omitted);
                writeln!(
                    w,
                    "{verb} {total} image(s), {} ({} bytes)",
                    format_size(outcome.freed),
                    outcome.freed
                )?;
            }
        }
    }
    Ok(())
}
