//! `imagekeeper run`: the node agent.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use imagekeeper::admin;
use imagekeeper::agent::Notifier;
use imagekeeper::agent::{Agent, Listeners, serve_service_manager};
use imagekeeper::clock::SystemClock;
use imagekeeper::config::FlagValues;
use imagekeeper::config::{DEFAULT_DETECT_PERIOD, DEFAULT_GC_PERIOD, DEFAULT_IMAGE_CACHE_PERIOD};
use imagekeeper::telemetry::{HttpEndpoints, HttpLimits, serve_probes};
use tracing::{info, warn};

use super::agent_flags::{AgentFlags, resolve_source};
use super::{Failure, db};

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    flags: AgentFlags,
    /// Serve Prometheus metrics on this address (HOST:PORT); off when absent.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_address: Option<String>,
    #[arg(long, value_name = "HOST:PORT", help = format!(
        "Serve /healthz and /readyz alone on this address (HOST:PORT), for the kubelet's \
         probes, with connection slots of its own, apart from the metrics listener: best on \
         loopback, where no pod can flood it, as the kubelet's own healthz (127.0.0.1:10248 by \
         default) [default: {DEFAULT_HEALTHZ_ADDRESS}, given up with a warning when that port \
         is taken; \"\" turns it off]."
    ))]
    healthz_address: Option<String>,
    #[arg(long, value_name = "DURATION", help = period_help("detect images", DEFAULT_DETECT_PERIOD))]
    detect_period: Option<String>,
    #[arg(long, value_name = "DURATION", help = period_help("run image GC", DEFAULT_GC_PERIOD))]
    gc_period: Option<String>,
    #[arg(long, value_name = "DURATION", help = period_help("refresh the image cache", DEFAULT_IMAGE_CACHE_PERIOD))]
    image_cache_period: Option<String>,
    /// How long the cycle in flight may run on after SIGTERM/SIGINT, in seconds.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_seconds: u64,
    /// Publish Kubernetes Events on this node's Node object (GC cycles that removed images,
    /// GC failing to free enough, the record store unhealthy, warm images that do not fit),
    /// with the pod's in-cluster
    /// credentials; the node is named by NODE_NAME (the downward API's spec.nodeName). Needs a
    /// binary built with the `kube` feature (the container image is).
    #[arg(long)]
    events: bool,
    /// With --events: the kubelet's configuration file (KubeletConfiguration), checked at start
    /// as `imagekeeper doctor` checks it; each conflict found is a Warning Event on the Node
    /// (KubeletConfigConflict). Read once; a bad file exits 2.
    #[arg(long, value_name = "FILE", requires = "events")]
    kubelet_config: Option<std::path::PathBuf>,
    /// The kubelet's --config-dir: its `*.conf` drop-ins merged over --kubelet-config in
    /// lexical order, as the kubelet merges them.
    #[arg(long, value_name = "DIR", requires = "kubelet_config")]
    kubelet_config_dir: Option<std::path::PathBuf>,
    /// Reload --config when the file changes (its size, modification time or inode, checked
    /// every DURATION, at least 1s), as SIGHUP does: a mounted ConfigMap's update applies
    /// without a restart. 0s (the default): only on SIGHUP.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_watch_period)]
    config_watch_period: Duration,
}

/// A loop period flag's help, its default from the configuration's constant.
fn period_help(what: &str, default: Duration) -> String {
    format!(
        "How often to {what} [default: {}].",
        imagekeeper::format::go_duration(default)
    )
}

/// Where the probes are served without `--healthz-address` (the DaemonSet's port).
const DEFAULT_HEALTHZ_ADDRESS: &str = "127.0.0.1:9898";

