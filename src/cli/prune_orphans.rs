//! `imagekeeper prune [--dry-run]` and `imagekeeper prune --orphans --dry-run [--min-age D]
//! [--namespace NS]...`: the first is DeleteUnusedImages (`gc.rs`); the second prints the plan
//! of what containerd keeps that nothing uses (orphaned snapshots and unreferenced blobs, from
//! the same accounting as `inspect disk`, `imagekeeper::disk::orphan_plan`) and removes nothing:
//! the removal itself is not built yet, so `--orphans` without `--dry-run` is refused.

use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::FlagValues;
use imagekeeper::cri::CONTAINERD_CRI_NAMESPACE;
use imagekeeper::disk::{OrphanPlan, account, orphan_plan};
use imagekeeper::format::{format_size, go_duration};
use serde_json::json;

use super::Failure;
use super::disk_read::read_runtime;
use super::gc::{Cycle, GcArgs};
use super::output::{Format, KubeList, is_list, table};

#[derive(Args, Debug)]
pub struct PruneArgs {
    #[command(flatten)]
    gc: GcArgs,
    /// Instead of unused images, containerd's leftovers nothing uses: orphaned snapshots and
    /// unreferenced blobs (as `inspect disk` finds them). Only with --dry-run for now: prints
    /// the plan, removes nothing.
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
    if !args.gc.dry_run {
        return Err(Failure::usage(anyhow!(
            "prune --orphans removes nothing yet: run it with --dry-run to print the plan"
        )));
    }
    let config = args.gc.flags.resolve(FlagValues::default())?;
    let timeout = config.cri.call_timeout;
    let (state, fs) = read_runtime(
        &config.cri.runtime_endpoint,
        &config.containerd_address,
        timeout,
    )?;
    let now = SystemClock.now();
    let report = account(&state, &fs, CONTAINERD_CRI_NAMESPACE, now);
    for warning in &report.warnings {
        eprintln!("imagekeeper: warning: {warning}");
    }
    let mut namespaces: Vec<&str> = vec![CONTAINERD_CRI_NAMESPACE];
    namespaces.extend(args.namespaces.iter().map(String::as_str));
    let plan = orphan_plan(&report, args.min_age.as_secs(), &namespaces);
    let mut stdout = std::io::stdout().lock();
    print(&mut stdout, &args, &plan)?;
    Ok(())
}

fn print(w: &mut dyn std::io::Write, args: &PruneArgs, plan: &OrphanPlan) -> std::io::Result<()> {
    let out = &args.gc.output;
    let format = out.format();
    if format == Format::Json {
        let mut value = serde_json::to_value(plan).map_err(std::io::Error::other)?;
        value["dryRun"] = json!(true);
        let text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
        return writeln!(w, "{text}");
    }
    if is_list(format) {
        let mut list = KubeList::new("OrphanRemoval");
        for r in &plan.removals {
            let mut fields = serde_json::to_value(r).map_err(std::io::Error::other)?;
            fields["dryRun"] = json!(true);
            list.push(
                format!("{}/{}/{}", r.kind.as_str(), r.namespace, r.name),
                fields,
            );
        }
        return list.write(w, format);
    }
    let age = |s: u64| go_duration(Duration::from_secs(s));
    let mut rows: Vec<Vec<String>> = plan
        .removals
        .iter()
        .map(|r| {
            vec![
                "yes".into(),
                r.kind.as_str().into(),
                r.namespace.clone(),
                r.name.clone(),
                format_size(r.bytes),
                age(r.age_seconds),
                r.reason.clone(),
            ]
        })
        .collect();
    rows.extend(plan.kept.iter().map(|k| {
        vec![
            "no".into(),
            k.kind.as_str().into(),
            k.namespace.clone(),
            k.name.clone(),
            format_size(k.bytes),
            "-".into(),
            k.reason.clone(),
        ]
    }));
    let headers = ["REMOVE", "KIND", "NAMESPACE", "NAME", "SIZE", "AGE", "WHY"];
    table(w, &headers, &rows, out.no_headers)?;
    if !out.no_headers {
        writeln!(
            w,
            "dry run: would remove {} leftover(s), {} ({} bytes); older than {}, in {}",
            plan.removals.len(),
            format_size(plan.bytes),
            plan.bytes,
            go_duration(args.min_age),
            std::iter::once(CONTAINERD_CRI_NAMESPACE)
                .chain(args.namespaces.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(())
}
