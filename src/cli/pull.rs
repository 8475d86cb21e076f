//! `imagekeeper pull IMAGE [--policy P] [--pod-uid UID] [--pull-secret FILE]... [--db PATH]
//! [endpoints]`: one EnsureImageExists against the runtime and the record database. Prints the
//! image ref (exit 0), or the kubelet reason and message (exit 1; an invalid image name or pull
//! secret exits 2). The pull backoff lives in the database, so a pull that failed in an earlier
//! run is refused while in backoff.
//!
//! Credentials are found as the kubelet finds them: the pull secrets, then the node's docker
//! config (on the kubelet's search path) and credential provider plugins. Through a running
//! agent only the pull secrets travel (over its 0600 socket); the node's credentials and
//! plugins are the agent's.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use imagekeeper::admin::{AdminClient, AdminError, EnsureRequest};
use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::cri::{CriClient, CriConfig, CriError, DEFAULT_RUNTIME_ENDPOINT};
use imagekeeper::operator_file;
use imagekeeper::pull::{
    CredentialSources, DockerConfig, ImageManager, NodeCredentials, PluginProviders, PodRef,
    PullAuth, PullConfig, PullPolicy, credentials_in, parse_pull_secret,
};

use super::{Failure, db};

/// The agent's database, where `pull` records images and keeps the backoff by default.
pub const DEFAULT_DB: &str = "/var/lib/imagekeeper/records.redb";

#[derive(Args, Debug)]
pub struct PullArgs {
    /// The image, as a container spec names it (`:latest` is added when it has no tag).
    image: String,
    /// The container's image pull policy.
    #[arg(long, value_enum, default_value_t = Policy::IfNotPresent)]
    policy: Policy,
    /// The UID of the pod the pull is for; the backoff key is `<pod uid>_<image>`.
    #[arg(long, default_value = "")]
    pod_uid: String,
    /// The record database (created if missing; must not be open by a running agent).
    #[arg(long, default_value = DEFAULT_DB)]
    db: PathBuf,
    /// The CRI runtime's endpoint (`unix:///path`).
    #[arg(long, default_value = DEFAULT_RUNTIME_ENDPOINT)]
    container_runtime_endpoint: String,
    /// The CRI image service's endpoint, when it is not the runtime's.
    #[arg(long)]
    image_service_endpoint: Option<String>,
    /// The runtime handler (RuntimeClass) the image is pulled for.
    #[arg(long, default_value = "")]
    runtime_handler: String,
    /// A running agent's admin socket: when an agent answers there, it does the pull.
    #[arg(long, default_value = imagekeeper::config::DEFAULT_ADMIN_SOCKET)]
    admin_socket: PathBuf,
    /// A pull secret: a Secret manifest (YAML or JSON) of type kubernetes.io/dockerconfigjson
    /// or kubernetes.io/dockercfg, or a docker config.json; repeatable. Its credentials are
    /// tried before the node's.
    #[arg(long = "pull-secret", value_name = "FILE")]
    pull_secrets: Vec<PathBuf>,
    /// The kubelet's root directory, first on the node's docker config search path (when no
    /// agent does the pull); empty leaves it out.
    #[arg(long, value_name = "DIR", default_value = imagekeeper::kubelet::DEFAULT_KUBELET_ROOT_DIR)]
    kubelet_root_dir: String,
    /// The kubelet's CredentialProviderConfig, or a directory of them (its *.json, *.yaml and
    /// *.yml files, merged in lexical order), when no agent does the pull; needs
    /// --image-credential-provider-bin-dir.
    #[arg(
        long,
        value_name = "PATH",
        requires = "image_credential_provider_bin_dir"
    )]
    image_credential_provider_config: Option<PathBuf>,
    /// Where the credential provider plugins' executables are.
    #[arg(
        long,
        value_name = "DIR",
        requires = "image_credential_provider_config"
    )]
    image_credential_provider_bin_dir: Option<PathBuf>,
    /// How long to wait for a running agent's answer; the agent goes on with the pull after
    /// it (Go duration syntax).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::parse_timeout)]
    timeout: std::time::Duration,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Policy {
    #[value(name = "Always")]
    Always,
    #[value(name = "IfNotPresent")]
    IfNotPresent,
    #[value(name = "Never")]
    Never,
}

impl From<Policy> for PullPolicy {
    fn from(policy: Policy) -> PullPolicy {
        match policy {
            Policy::Always => PullPolicy::Always,
            Policy::IfNotPresent => PullPolicy::IfNotPresent,
            Policy::Never => PullPolicy::Never,
        }
    }
}