/// A non-blocking listener on `address`.
fn bind_listener(address: &str) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// `--config-watch-period`: 0 (off) or at least 1 s, the floor of the agent's other periods.
fn parse_watch_period(s: &str) -> Result<Duration, String> {
    let d = imagekeeper::format::parse_go_duration(s).map_err(|e| e.to_string())?;
    if !d.is_zero() && d < Duration::from_secs(1) {
        return Err("must be 0s (off) or at least 1s".into());
    }
    Ok(d)
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    // The flags given and the file: SIGHUP reads the file again under the same flags.
    let source = args.flags.source(FlagValues {
        metrics_address: args.metrics_address.clone(),
        detect_period: args.detect_period.clone(),
        gc_period: args.gc_period.clone(),
        image_cache_period: args.image_cache_period.clone(),
        ..FlagValues::default()
    });
    let config = resolve_source(&source)?;
    let events_node = flag_node("--events", args.events)?;
    let signals_node = flag_node("clusterSignals", config.cluster_signals)?;
    let keep_sets_node = flag_node("keepSets", config.keep_sets)?;
    // The config file and the warm set directory, watched alike.
    let watched: Vec<std::path::PathBuf> = source
        .file
        .iter()
        .chain(config.warm.dir.iter())
        .cloned()
        .collect();
    let config_watch = match (watched.is_empty(), args.config_watch_period.is_zero()) {
        (false, false) => Some((watched, args.config_watch_period)),
        (true, false) => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--config-watch-period: there is no --config file nor warmSetDir to watch"
            )));
        }
        _ => None,
    };
    // The kubelet's configuration, read before anything is created (a bad file exits 2).
    let kubelet_config = args
        .kubelet_config
        .as_deref()
        .map(|path| {
            imagekeeper::doctor::KubeletConfig::load(path, args.kubelet_config_dir.as_deref())
        })
        .transpose()
        .map_err(|e| Failure::usage(anyhow::Error::new(e).context("--kubelet-config")))?;
    // The plugins' config and executables are checked before anything is created.
    config
        .credential_sources()
        .context("--image-credential-provider-config")
        .map_err(Failure::usage)?;
    // Every setting is checked, and the metrics address bound, before anything is created:
    // a bad one exits 2 with no database and no socket left behind.
    db::check_path(&config.db)?;
    // Free or a stale socket; anything else there (a live socket, a file) is refused.
    admin::check_socket_path(&config.admin_socket)
        .map_err(|e| Failure::usage(anyhow::Error::new(e).context("--admin-socket")))?;
    let metrics_listener = match config.metrics_address {
        Some(address) => Some(
            std::net::TcpListener::bind(address)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .with_context(|| format!("--metrics-address: cannot listen on {address}"))
                .map_err(Failure::usage)?,
        ),
        None => None,
    };
    let probes_listener = match args.healthz_address.as_deref() {
        Some("") => None,
        // The default: the probes apart from a flood of the metrics port without a flag. A
        // port taken (another agent on this host, a test) is no reason not to run: the
        // probes are then on --metrics-address only, as before the default.
        None => match bind_listener(DEFAULT_HEALTHZ_ADDRESS) {
            Ok(listener) => Some(listener),
            Err(e) => {
                warn!(
                    address = DEFAULT_HEALTHZ_ADDRESS,
                    error = %e,
                    "Cannot serve the health probes on their default address; they are served on --metrics-address only (set --healthz-address)"
                );
                None
            }
        },
        Some(text) => {
            let address: std::net::SocketAddr = text
                .parse()
                .with_context(|| {
                    format!("--healthz-address: {text:?} is not HOST:PORT with an IP host")
                })
                .map_err(Failure::usage)?;
            Some(
                std::net::TcpListener::bind(address)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .with_context(|| format!("--healthz-address: cannot listen on {address}"))
                    .map_err(Failure::usage)?,
            )
        }
    };
    // One malloc arena for every thread: glibc gives each thread that allocates an arena of
    // its own (up to eight per core), and each keeps the pages its thread freed. A node
    // agent's threads allocate little at once; on the 2k-image node (`scripts/bench --node`)
    // this took the agent's anonymous memory from 5.3 to 4.2 MiB.
    // SAFETY: mallopt(3) takes no pointers and glibc serializes it with the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(async move {
        // SIGHUP's default action ends the process: take it over before anything is opened.
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("handling SIGHUP")?;
        let notifier = Arc::new(Notifier::from_env().unwrap_or_else(|e| {
            warn!(error = %e, "NOTIFY_SOCKET is unusable; not notifying the service manager");
            Notifier::disabled()
        }));
        let socket = config.admin_socket.clone();
        let node_events = node_events(events_node);
        // Doctor's checks at start, with --kubelet-config: each conflict is an Event.
        if let Some(kubelet) = &kubelet_config
            && node_events.enabled()
        {
            let findings =
                super::doctor::findings(&config, kubelet, false, Duration::from_secs(10), false)
                    .await;
            node_events.doctor_conflicts(&findings);
        }
        let agent = Arc::new(
            Agent::start(config, Arc::new(SystemClock))
                .await
                .context("starting the agent")?
                .with_config_source(source)
                .with_node_events(node_events),
        );
        let mut probe = ApiProbe::default();
        if let Some(node) = signals_node {
            let pods = agent.gc_manager().bound_pods();
            let signals = agent.gc_manager().cluster_signals();
            let secrets = agent.config().cluster_signals_prefetch_pull_secrets;
            if watch_bound_pods(pods.clone(), signals, node, secrets, &mut probe).await {
                wait_for_first_list(&pods).await;
            }
        }
        if let Some(node) = keep_sets_node {
            watch_keep_sets(agent.gc_manager().node_keep_sets(), node, &mut probe).await;
        }
        // "agent started" and the service manager's messages come once the admin socket is
        // bound and the metrics endpoint set up (`Listeners::bound`); not at all if that fails.
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let service = tokio::spawn({
            let agent = agent.clone();
            let notifier = notifier.clone();
            async move {
                if bound_rx.await.is_err() {
                    return;
                }
                // NODE_NAME: the DaemonSet sets it from the downward API (spec.nodeName).
                let node = std::env::var("NODE_NAME").unwrap_or_default();
                info!(db = %agent.config().db.display(), admin = %socket.display(), node, "imagekeeper agent started");
                serve_service_manager(agent, notifier, hangup, config_watch).await;
            }
        });
        let grace = Duration::from_secs(args.shutdown_grace_seconds);
        let stopping = {
            let notifier = notifier.clone();
            async move {
                shutdown_signal().await;
                service.abort();
                notifier.say("STOPPING=1");
            }
        };
        let probes = match probes_listener {
            Some(listener) => {
                let address = listener
                    .local_addr()
                    .context("--healthz-address: the bound address")?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .context("--healthz-address: serving the probes")?;
                info!(%address, "Serving health probes");
                let endpoints: Arc<dyn HttpEndpoints> = agent.clone();
                Some(tokio::spawn(serve_probes(
                    listener,
                    endpoints,
                    HttpLimits::probes(),
                )))
            }
            None => None,
        };
        let mut listeners = Listeners::new(metrics_listener);
        listeners.bound = Some(bound_tx);
        // Each setup step's failure names the step (`AgentError::Serve`), as before.
        let served = agent.serve(listeners, stopping, grace).await;
        if let Some(probes) = probes {
            probes.abort();
        }
        served?;
        info!("imagekeeper agent stopped");
        Ok::<(), Failure>(())
    });
    // Nothing is left to wait for: a blocking read stuck in the kernel (a file on a hung
    // mount) must not keep the process from exiting after the shutdown.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// With `--events` (or the setting `clusterSignals`: `flag`), the node to publish Events on or
