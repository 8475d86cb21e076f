//! `imagekeeper remove-runtime-pins [--containerd-address A] [--dry-run]`: the uninstall step
//! of the runtime pins. Removes `io.cri-containerd.pinned` and `io.imagekeeper.pinned` from
//! every containerd image name (namespace `k8s.io`) that carries imagekeeper's own label, and
//! touches no other name: the sandbox image's pin and an operator's own labels stay. Prints
//! each name, one a line. Stop the agent first, or it labels its keeps again at its next cycle.

use anyhow::Context;
use clap::Args;
use imagekeeper::agent::remove_runtime_pin_labels;
use imagekeeper::cri::{CONTAINERD_CRI_NAMESPACE, ContainerdImages, DEFAULT_RUNTIME_ENDPOINT};

use super::Failure;

#[derive(Args, Debug)]
pub struct RemoveRuntimePinsArgs {
    /// containerd's API socket [default: --container-runtime-endpoint].
    #[arg(long, value_name = "ENDPOINT")]
    containerd_address: Option<String>,
    /// The CRI runtime endpoint (containerd serves its API on the same socket).
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_RUNTIME_ENDPOINT)]
    container_runtime_endpoint: String,
    /// Print the names that carry imagekeeper's label; change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: RemoveRuntimePinsArgs) -> Result<(), Failure> {
    let address = args
        .containerd_address
        .unwrap_or(args.container_runtime_endpoint);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(failure)?;
    let names = rt.block_on(async {
        let client = ContainerdImages::connect(
            &address,
            CONTAINERD_CRI_NAMESPACE,
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(60),
        )
        .map_err(Failure::usage)?;
        remove_runtime_pin_labels(&client, args.dry_run)
            .await
            .with_context(|| format!("containerd at {address}"))
            .map_err(failure)
    })?;
    for name in &names {
        println!("{name}");
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    eprintln!(
        "{verb} imagekeeper's runtime pin labels from {} image name(s)",
        names.len()
    );
    Ok(())
}

fn failure(error: anyhow::Error) -> Failure {
    Failure {
        code: super::EXIT_FAILURE,
        error,
    }
}
