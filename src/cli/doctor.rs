//! `imagekeeper doctor [--kubelet-config FILE] [--kubelet-config-dir DIR] [imagekeeper's flags]
//! [-o table|json]`: reads the kubelet's KubeletConfiguration (with its drop-ins) and
//! imagekeeper's own settings, the kubelet's pull intents, asks the runtime (when it answers)
//! what it reports, and prints each check's finding. Exit 0 when no check found a
//! conflict, 1 when one did, 2 for an unreadable or invalid kubelet config or bad flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::config::{AgentConfig, FlagValues};
use imagekeeper::cri::{CriClient, CriConfig, ImageRuntime};
use imagekeeper::doctor::{
    self, DEFAULT_KUBELET_CONFIG, DoctorInput, Finding, KubeletConfig, Report, RuntimeView,
};
use imagekeeper::inspect::escape_control;
use imagekeeper::kubelet::PullRecordsReader;

use super::Failure;
use super::agent_flags::AgentFlags;
use super::output::{Format, KubeList, OutputArgs, is_list};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    flags: AgentFlags,
    /// The kubelet's configuration file (KubeletConfiguration, YAML or JSON).
    #[arg(long, value_name = "FILE", default_value = DEFAULT_KUBELET_CONFIG)]
    kubelet_config: PathBuf,
    /// The kubelet's --config-dir: its *.conf drop-in files are merged over the config file in
    /// lexical order, as the kubelet merges them.
    #[arg(long, value_name = "DIR")]
    kubelet_config_dir: Option<PathBuf>,
    /// Images are pulled through imagekeeper with registry credentials: check that the
    /// kubelet verifies them before another pod uses such an image.
    #[arg(long)]
    pulls_with_credentials: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// How long to wait for the runtime's answers (Go duration syntax); a runtime that does
    /// not answer leaves the checks that need it not checked.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::parse_timeout)]
    runtime_timeout: Duration,
}