/// watch the pods of (NODE_NAME), checked before anything is created: exit 2 without NODE_NAME or in
/// a binary built without the `kube` feature.
fn flag_node(flag: &str, on: bool) -> Result<Option<String>, Failure> {
    if !on {
        return Ok(None);
    }
    if !cfg!(feature = "kube") {
        return Err(Failure::usage(anyhow::anyhow!(
            "{flag}: this imagekeeper was built without the `kube` feature (cargo build \
             --features kube; the container image has it)"
        )));
    }
    match std::env::var("NODE_NAME") {
        Ok(node) if !node.is_empty() => Ok(Some(node)),
        _ => Err(Failure::usage(anyhow::anyhow!(
            "{flag}: NODE_NAME is not set: give the node's name (the downward API's \
             spec.nodeName, as the DaemonSet does)"
        ))),
    }
}

/// Waits, at most [`FIRST_LIST`], for the watch's first list of the pods bound to this node
/// before the loops start, so that the first GC cycle cannot remove the image of a pod it has
/// not heard of yet; past it, one warning, and the agent runs on the node's own knowledge.
async fn wait_for_first_list(pods: &imagekeeper::gc::BoundPods) {
    if tokio::time::timeout(FIRST_LIST, pods.synced())
        .await
        .is_err()
    {
        warn!(
            waited_seconds = FIRST_LIST.as_secs(),
            "The pods bound to this node are not listed yet: GC starts without them, and keeps their images once the list comes"
        );
    }
}

