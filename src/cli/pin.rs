//! `imagekeeper pin IMAGE [--for D | --until T] [--reason R] [--runtime-handler H]`,
//! `imagekeeper unpin IMAGE` and `imagekeeper pins`: the operators' pins (schema 4), through the
//! running agent's admin socket when it answers, else directly on the database. Bad input
//! (an empty name, a bad or non-positive --for, a bad or past --until, both, a long reason)
//! exits 2 before anything is written; `unpin` of a name with no pin exits 1.

use anyhow::Context;
use clap::Args;
use imagekeeper::admin::{AdminClient, AdminError};
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::FlagValues;
use imagekeeper::format::{format_rfc3339, parse_go_duration, parse_rfc3339_or_why};
use imagekeeper::gc::{PinView, check_pin_request, pin_view, pin_views, stored_images};
use imagekeeper::model::{ImagePin, MAX_IMAGE_NAME_BYTES, PinKey, UnixNanos};
use imagekeeper::pull::redact_image_name;
use imagekeeper::store::Batch;

use super::agent_flags::AgentFlags;
use super::output::{Column, Format, KubeList, OutputArgs, is_list, write_table};
use super::{Failure, db};

#[derive(Args, Debug)]
pub struct PinArgs {
    /// The image: a tag, a digest reference or an image id, resolved as the runtime resolves
    /// names at every detect (a pin by tag follows the tag).
    image: String,
    /// How long the pin keeps the image, Go syntax (e.g. 72h); without --for or --until the
    /// pin has no expiry.
    #[arg(long = "for", value_name = "DURATION", conflicts_with = "until")]
    for_: Option<String>,
    /// When the pin expires, RFC 3339 (e.g. 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "RFC3339")]
    until: Option<String>,
    /// Why, for people (shown by `pins` and `inspect explain`), at most 1024 bytes.
    #[arg(long, value_name = "TEXT", default_value = "")]
    reason: String,
    /// The runtime handler the image was pulled for [default: the default handler].
    #[arg(long, value_name = "H", default_value = "")]
    runtime_handler: String,
    #[command(flatten)]
    flags: AgentFlags,
    #[command(flatten)]
    output: OutputArgs,
    /// How long to wait for a running agent's answer (Go duration syntax).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
}

#[derive(Args, Debug)]
pub struct UnpinArgs {
    /// The image name exactly as it was pinned.
    image: String,
    /// The runtime handler it was pinned under [default: the default handler].
    #[arg(long, value_name = "H", default_value = "")]
    runtime_handler: String,
    #[command(flatten)]
    flags: AgentFlags,
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
}

#[derive(Args, Debug)]
pub struct PinsArgs {
    #[command(flatten)]
    flags: AgentFlags,
    #[command(flatten)]
    output: OutputArgs,
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
}

/// The checked image name for `unpin`, or a usage error: a name with credentials may be in a
/// database written before they were refused, so `unpin` takes it (to remove it) and shows it
/// only redacted.
fn image_name(image: &str) -> Result<(), Failure> {
    if image.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "IMAGE: the image name is empty"
        )));
    }
    if image.len() > MAX_IMAGE_NAME_BYTES || image.contains('\0') {
        return Err(Failure::usage(anyhow::anyhow!(
            "IMAGE: an image name is at most {MAX_IMAGE_NAME_BYTES} bytes, without NUL"
        )));
    }
    Ok(())
}

/// `--for`/`--until` as the pin's `until` at `now` (`NEVER` without either).
fn until_of(args: &PinArgs, now: UnixNanos) -> Result<UnixNanos, Failure> {
    match (&args.for_, &args.until) {
        (Some(_), Some(_)) => Err(Failure::usage(anyhow::anyhow!(
            "--for and --until: give one of them, not both"
        ))),
        (Some(d), None) => {
            let d = parse_go_duration(d)
                .map_err(|e| Failure::usage(anyhow::anyhow!("--for {d:?}: {e}")))?;
            if d.is_zero() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--for: must be greater than 0"
                )));
            }
            Ok(now.saturating_add(d))
        }
        (None, Some(t)) => {
            let until = parse_rfc3339_or_why(t).map_err(|why| {
                Failure::usage(anyhow::anyhow!(
                    "--until: {why}; leave out --until and --for for a pin that never expires"
                ))
            })?;
            if until <= now {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--until {t:?}: the time is not in the future (now is {})",
                    format_rfc3339(now)
                )));
            }
            Ok(until)
        }
        (None, None) => Ok(UnixNanos::NEVER),
    }
}