pub fn run(args: DoctorArgs) -> Result<(), Failure> {
    let config = args.flags.resolve(FlagValues::default())?;
    let kubelet = KubeletConfig::load(&args.kubelet_config, args.kubelet_config_dir.as_deref())
        .map_err(Failure::usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let findings = rt.block_on(findings(
        &config,
        &kubelet,
        args.pulls_with_credentials,
        args.runtime_timeout,
        true,
    ));
    let report = Report::new(args.kubelet_config.display().to_string(), findings);
    print(&report, &args.output)?;
    if report.conflicts > 0 {
        return Err(Failure::from(anyhow::anyhow!(
            "{} conflict(s) between the kubelet's configuration and imagekeeper's",
            report.conflicts
        )));
    }
    Ok(())
}

/// Every check of `imagekeeper doctor`: imagekeeper's `config` against the `kubelet`'s, the
/// kubelet's pull intents as read now, and the runtime as it answers within `runtime_timeout`.
/// `run --events --kubelet-config` publishes the conflicts among them at start.
pub(crate) async fn findings(
    config: &AgentConfig,
    kubelet: &KubeletConfig,
    pulls_with_credentials: bool,
    runtime_timeout: Duration,
    check_runtime_pins: bool,
) -> Vec<Finding> {
    let reader = config
        .gc
        .kubelet_root_dir
        .as_deref()
        .map(PullRecordsReader::new);
    let stale_intents = reader
        .as_ref()
        .map(|r| r.intents(config.gc.intent_age(SystemClock.now())).stale);
    let kubelet_preloaded = reader.as_ref().map(PullRecordsReader::preloaded);
    let (runtime, runtime_sandbox, version) = ask_runtime(CriConfig {
        connect_timeout: runtime_timeout,
        call_timeout: runtime_timeout,
        ..config.cri.clone()
    })
    .await;
    // At the agent's own start its keeps are not labelled yet: the check is the command's.
    let runtime_pins = match check_runtime_pins {
        true => Some({
            let labels = read_containerd_labels(config, runtime_timeout).await;
            let (instance, record) = read_instance(config);
            doctor::RuntimePinsView {
                version,
                pins: read_pins(config, runtime_timeout).await,
                labelled: labels.clone().map(|images| {
                    images
                        .iter()
                        .filter(|i| imagekeeper::gc::runtime_pins::is_pinned(i))
                        .map(|i| i.name.clone())
                        .collect()
                }),
                owners: labels.map(|images| {
                    images
                        .into_iter()
                        .filter(|i| {
                            i.labels
                                .contains_key(imagekeeper::gc::runtime_pins::OWN_LABEL)
                        })
                        .map(|i| {
                            let owner = imagekeeper::gc::runtime_pins::label_instance(&i)
                                .map(str::to_owned);
                            (i.name, owner)
                        })
                        .collect()
                }),
                instance,
                record,
            }
        }),
        false => None,
    };
    // The running agent's watches: the command's check, as the runtime pins'.
    let cluster_signals = match check_runtime_pins && config.cluster_signals {
        true => Some(read_cluster_signals(config, runtime_timeout).await),
        false => None,
    };
    let images_on_nodefs = match &runtime {
        RuntimeView::Reached {
            image_fs: Ok(fs), ..
        } => same_filesystem(
            Path::new(&fs.mountpoint),
            config
                .gc
                .kubelet_root_dir
                .as_deref()
                .unwrap_or(Path::new(imagekeeper::kubelet::DEFAULT_KUBELET_ROOT_DIR)),
        ),
        _ => None,
    };
    doctor::check(&DoctorInput {
        kubelet,
        imagekeeper: config,
        pulls_with_credentials,
        runtime: &runtime,
        stale_intents: stale_intents.as_deref(),
        kubelet_preloaded: kubelet_preloaded.as_ref(),
        images_on_nodefs,
        runtime_sandbox_image: runtime_sandbox.as_deref(),
        now: SystemClock.now(),
        runtime_pins: runtime_pins.as_ref(),
        cluster_signals: cluster_signals.as_ref(),
    })
}

/// The running agent's cluster signals, asked on its admin socket within `timeout`.
async fn read_cluster_signals(
    config: &AgentConfig,
    timeout: Duration,
) -> doctor::ClusterSignalsSeen {
    let client =
        imagekeeper::admin::AdminClient::connect_with_timeout(&config.admin_socket, timeout).await;
    let answer = match client {
        Ok(mut client) => client.cluster_signals().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match answer {
        Ok(sample) => doctor::ClusterSignalsSeen::Answered(sample),
        Err(why) => doctor::ClusterSignalsSeen::Unreachable(why),
    }
}

/// This database's agent instance (`instance_id` in its meta table, as the agent's runtime pin
/// labels name it) and its record of the names its agent labelled, read from a copy; `None`
/// when there is no database or it has none yet.
fn read_instance(config: &AgentConfig) -> (Option<String>, Option<doctor::RecordView>) {
    if !config.db.exists() {
        return (None, None);
    }
    let Ok(super::db::DryRunStore { store, copy: _copy }) = super::db::open_for_dry_run(&config.db)
    else {
        return (None, None);
    };
    match imagekeeper::agent::label_record(&store) {
        Ok(Some(record)) => (
            Some(record.instance),
            Some(doctor::RecordView {
                names: record.names,
                adopted: record.adopted,
            }),
        ),
        _ => (
            imagekeeper::agent::stored_instance_id(&store)
                .ok()
                .flatten(),
            None,
        ),
    }
}

/// containerd's image names and labels (its Images service at `containerdAddress`, namespace
/// `k8s.io`), or why they were not read.
async fn read_containerd_labels(
    config: &AgentConfig,
    timeout: Duration,
) -> Result<Vec<imagekeeper::runtime::LabelledImage>, String> {
    let client = imagekeeper::cri::ContainerdImages::connect(
        &config.containerd_address,
        imagekeeper::cri::CONTAINERD_CRI_NAMESPACE,
        timeout,
        timeout,
    )
    .map_err(|e| e.to_string())?;
    client.list().await.map_err(|e| e.to_string())
}

/// The operators' pins in force for the runtime pins check: from the running agent when it
/// answers, else read-only from the database; or why neither could be read.
async fn read_pins(
    config: &AgentConfig,
    timeout: Duration,
) -> Result<Vec<(imagekeeper::model::PinKey, imagekeeper::model::ImagePin)>, String> {
    let now = SystemClock.now();
    if let Ok(mut client) =
        imagekeeper::admin::AdminClient::connect_with_timeout(&config.admin_socket, timeout).await
        && let Ok(views) = client.pins().await
    {
        return Ok(views
            .into_iter()
            .filter(|v| v.active)
            .map(|v| (v.key, v.pin))
            .collect());
    }
    if !config.db.exists() {
        return Err(format!(
            "no agent answered and no database at {}",
            config.db.display()
        ));
    }
    let super::db::DryRunStore { store, copy: _copy } =
        super::db::open_for_dry_run(&config.db).map_err(|e| format!("{:#}", e.error))?;
    let pins = store.pins().map_err(|e| e.to_string())?;
    Ok(pins.into_iter().filter(|(_, p)| p.active_at(now)).collect())
}

/// Whether `a` and `b` are on one filesystem (their device numbers); `None` when either
/// cannot be read.
fn same_filesystem(a: &Path, b: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    Some(std::fs::metadata(a).ok()?.dev() == std::fs::metadata(b).ok()?.dev())
}

/// ListImages and ImageFsInfo, or why the runtime could not be asked; and the sandbox image
/// the runtime's verbose Status names, if it does.
/// And CRI Version's answer (or why none), for the runtime pins check.
async fn ask_runtime(
    config: CriConfig,
) -> (
    RuntimeView,
    Option<String>,
    Result<imagekeeper::cri::RuntimeVersion, String>,
) {
    let client = match CriClient::connect(config).await {
        Ok(client) => client,
        Err(e) => {
            return (
                RuntimeView::Unreachable(e.to_string()),
                None,
                Err(e.to_string()),
            );
        }
    };
    let version = client.version().await.map_err(|e| e.to_string());
    let images = match client.list_images().await {
        Ok(images) => images,
        Err(e) => return (RuntimeView::Unreachable(e.to_string()), None, version),
    };
    let image_fs = client.image_fs_stats().await.map_err(|e| e.to_string());
    let sandbox = client.sandbox_image().await.ok().flatten();
    (RuntimeView::Reached { images, image_fs }, sandbox, version)
}

/// `table` and `wide` are the same for doctor (each finding's fix is on its own line).
fn print(report: &Report, output: &OutputArgs) -> Result<(), Failure> {
    match output.format() {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(report).context("encoding JSON")?
        ),
        f if is_list(f) => {
            let mut list = KubeList::new("Finding");
            for finding in &report.findings {
                let mut item = serde_json::to_value(finding).context("encoding JSON")?;
                if let Some(obj) = item.as_object_mut() {
                    obj.insert(
                        "kubeletConfig".into(),
                        serde_json::json!(report.kubelet_config),
                    );
                }
                list.push(finding.check.to_string(), item);
            }
            list.write(&mut std::io::stdout().lock(), f)?;
        }
        _ => {
            // Fixed columns (12 and 36 wide) with `fix:` continuation lines, not
            // `output::write_table`: its widths follow the cells, and this output is a public
            // contract that must stay byte for byte.
            if !output.no_headers {
                println!("kubelet config: {}", escape_control(&report.kubelet_config));
                println!("{:<12} {:<36} FINDING", "STATUS", "CHECK");
            }
            for f in &report.findings {
                println!(
                    "{:<12} {:<36} {}",
                    f.status.as_str(),
                    f.check,
                    escape_control(&f.message)
                );
                if let Some(fix) = &f.fix {
                    println!("{:<12} {:<36} fix: {}", "", "", escape_control(fix));
                }
            }
            if !output.no_headers {
                println!(
                    "{} check(s), {} conflict(s)",
                    report.findings.len(),
                    report.conflicts
                );
            }
        }
    }
    Ok(())
}