/// How long the agent's start waits for the first list of the bound pods.
const FIRST_LIST: Duration = Duration::from_secs(30);

/// The watch of the pods bound to `node` (`clusterSignals`), writing their images to `pods`
/// for the GC, and the watches of the DaemonSets (the templates those pods run next), the
/// CronJobs and the ReplicaSets (written to `signals`: next runs, rollback sets), in the
/// background for the agent's life; with `prefetch_pull_secrets`
/// (`clusterSignalsPrefetchPullSecrets`), the reader of the pods' pull Secrets, so the
/// prefetch pulls a pod's images with them. Returns whether it started: without
/// in-cluster credentials one warning, and the agent runs on the node's own knowledge (its
/// start does not wait for a list that cannot come).
async fn watch_bound_pods(
    pods: imagekeeper::gc::BoundPods,
    signals: imagekeeper::gc::ClusterSignals,
    node: String,
    prefetch_pull_secrets: bool,
    probe: &mut ApiProbe,
) -> bool {
    #[cfg(feature = "kube")]
    {
        match in_cluster_client().await {
            Ok(client) => {
                info!(
                    node,
                    "Watching the pods bound to this node: their images are kept"
                );
                if prefetch_pull_secrets {
                    info!(
                        "The bound pods' pull Secrets are read for the prefetch (clusterSignalsPrefetchPullSecrets)"
                    );
                    pods.set_pod_secret_source(Arc::new(
                        imagekeeper::cluster::PodPullSecretReader::new(client.clone()),
                    ));
                }
                let reach = probe.reach(&client);
                tokio::spawn(imagekeeper::cluster::watch_daemonsets(
                    client.clone(),
                    pods.clone(),
                    reach.clone(),
                ));
                tokio::spawn(imagekeeper::cluster::watch_cronjobs(
                    client.clone(),
                    node.clone(),
                    signals.clone(),
                    reach.clone(),
                ));
                tokio::spawn(imagekeeper::cluster::watch_replicasets(
                    client.clone(),
                    signals,
                    reach.clone(),
                ));
                tokio::spawn(imagekeeper::cluster::watch_bound_pods(
                    client, node, pods, reach,
                ));
                true
            }
            Err(e) => {
                warn!(error = %e, node, "Cluster signals are off: no API server credentials");
                false
            }
        }
    }
    #[cfg(not(feature = "kube"))]
    {
        let _ = (pods, signals, prefetch_pull_secrets, probe);
        warn!(
            node,
            "Cluster signals are off: built without the kube feature"
        );
        false
    }
}

/// The API server's probe (`cluster::probe_api_server`), one for every watch: started with the
/// first watch's client.
#[derive(Default)]
struct ApiProbe {
    #[cfg(feature = "kube")]
    reach: Option<imagekeeper::cluster::ApiReach>,
}

#[cfg(feature = "kube")]
impl ApiProbe {
    /// The watches' view of the probe, which this starts if none runs yet.
    fn reach(&mut self, client: &kube::Client) -> imagekeeper::cluster::ApiReach {
        self.reach
            .get_or_insert_with(|| {
                let (tx, reach) = imagekeeper::cluster::api_reach();
                tokio::spawn(imagekeeper::cluster::probe_api_server(
                    client.clone(),
                    tx,
                    imagekeeper::cluster::ProbeTiming::default(),
                ));
                reach
            })
            .clone()
    }
}