/// Connects to the agent, or `None` when none answers (then the database is used directly).
async fn agent(
    socket: &std::path::Path,
    timeout: std::time::Duration,
) -> Result<Option<AdminClient>, Failure> {
    match AdminClient::connect_with_timeout(socket, timeout).await {
        // An agent there that cannot take the call now: not a reason to go around it.
        Err(e @ (AdminError::PermissionDenied { .. } | AdminError::Busy { .. })) => {
            Err(Failure::from(e))
        }
        Ok(client) => Ok(Some(client)),
        Err(_) => Ok(None),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?)
}

const DIRECT: &str = "the database directly (no agent answered on the admin socket)";

pub fn pin(args: PinArgs) -> Result<(), Failure> {
    let now = SystemClock.now();
    let key = PinKey::new(args.image.clone(), args.runtime_handler.clone());
    // The socket's own check, first: a name with credentials is refused before any other
    // message could quote it.
    check_pin_request(&key, UnixNanos::NEVER, &args.reason, now).map_err(Failure::usage)?;
    let until = until_of(&args, now)?;
    let config = args.flags.resolve(FlagValues::default())?;
    let (view, via) = runtime()?.block_on(async {
        if let Some(mut client) = agent(&config.admin_socket, args.timeout).await? {
            let view = client
                .pin(key.clone(), until, args.reason.clone())
                .await
                .context("calling the running agent")?;
            return Ok::<_, Failure>((view, "the running agent"));
        }
        let store = db::open_waiting(&config.db, now).await?;
        let pin = ImagePin {
            created_at: now,
            until,
            reason: args.reason.clone(),
        };
        let mut batch = Batch::new();
        batch.put_pin(key.clone(), pin.clone());
        store.apply(&batch).context("writing the pin")?;
        let images = stored_images(&store).context("reading the records")?;
        Ok((pin_view(key, pin, &images, now), DIRECT))
    })?;
    eprintln!("imagekeeper: ran through {via}");
    // Through the agent, the answer comes once the runtime lists the pin's images pinned (or
    // the agent gave up waiting): say plainly when it does not.
    if view.runtime_pinned == Some(false) {
        eprintln!(
            "imagekeeper: warning: the runtime does not list {:?} as pinned: the kubelet's image \
             GC and eviction manager may still remove it (imagekeeper's own GC keeps it); \
             `imagekeeper doctor` says why",
            redact_image_name(&view.key.image)
        );
    }
    if view.image_ids.is_empty() {
        eprintln!(
            "imagekeeper: no image on the node matches {:?} yet: the pin keeps it once it is pulled",
            redact_image_name(&view.key.image)
        );
    }
    print(&[view], &args.output, true)
}

pub fn unpin(args: UnpinArgs) -> Result<(), Failure> {
    image_name(&args.image)?;
    let config = args.flags.resolve(FlagValues::default())?;
    let key = PinKey::new(args.image.clone(), args.runtime_handler.clone());
    let (removed, via) = runtime()?.block_on(async {
        if let Some(mut client) = agent(&config.admin_socket, args.timeout).await? {
            let removed = client
                .unpin(key.clone())
                .await
                .context("calling the running agent")?;
            return Ok::<_, Failure>((removed, "the running agent"));
        }
        let store = db::open_waiting(&config.db, SystemClock.now()).await?;
        let existed = store.pin(&key).context("reading the pins")?.is_some();
        let mut batch = Batch::new();
        batch.remove_pin(key.clone());
        store.apply(&batch).context("removing the pin")?;
        Ok((existed, DIRECT))
    })?;
    eprintln!("imagekeeper: ran through {via}");
    if !removed {
        let handler = if args.runtime_handler.is_empty() {
            String::new()
        } else {
            format!(" under runtime handler {:?}", args.runtime_handler)
        };
        return Err(Failure::from(anyhow::anyhow!(
            "no pin of {:?}{handler} (`imagekeeper pins` lists them)",
            redact_image_name(&args.image)
        )));
    }
    println!(
        "unpinned {}",
        imagekeeper::inspect::escape_control(&redact_image_name(&args.image))
    );
    Ok(())
}