pub fn run(args: PullArgs) -> Result<(), Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // An image name may carry registry credentials (`user:password@host/repo`, a common
    // mistake): they never appear in an error.
    let image = args.image.clone();
    let image_ref = rt
        .block_on(pull(args))
        .map_err(|failure| match credentials_in(&image) {
            Some(_) => failure.redact(&image),
            None => failure,
        })?;
    println!("{image_ref}");
    Ok(())
}

/// The pull secret files, read and checked (a bad one is a usage error naming the file,
/// never its content). Each is read as an operator file (regular files only, at most 1 MiB:
/// a FIFO is refused at once, never waited on), on the blocking pool.
async fn read_pull_secrets(files: &[PathBuf]) -> Result<Vec<(Vec<u8>, DockerConfig)>, Failure> {
    let mut secrets = Vec::with_capacity(files.len());
    for path in files {
        let what = format!("--pull-secret {}", path.display());
        let bytes = operator_file::read_async(path.clone(), operator_file::Follow::Yes)
            .await
            .with_context(|| what.clone())
            .map_err(Failure::usage)?;
        let config = parse_pull_secret(&what, &bytes).map_err(Failure::usage)?;
        secrets.push((bytes, config));
    }
    Ok(secrets)
}

async fn pull(args: PullArgs) -> Result<String, Failure> {
    let pull_secrets = read_pull_secrets(&args.pull_secrets).await?;
    let agent = AdminClient::connect_with_timeout(&args.admin_socket, args.timeout).await;
    // An agent there that cannot take the call now is no reason to go around it: its
    // database is in use, and a second puller would race it.
    if let Err(e @ (AdminError::PermissionDenied { .. } | AdminError::Busy { .. })) = agent {
        return Err(Failure::from(e));
    }
    if let Ok(mut agent) = agent {
        let policy = match args.policy {
            Policy::Always => "Always",
            Policy::IfNotPresent => "IfNotPresent",
            Policy::Never => "Never",
        };
        let request = EnsureRequest {
            image: args.image.clone(),
            pull_policy: policy.to_owned(),
            pod_uid: args.pod_uid.clone(),
            runtime_handler: args.runtime_handler.clone(),
            pull_secrets: pull_secrets.into_iter().map(|(bytes, _)| bytes).collect(),
            ..EnsureRequest::default()
        };
        return agent.ensure_image(request).await.map_err(|e| match e {
            // The agent's reason is typed: bad input (an invalid image name or pull secret)
            // exits 2, any other failure 1; the message is "<reason>: <message>" as without
            // an agent.
            AdminError::Rejected { reason, .. } if reason.is_invalid_input() => Failure::usage(e),
            // No reason (a transport failure, a message limit): the message alone, as always.
            AdminError::Call { message, .. } => Failure::from(anyhow::anyhow!(message)),
            other => Failure::from(other),
        });
    }
    let config = CriConfig {
        runtime_endpoint: args.container_runtime_endpoint,
        image_endpoint: args.image_service_endpoint,
        ..CriConfig::default()
    };
    let client = CriClient::connect(config).await.map_err(|e| match e {
        CriError::InvalidEndpoint { .. } => Failure::usage(e),
        other => Failure::from(other),
    })?;
    let root =
        (!args.kubelet_root_dir.is_empty()).then_some(std::path::Path::new(&args.kubelet_root_dir));
    let plugins = match (
        &args.image_credential_provider_config,
        &args.image_credential_provider_bin_dir,
    ) {
        (Some(config), Some(bin_dir)) => Some(
            PluginProviders::load_async(config.clone(), bin_dir.clone())
                .await
                .context("--image-credential-provider-config")
                .map_err(Failure::usage)?,
        ),
        _ => None,
    };
    let sources = CredentialSources {
        node: Some(NodeCredentials::kubelet_search_path(root)),
        plugins,
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = db::open_waiting(&args.db, clock.now()).await?;
    let manager = ImageManager::new(
        &PullConfig::default(),
        Arc::new(client),
        Arc::new(store),
        clock,
    )
    .context("pull settings")?
    .with_credential_sources(Arc::new(sources));
    let pull_secrets: Vec<DockerConfig> = pull_secrets.into_iter().map(|(_, c)| c).collect();
    let pod = PodRef {
        uid: args.pod_uid,
        ..PodRef::default()
    };
    manager
        .ensure_image_exists_with(
            &pod,
            &args.image,
            args.policy.into(),
            PullAuth::Keyring(&pull_secrets),
            &args.runtime_handler,
        )
        .await
        .map_err(|e| {
            // Printed "<reason>: <message>", the kubelet's words only: the runtime error
            // underneath is already in the message, in the kubelet's form.
            let error = anyhow::anyhow!("{}: {}", e.reason(), e.message());
            if e.kind().is_invalid_input() {
                Failure::usage(error)
            } else {
                Failure::from(error)
            }
        })
}
