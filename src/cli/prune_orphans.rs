//! `imagekeeper prune [--dry-run]` and `imagekeeper prune --orphans [--dry-run] [--min-age D]
//! [--namespace NS]...`: the first is DeleteUnusedImages (`gc.rs`); the second removes what
//! containerd keeps that nothing uses (orphaned snapshots and unreferenced blobs, from the same
//! accounting as `inspect disk`, `imagekeeper::disk::orphan_plan`), each re-checked right
//! before its removal and journaled, or with --dry-run prints the same plan and removes
//! nothing. Like `gc` and `prune`, it runs through the agent's admin socket when an agent
//! answers (the agent holds the database the removals are journaled in), else here, with the
//! database opened directly (`imagekeeper::agent::prune_orphans` in both cases). Exit 1 when
//! any removal failed.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use imagekeeper::admin::{AdminClient, AdminError};
use imagekeeper::agent::{PruneOrphans, prune_orphans};
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::FlagValues;
use imagekeeper::cri::{CONTAINERD_CRI_NAMESPACE, CriClient, ImageRuntime};
use imagekeeper::disk::{PruneReport, PruneResult};
use imagekeeper::format::{format_size, go_duration};
use serde_json::json;

use super::gc::{Cycle, GcArgs};
use super::output::{Format, KubeList, is_list, table};
use super::{Failure, db};

#[derive(Args, Debug)]
pub struct PruneArgs {
    #[command(flatten)]
    gc: GcArgs,
    /// Instead of unused images, containerd's leftovers nothing uses: orphaned snapshots and
    /// unreferenced blobs (as `inspect disk` finds them), each re-checked right before its
    /// removal and journaled (`inspect evictions`, reason orphan). With --dry-run: the plan.
    #[arg(long)]
    orphans: bool,
    /// With --orphans: only leftovers at least this old (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "1h", requires = "orphans", value_parser = parse_duration)]
    min_age: Duration,
    /// With --orphans: a containerd namespace whose leftovers may go (repeatable; the CRI's
    /// k8s.io is always one). Other namespaces' are reported, never touched.
    #[arg(long = "namespace", value_name = "NS", requires = "orphans")]
    namespaces: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    imagekeeper::format::parse_go_duration(s).map_err(|e| e.to_string())
}

pub fn run(args: PruneArgs) -> Result<(), Failure> {
    if !args.orphans {
        return super::gc::run(args.gc, Cycle::DeleteUnused);
    }
    let config = args.gc.flags.resolve(FlagValues::default())?;
    let request = PruneOrphans {
        min_age: args.min_age,
        namespaces: args.namespaces.clone(),
        dry_run: args.gc.dry_run,
    };
    let timeout = config.cri.call_timeout;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (report, warnings, via) = rt.block_on(async {
        match AdminClient::connect_with_timeout(&config.admin_socket, args.gc.timeout).await {
            // An agent there that cannot take the call now: not a reason to go around it.
            Err(e @ (AdminError::PermissionDenied { .. } | AdminError::Busy { .. })) => {
                Err(Failure::from(e))
            }
            Ok(mut client) => {
                let (json, warnings) = client
                    .prune_orphans(request.min_age, &request.namespaces, request.dry_run)
                    .await
                    .context("calling the running agent")?;
                let report: PruneReport =
                    serde_json::from_str(&json).context("the agent's prune report")?;
                Ok::<_, Failure>((report, warnings, "the running agent"))
            }
            Err(_) => {
                let cri = CriClient::connect(config.cri.clone())
                    .await
                    .map_err(Failure::usage)?;
                let image_fs = cri
                    .image_fs_stats()
                    .await
                    .with_context(|| format!("ImageFsInfo of {}", config.cri.runtime_endpoint))?;
                // A dry run reads containerd only; a removal journals, so opens the database
                // (once the runtime answered: a runtime that is not there creates no file).
                let store = if request.dry_run {
                    None
                } else {
                    Some(db::open_waiting(&config.db, SystemClock.now()).await?)
                };
                let (report, warnings) = prune_orphans(
                    &config.containerd_address,
                    Path::new(&image_fs.mountpoint),
                    timeout,
                    &SystemClock,
                    store.as_ref(),
                    &request,
                )
                .await
                .map_err(|e| Failure::from(anyhow!(e)))?;
                Ok((
                    report,
                    warnings,
                    "containerd and the database directly (no agent answered on the admin socket)",
                ))
            }
        }
    })?;
    eprintln!("imagekeeper: ran through {via}");
    for warning in warnings.iter().chain(&report.warnings) {
        eprintln!("imagekeeper: warning: {warning}");
    }
    let mut stdout = std::io::stdout().lock();
    print(&mut stdout, &args, &report)?;
    if report.failed > 0 {
        return Err(Failure::from(anyhow!(
            "{} of {} removal(s) failed (see their rows)",
            report.failed,
            report.removals.len()
        )));
    }
    Ok(())
}

