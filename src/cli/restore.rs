//! `imagekeeper restore [--used-within 24h] [--max-bytes SIZE] [--dry-run]`: pulls back, most
//! recently used first, the images the journal says were removed externally (a runtime wipe,
//! a reimaged disk, another tool's GC) and used within the window, within the byte budget and
//! under the GC's low threshold. Through the running agent's admin socket when it answers,
//! else directly against the runtime and the database. Exit 1 when a pull failed.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use imagekeeper::admin::{AdminClient, AdminError};
use imagekeeper::agent::restore_images;
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::FlagValues;
use imagekeeper::cri::CriClient;
use imagekeeper::format::{format_ago, format_size};
use imagekeeper::pull::ImageManager;
use imagekeeper::warm::{DEFAULT_USED_WITHIN, RestoreItem, RestoreOptions, RestoreState};

use super::agent_flags::AgentFlags;
use super::output::{Column, Format, KubeList, OutputArgs, is_list, write_table};
use super::{Failure, db};

#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    flags: AgentFlags,
    /// Only images last used at most this long ago (Go duration syntax) [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = parse_window)]
    used_within: Option<std::time::Duration>,
    /// At most this many bytes in all: bytes or a quantity (20Gi, 15G); none: no budget.
    #[arg(long, value_name = "SIZE", value_parser = imagekeeper::warm::parse_size)]
    max_bytes: Option<u64>,
    /// List what would be pulled back and pull nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// How long to wait for a running agent's answer (Go duration syntax).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
}

/// `--used-within`: greater than 0.
fn parse_window(s: &str) -> Result<std::time::Duration, String> {
    let d = imagekeeper::format::parse_go_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

pub fn run(args: RestoreArgs) -> Result<(), Failure> {
    let config = args.flags.resolve(FlagValues::default())?;
    let options = RestoreOptions {
        used_within: args.used_within.unwrap_or(DEFAULT_USED_WITHIN),
        max_bytes: args.max_bytes,
        dry_run: args.dry_run,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (outcome, via) = rt.block_on(async {
        match AdminClient::connect_with_timeout(&config.admin_socket, args.timeout).await {
            Err(e @ (AdminError::PermissionDenied { .. } | AdminError::Busy { .. })) => {
                Err(Failure::from(e))
            }
            Ok(mut client) => {
                let outcome = client
                    .restore(options)
                    .await
                    .context("calling the running agent")?;
                Ok::<_, Failure>((outcome, "the running agent"))
            }
            Err(_) => {
                let clock: Arc<dyn Clock> = Arc::new(SystemClock);
                let now = clock.now();
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
                let sources = config
                    .credential_sources()
                    .context("--image-credential-provider-config")
                    .map_err(Failure::usage)?;
                let images =
                    ImageManager::new(&config.pull, Arc::new(client.clone()), store.clone(), clock)
                        .context("pull settings")?
                        .with_credential_sources(Arc::new(sources));
                let outcome =
                    restore_images(&client, &images, &store, &config.gc.policy, now, options)
                        .await
                        .context("restore")?;
                Ok((
                    outcome,
                    "the database directly (no agent answered on the admin socket)",
                ))
            }
        }
    })?;
    eprintln!("imagekeeper: ran through {via}");
    print(&outcome, &args.output)?;
    let failed = outcome
        .items
        .iter()
        .filter(|i| i.state == RestoreState::Failed)
        .count();
    if failed > 0 {
        return Err(Failure::from(anyhow::anyhow!(
            "{failed} image(s) could not be pulled back"
        )));
    }
    Ok(())
}

fn print(outcome: &imagekeeper::warm::RestoreOutcome, output: &OutputArgs) -> Result<(), Failure> {
    super::note_omitted(outcome.omitted, "images");
    let mut stdout = std::io::stdout().lock();
    let w: &mut dyn std::io::Write = &mut stdout;
    let now = SystemClock.now();
    match output.format() {
        Format::Json => {
            writeln!(
                w,
                "{}",
                serde_json::to_string_pretty(outcome).context("encoding JSON")?
            )?;
        }
        f if is_list(f) => {
            let mut list = KubeList::new("ImageRestore");
            for i in &outcome.items {
                list.push(
                    &i.image_id,
                    serde_json::json!({
                        "id": i.image_id,
                        "runtimeHandler": i.runtime_handler,
                        "image": i.image,
                        "sizeBytes": i.size,
                        "lastUsed": imagekeeper::format::format_rfc3339(i.last_used),
                        "removedAt": imagekeeper::format::format_rfc3339(i.removed_at),
                        "state": i.state.as_str(),
                        "detail": i.detail,
                        "dryRun": outcome.dry_run,
                    }),
                );
            }
            list.write(w, f)?;
        }
        _ => {
            let no_trunc = output.no_trunc;
            let columns = [
                Column::new("IMAGE", |i: &RestoreItem| i.image.clone()),
                Column::new("IMAGE ID", move |i: &RestoreItem| {
                    if no_trunc {
                        i.image_id.clone()
                    } else {
                        imagekeeper::model::ImageId::new(i.image_id.clone())
                            .short()
                            .to_owned()
                    }
                }),
                Column::wide("HANDLER", |i: &RestoreItem| i.runtime_handler.clone()),
                Column::new("SIZE", |i: &RestoreItem| format_size(i.size)),
                Column::new("LAST USED", move |i: &RestoreItem| {
                    format_ago(now, i.last_used)
                }),
                Column::new("STATE", |i: &RestoreItem| i.state.as_str().to_owned()),
                Column::new("DETAIL", |i: &RestoreItem| i.detail.clone()),
            ];
            write_table(w, &columns, &outcome.items, output.table())?;
            if !output.no_headers {
                let (state, verb) = if outcome.dry_run {
                    (RestoreState::WouldRestore, "would restore")
                } else {
                    (RestoreState::Restored, "restored")
                };
                let chosen: Vec<&RestoreItem> =
                    outcome.items.iter().filter(|i| i.state == state).collect();
                let bytes = imagekeeper::model::saturating_total(chosen.iter().map(|i| i.size));
                writeln!(
                    w,
                    "{verb} {} image(s), {} ({bytes} bytes)",
                    chosen.len(),
                    format_size(bytes)
                )?;
            }
        }
    }
    Ok(())
}
