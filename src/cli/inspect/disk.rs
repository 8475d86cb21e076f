//! `imagekeeper inspect disk`: where the image filesystem's bytes are. Reads containerd as it
//! is over its socket (`cri::ContainerdView`, read-only; the agent need not run and the
//! database is not read), statvfs of the image filesystem (the mountpoint CRI ImageFsInfo
//! reports), accounts it (`imagekeeper::disk::account`) and prints the rows and the
//! unexplained rest. With `--agent`, the running agent accounts (its admin call InspectDisk,
//! the same `account` over its own containerd address) and this prints its answer: the same
//! schema, for a shell that cannot reach containerd's socket but can the admin socket.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use imagekeeper::cri::{CONTAINERD_CRI_NAMESPACE, DEFAULT_RUNTIME_ENDPOINT};
use imagekeeper::disk::{DiskReport, DiskRow, JSON_FIELDS, account};
use imagekeeper::format::format_size;
use imagekeeper::model::UnixNanos;
use serde_json::json;

use super::super::Failure;
use super::super::disk_read::read_runtime;
use super::super::output::{Format, KubeList, OutputArgs, is_list, table};

/// The JSON fields, at the end of `inspect disk --help` (and so in the generated reference).
fn json_help() -> String {
    let mut out = String::from("JSON (-o json) fields:\n");
    for (field, what) in JSON_FIELDS {
        out.push_str(&format!("  {field}: {what}\n"));
    }
    out
}

#[derive(Args, Debug)]
#[command(after_long_help = json_help())]
pub(super) struct DiskArgs {
    /// containerd's API socket [default: --container-runtime-endpoint].
    #[arg(long, value_name = "ENDPOINT")]
    containerd_address: Option<String>,
    /// The CRI runtime endpoint: its ImageFsInfo names the image filesystem (containerd serves
    /// its own API on the same socket).
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_RUNTIME_ENDPOINT)]
    container_runtime_endpoint: String,
    /// How long each call to the runtime may take (Go duration syntax); with --agent, the
    /// whole call to the agent.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::super::parse_timeout)]
    runtime_timeout: Duration,
    /// Ask the running agent on --admin-socket to account (it reads containerd at its own
    /// containerdAddress) instead of reading containerd here; fails when no agent answers.
    #[arg(long, conflicts_with = "containerd_address")]
    agent: bool,
    /// The agent's admin socket, with --agent.
    #[arg(long, value_name = "PATH", default_value = imagekeeper::config::DEFAULT_ADMIN_SOCKET, requires = "agent")]
    admin_socket: std::path::PathBuf,
}

/// The running agent's accounting, through its admin socket within `timeout`.
fn from_agent(socket: &std::path::Path, timeout: Duration) -> Result<DiskReport, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::from(anyhow::anyhow!("starting the async runtime: {e}")))?;
    let json = rt.block_on(async {
        let mut client = imagekeeper::admin::AdminClient::connect_with_timeout(socket, timeout)
            .await
            .map_err(Failure::from)?;
        tokio::time::timeout(timeout, client.inspect_disk())
            .await
            .map_err(|_| {
                Failure::from(anyhow::anyhow!(
                    "the agent on {} did not answer InspectDisk within {}",
                    socket.display(),
                    imagekeeper::format::go_duration(timeout)
                ))
            })?
            .map_err(|e| Failure::from(anyhow::anyhow!("calling the running agent: {e}")))
    })?;
    serde_json::from_str(&json)
        .map_err(|e| Failure::from(anyhow::anyhow!("the agent's disk report: {e}")))
}

/// Reads the runtime and the filesystem, accounts them as of `now`, prints.
pub(super) fn disk(
    w: &mut dyn Write,
    out: &OutputArgs,
    args: &DiskArgs,
    now: UnixNanos,
) -> Result<(), Failure> {
    let report = if args.agent {
        from_agent(&args.admin_socket, args.runtime_timeout)?
    } else {
        let address = args
            .containerd_address
            .clone()
            .unwrap_or_else(|| args.container_runtime_endpoint.clone());
        let (state, fs) = read_runtime(
            &args.container_runtime_endpoint,
            &address,
            args.runtime_timeout,
        )?;
        account(&state, &fs, CONTAINERD_CRI_NAMESPACE, now)
    };
    for warning in &report.warnings {
        eprintln!("imagekeeper: warning: {warning}");
    }
    Ok(print(w, out, &report)?)
}

/// A digest or a 64-hex id shortened as `inspect` shortens image ids, unless `--no-trunc`.
fn short(name: &str, no_trunc: bool) -> String {
    if no_trunc {
        return name.to_owned();
    }
    let (prefix, hex) = name.split_once(':').unwrap_or(("", name));
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        let head = &hex[..12];
        return match prefix {
            "" => head.to_owned(),
            p => format!("{p}:{head}"),
        };
    }
    name.to_owned()
}

