//! `imagekeeper remove-runtime-pins [--containerd-address A] [--instance ID] [--db PATH]
//! [--dry-run]`: the uninstall step of the runtime pins. Removes `io.cri-containerd.pinned`,
//! `io.imagekeeper.pinned` and `io.imagekeeper.instance` from every containerd image name
//! (namespace `k8s.io`) that carries imagekeeper's own label (only instance ID's with
//! `--instance`), and touches no other name: the sandbox image's pin and an operator's own
//! labels stay. When the agent's database (`--db`) is there, its instance's labels are removed
//! only from the names its record says the agent labelled (schema 6's `runtime_labels`), with
//! the pinned label of a recorded name whose own label another client stripped; a name
//! carrying that instance's labels the agent never wrote (forged) is left and named on stderr.
//! Prints each name, one a line; stderr says whose labels they were (each instance and its
//! count). Stop the agent first, or it labels its keeps again at its next cycle.

use anyhow::Context;
use clap::Args;
use imagekeeper::agent::{
    RemovedPinLabels, label_record, remove_recorded_runtime_pin_labels, remove_runtime_pin_labels,
};
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
    /// Only the labels of this agent instance (the `io.imagekeeper.instance` value: `doctor`
    /// and the agent's log name it); by default every instance's.
    #[arg(long, value_name = "ID")]
    instance: Option<String>,
    /// The agent's database: its record of the names it labelled limits the removal of its
    /// instance's labels to them (read from a copy; when absent, the labels alone decide).
    #[arg(long, value_name = "PATH", default_value = imagekeeper::config::DEFAULT_DB)]
    db: std::path::PathBuf,
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
    let record = match args.db.exists() {
        true => {
            let super::db::DryRunStore { store, copy: _copy } =
                super::db::open_for_dry_run(&args.db)?;
            label_record(&store)
                .with_context(|| format!("reading the database {}", args.db.display()))
                .map_err(failure)?
        }
        false => None,
    };
    let RemovedPinLabels {
        removed: names,
        foreign,
    } = rt.block_on(async {
        let client = ContainerdImages::connect(
            &address,
            CONTAINERD_CRI_NAMESPACE,
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(60),
        )
        .map_err(Failure::usage)?;
        let instance = args.instance.as_deref();
        let removed = match &record {
            Some(record) => {
                remove_recorded_runtime_pin_labels(&client, args.dry_run, instance, record).await
            }
            None => remove_runtime_pin_labels(&client, args.dry_run, instance)
                .await
                .map(|removed| RemovedPinLabels {
                    removed,
                    foreign: Vec::new(),
                }),
        };
        removed
            .with_context(|| format!("containerd at {address}"))
            .map_err(failure)
    })?;
    if let (Some(record), false) = (&record, foreign.is_empty()) {
        eprintln!(
            "left {} name(s) carrying instance {}'s labels that its database's record does not hold (forged, or the record lost): {}",
            foreign.len(),
            record.instance,
            foreign.join(", ")
        );
    }
    for removed in &names {
        println!("{}", removed.name);
    }
    let mut owners: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for removed in &names {
        let owner = removed
            .instance
            .as_deref()
            .unwrap_or("unnamed (written before instances)");
        *owners.entry(owner).or_insert(0) += 1;
    }
    let whose: Vec<String> = owners
        .iter()
        .map(|(owner, n)| format!("instance {owner}: {n}"))
        .collect();
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    match whose.is_empty() {
        true => eprintln!(
            "{verb} imagekeeper's runtime pin labels from {} image name(s)",
            names.len()
        ),
        false => eprintln!(
            "{verb} imagekeeper's runtime pin labels from {} image name(s) ({})",
            names.len(),
            whose.join(", ")
        ),
    }
    Ok(())
}

fn failure(error: anyhow::Error) -> Failure {
    Failure {
        code: super::EXIT_FAILURE,
        error,
    }
}