pub fn pins(args: PinsArgs) -> Result<(), Failure> {
    let config = args.flags.resolve(FlagValues::default())?;
    let (views, via) = runtime()?.block_on(async {
        if let Some(mut client) = agent(&config.admin_socket, args.timeout).await? {
            let (views, omitted) = client
                .pins_and_omitted()
                .await
                .context("calling the running agent")?;
            super::note_omitted(omitted, "pins");
            return Ok::<_, Failure>((views, "the running agent"));
        }
        // Read-only: listing creates and changes nothing.
        let db::DryRunStore { store, copy: _copy } = db::open_for_dry_run(&config.db)?;
        let pins = store.pins().context("reading the pins")?;
        let images = stored_images(&store).context("reading the records")?;
        Ok((pin_views(pins, &images, SystemClock.now()), DIRECT))
    })?;
    eprintln!("imagekeeper: ran through {via}");
    print(&views, &args.output, false)
}

fn until_text(view: &PinView) -> String {
    if view.pin.until == UnixNanos::NEVER {
        "never".to_owned()
    } else {
        format_rfc3339(view.pin.until)
    }
}

/// `pins -o wide`'s RUNTIME PINNED: whether the runtime lists the pin's images as pinned (the
/// kubelet's image GC and eviction manager then spare them), else why it is not known.
fn runtime_pinned_text(view: &PinView) -> String {
    imagekeeper::gc::runtime_pins::runtime_pinned_text(
        view.runtime_pinned,
        view.runtime_labelled,
        &view.runtime_pin_note,
    )
}

fn state(view: &PinView) -> &'static str {
    if view.active { "active" } else { "expired" }
}

fn print(views: &[PinView], output: &OutputArgs, one: bool) -> Result<(), Failure> {
    // A pin written before credentials in names were refused is shown redacted, in every
    // format.
    let views: Vec<PinView> = views
        .iter()
        .cloned()
        .map(|mut v| {
            v.key.image = redact_image_name(&v.key.image);
            v
        })
        .collect();
    let views = views.as_slice();
    let mut stdout = std::io::stdout().lock();
    let w: &mut dyn std::io::Write = &mut stdout;
    let trunc = |id: &imagekeeper::model::ImageId| {
        if output.no_trunc {
            id.to_string()
        } else {
            id.short().to_owned()
        }
    };
    match output.format() {
        Format::Json => {
            let doc = match views {
                [only] if one => serde_json::to_string_pretty(only),
                _ => serde_json::to_string_pretty(views),
            };
            writeln!(w, "{}", doc.context("encoding JSON")?)?;
        }
        f if is_list(f) => {
            let mut list = KubeList::new("ImagePin");
            for v in views {
                list.push(
                    v.key.image.clone(),
                    serde_json::json!({
                        "image": v.key.image,
                        "runtimeHandler": v.key.runtime_handler,
                        "createdAt": format_rfc3339(v.pin.created_at),
                        "until": (v.pin.until != UnixNanos::NEVER).then(|| format_rfc3339(v.pin.until)),
                        "reason": v.pin.reason,
                        "active": v.active,
                        "imageIds": v.image_ids.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
                        "runtimePinned": v.runtime_pinned,
                        "runtimePinNote": v.runtime_pin_note,
                        "runtimeLabelled": v.runtime_labelled,
                    }),
                );
            }
            list.write(w, f)?;
        }
        _ => {
            let columns = [
                Column::new("IMAGE", |v: &PinView| {
                    imagekeeper::inspect::escape_control(&v.key.image).into_owned()
                }),
                Column::new("HANDLER", |v: &PinView| v.key.runtime_handler.clone()),
                Column::new("UNTIL", until_text),
                Column::new("STATE", |v: &PinView| state(v).to_owned()),
                Column::new("IMAGE IDS", |v: &PinView| {
                    if v.image_ids.is_empty() {
                        "<none on the node>".to_owned()
                    } else {
                        v.image_ids.iter().map(trunc).collect::<Vec<_>>().join(",")
                    }
                }),
                Column::wide("CREATED", |v: &PinView| format_rfc3339(v.pin.created_at)),
                Column::wide("RUNTIME PINNED", runtime_pinned_text),
                Column::new("REASON", |v: &PinView| {
                    imagekeeper::inspect::escape_control(&v.pin.reason).into_owned()
                }),
            ];
            write_table(w, &columns, views, output.table())?;
        }
    }
    Ok(())
}