fn cells(r: &DiskRow, out: &OutputArgs, wide: bool) -> Vec<String> {
    let no_trunc = out.no_trunc;
    let age = r
        .age_seconds
        .map(|s| imagekeeper::format::go_duration(Duration::from_secs(s)))
        .unwrap_or_else(|| "-".into());
    let mut row = vec![
        r.kind.as_str().to_owned(),
        if r.namespace.is_empty() {
            "-".into()
        } else {
            r.namespace.clone()
        },
        short(&r.name, no_trunc),
        format_size(r.bytes),
        r.inodes.to_string(),
        format_size(r.shared_bytes),
        match (&r.state, r.gc_root) {
            (Some(state), _) => state.clone(),
            (None, Some(true)) => "gc.root".into(),
            (None, Some(false)) => "collectable".into(),
            (None, None) => "-".into(),
        },
        age,
    ];
    if wide {
        let detail = match (&r.parent_chain, &r.image, r.names.len()) {
            (Some(chain), _, _) => format!(
                "parents: {}",
                chain
                    .iter()
                    .map(|p| short(p, no_trunc))
                    .collect::<Vec<_>>()
                    .join(" <- ")
            ),
            (None, Some(image), _) => format!("image: {image}"),
            (None, None, n) if n > 1 => format!("names: {}", r.names.join(", ")),
            _ => r
                .digest
                .as_deref()
                .map(|d| short(d, no_trunc))
                .unwrap_or_default(),
        };
        row.push(r.bytes.to_string());
        row.push(r.referenced_bytes.to_string());
        row.push(detail);
    }
    row
}

fn print(w: &mut dyn Write, out: &OutputArgs, report: &DiskReport) -> std::io::Result<()> {
    let format = out.format();
    if format == Format::Json {
        let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
        return writeln!(w, "{text}");
    }
    if is_list(format) {
        let mut list = KubeList::new("DiskUsage");
        for r in &report.rows {
            let fields = serde_json::to_value(r).map_err(std::io::Error::other)?;
            list.push(
                format!("{}/{}/{}", r.kind.as_str(), r.namespace, r.name),
                fields,
            );
        }
        list.push(
            "unexplained",
            json!({
                "kind": "unexplained",
                "bytes": report.unexplained_bytes,
                "inodes": report.unexplained_inodes,
                "percentOfUsed": report.unexplained_percent,
                "usedBytes": report.filesystem.used_bytes,
                "accountedBytes": report.accounted_bytes,
            }),
        );
        return list.write(w, format);
    }
    let wide = format == Format::Wide;
    let mut headers = vec![
        "KIND",
        "NAMESPACE",
        "NAME",
        "SIZE",
        "INODES",
        "SHARED",
        "STATE",
        "AGE",
    ];
    if wide {
        headers.extend(["BYTES", "REFERENCED", "DETAIL"]);
    }
    let mut rows: Vec<Vec<String>> = report.rows.iter().map(|r| cells(r, out, wide)).collect();
    let unexplained = report.unexplained_bytes;
    let magnitude = format_size(unexplained.unsigned_abs());
    let mut last = vec![
        "unexplained".to_owned(),
        "-".into(),
        "-".into(),
        if unexplained < 0 {
            format!("-{magnitude}")
        } else {
            magnitude
        },
        report.unexplained_inodes.to_string(),
        "-".into(),
        "-".into(),
        "-".into(),
    ];
    if wide {
        last.extend([unexplained.to_string(), "-".into(), String::new()]);
    }
    rows.push(last);
    table(w, &headers, &rows, out.no_headers)?;
    if !out.no_headers {
        let fs = &report.filesystem;
        writeln!(
            w,
            "\nfilesystem:   {} used {} ({} bytes) of {}, {} of {} inodes",
            fs.path,
            format_size(fs.used_bytes),
            fs.used_bytes,
            format_size(fs.capacity_bytes),
            fs.inodes_used,
            fs.inodes
        )?;
        writeln!(
            w,
            "accounted:    {} ({} bytes) in {} rows, each object counted once",
            format_size(report.accounted_bytes),
            report.accounted_bytes,
            report.rows.len()
        )?;
        writeln!(
            w,
            "unexplained:  {} bytes ({:.2}% of used), {} inodes",
            report.unexplained_bytes, report.unexplained_percent, report.unexplained_inodes
        )?;
        for t in &report.totals {
            writeln!(
                w,
                "  {:<20} {:>5} rows   {}",
                t.kind.as_str(),
                t.rows,
                format_size(t.bytes)
            )?;
        }
    }
    Ok(())
}