fn print(
    w: &mut dyn std::io::Write,
    args: &PruneArgs,
    report: &PruneReport,
) -> std::io::Result<()> {
    let out = &args.gc.output;
    let format = out.format();
    if format == Format::Json {
        let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
        return writeln!(w, "{text}");
    }
    if is_list(format) {
        let mut list = KubeList::new("OrphanRemoval");
        for r in &report.removals {
            let mut fields = serde_json::to_value(r).map_err(std::io::Error::other)?;
            fields["dryRun"] = json!(report.dry_run);
            let removal = &r.removal;
            list.push(
                format!(
                    "{}/{}/{}",
                    removal.kind.as_str(),
                    removal.namespace,
                    removal.name
                ),
                fields,
            );
        }
        return list.write(w, format);
    }
    let age = |s: u64| go_duration(Duration::from_secs(s));
    let mut rows: Vec<Vec<String>> = report
        .removals
        .iter()
        .map(|r| {
            let removal = &r.removal;
            vec![
                r.result.as_str().into(),
                removal.kind.as_str().into(),
                removal.namespace.clone(),
                removal.name.clone(),
                format_size(removal.bytes),
                age(removal.age_seconds),
                r.error.clone().unwrap_or_else(|| removal.reason.clone()),
            ]
        })
        .collect();
    rows.extend(report.kept.iter().map(|k| {
        vec![
            "kept".into(),
            k.kind.as_str().into(),
            k.namespace.clone(),
            k.name.clone(),
            format_size(k.bytes),
            "-".into(),
            k.reason.clone(),
        ]
    }));
    let headers = ["RESULT", "KIND", "NAMESPACE", "NAME", "SIZE", "AGE", "WHY"];
    table(w, &headers, &rows, out.no_headers)?;
    if out.no_headers {
        return Ok(());
    }
    let scope = format!(
        "older than {}, in {}",
        go_duration(args.min_age),
        std::iter::once(CONTAINERD_CRI_NAMESPACE)
            .chain(args.namespaces.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if report.dry_run {
        return writeln!(
            w,
            "dry run: would remove {} leftover(s), {} ({} bytes); {scope}",
            report.removals.len(),
            format_size(report.bytes),
            report.bytes,
        );
    }
    let count = |result| {
        report
            .removals
            .iter()
            .filter(|r| r.result == result)
            .count()
    };
    writeln!(
        w,
        "removed {} of {} leftover(s), {} ({} bytes); {} skipped, {} failed; {scope}",
        count(PruneResult::Removed),
        report.removals.len(),
        format_size(report.freed_bytes),
        report.freed_bytes,
        count(PruneResult::Skipped),
        report.failed,
    )?;
    if let (Some(before), Some(after)) = (report.used_bytes_before, report.used_bytes_after) {
        writeln!(
            w,
            "image filesystem: {} used before, {} after containerd's garbage collection",
            format_size(before),
            format_size(after)
        )?;
    }
    Ok(())
}
