//! `imagekeeper gc [--dry-run]` and `imagekeeper prune [--dry-run]`: one GarbageCollect or
//! DeleteUnusedImages, through the running agent's admin socket when it answers, else
//! directly against the runtime and the database.

use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use imagekeeper::admin::{AdminClient, AdminError, GcOutcome};
use imagekeeper::agent::FlagValues;
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::cri::CriClient;
use imagekeeper::gc::ImageGcManager;
use imagekeeper::gc::format::format_size;

use super::agent_flags::AgentFlags;
use super::{Failure, db};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    #[command(flatten)]
    flags: AgentFlags,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// How long to wait for a running agent's answer; the agent goes on with the cycle after
    /// it (Go duration syntax).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
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
            Err(e @ AdminError::PermissionDenied { .. }) => Err(Failure::from(e)),
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
                let store = Arc::new(if args.dry_run {
                    db::open_for_dry_run(&config.db)?
                } else {
                    db::open_waiting(&config.db, now).await?
                });
                let client = CriClient::connect(config.cri.clone())
                    .await
                    .context("connecting to the runtime")?;
                let manager =
                    ImageGcManager::new(client, store, config.gc.clone()).context("GC policy")?;
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
            print(&outcome, args.output)?;
            Err(Failure::from(anyhow::anyhow!("{e}")))
        }
        None => print(&outcome, args.output),
    }
}

fn print(outcome: &GcOutcome, output: Output) -> Result<(), Failure> {
    match output {
        Output::Json => {
            println!(
                "{}",
                serde_json::to_string_pretty(outcome).context("encoding JSON")?
            );
        }
        Output::Table => {
            let verb = if outcome.dry_run {
                "would remove"
            } else {
                "removed"
            };
            println!(
                "{:<15} {:<10} {:>10} {:<7}",
                "IMAGE ID", "HANDLER", "SIZE", "REASON"
            );
            for r in &outcome.removed {
                println!(
                    "{:<15} {:<10} {:>10} {:<7}",
                    r.key.image_id.short(),
                    r.key.runtime_handler,
                    format_size(r.size),
                    r.reason.as_str()
                );
            }
            for r in &outcome.removed {
                if let Some(note) = &r.evicted_before {
                    println!("note: {} was {note}", r.key.image_id.short());
                }
            }
            println!(
                "{verb} {} image(s), {} ({} bytes)",
                outcome.removed.len(),
                format_size(outcome.freed),
                outcome.freed
            );
        }
    }
    Ok(())
}