/// The API server's client with the pod's credentials (or the kubeconfig), every answer under
/// the cluster module's byte cap.
#[cfg(feature = "kube")]
async fn in_cluster_client() -> Result<kube::Client, String> {
    let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    imagekeeper::cluster::capped_client(config, imagekeeper::cluster::MAX_ANSWER_BYTES)
}

/// The watch of the KeepSets selecting `node` and of its labels (`keepSets`), writing them
/// for the agent's keep-set loop, the publisher of the node's KeepSetReport, and the node's
/// candidacy for writing the fleet's counts into the sets' status (the Lease), in the
/// background for the agent's life; without in-cluster credentials one warning, and the
/// node's pins stay as they are.
async fn watch_keep_sets(
    handle: imagekeeper::gc::NodeKeepSets,
    node: String,
    probe: &mut ApiProbe,
) {
    #[cfg(feature = "kube")]
    {
        match in_cluster_client().await {
            Ok(client) => {
                info!(node, "Watching the KeepSets selecting this node");
                handle.set_secret_source(Arc::new(imagekeeper::cluster::PullSecretReader::new(
                    client.clone(),
                )));
                tokio::spawn(imagekeeper::cluster::publish_keep_set_reports(
                    client.clone(),
                    node.clone(),
                    handle.clone(),
                ));
                tokio::spawn(imagekeeper::cluster::publish_fleet_counts(
                    client.clone(),
                    node.clone(),
                    Arc::new(SystemClock),
                ));
                let reach = probe.reach(&client);
                tokio::spawn(imagekeeper::cluster::watch_keep_sets(
                    client, node, handle, reach,
                ));
            }
            Err(e) => {
                warn!(error = %e, node, "KeepSets are off: no API server credentials");
            }
        }
    }
    #[cfg(not(feature = "kube"))]
    {
        let _ = (handle, probe);
        warn!(node, "KeepSets are off: built without the kube feature");
    }
}

/// The Node Events sink: the API server with the pod's in-cluster credentials; without them
/// (not in a pod, no service account) one warning, and the agent runs without Events.
fn node_events(node: Option<String>) -> imagekeeper::telemetry::NodeEvents {
    use imagekeeper::telemetry::NodeEvents;
    let Some(node) = node else {
        return NodeEvents::off();
    };
    #[cfg(feature = "kube")]
    {
        match imagekeeper::telemetry::KubeEventSink::in_cluster(&node) {
            Ok(sink) => {
                info!(node, "Publishing Node Events");
                NodeEvents::new(Box::new(sink))
            }
            Err(e) => {
                warn!(error = %e, node, "Node Events are off");
                NodeEvents::off()
            }
        }
    }
    #[cfg(not(feature = "kube"))]
    {
        warn!(node, "Node Events are off: built without the kube feature");
        NodeEvents::off()
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => info!("SIGTERM received"),
                _ = int.recv() => info!("SIGINT received"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    /// Issue 38: `imagekeeper run --help` lists at most 30 options (the kubelet-named and
    /// process-level flags, `--set`; the deprecated ones hidden), each once.
    #[test]
    fn run_help_lists_at_most_30_options() {
        use clap::Parser;
        let help = super::super::Cli::try_parse_from(["imagekeeper", "run", "--help"])
            .expect_err("--help stops the parse")
            .to_string();
        let options: Vec<&str> = help
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("--") || l.starts_with("-h, --"))
            .collect();
        assert!(
            options.len() <= 30,
            "{} options: {options:#?}",
            options.len()
        );
        assert!(
            options.iter().any(|o| o.starts_with("--set <KEY=VALUE>")),
            "{help}"
        );
        assert!(
            !help.contains("--journal-max-age"),
            "a deprecated flag is hidden"
        );
    }
}
