//! The fleet status run of issue 56, against a real API server (`scripts/bench-keepsets`
//! runs it inside the cluster lab's network namespace): `--nodes` simulated node agents (tasks
//! of this process), each watching the KeepSets as the agent does, one KeepSet of `--images`
//! images selecting every node created, and each agent then writing its own KeepSetReport by
//! server-side apply with its own field manager (`imagekeeper/<node>`), the body the agent
//! writes (`imagekeeper::cluster::report_body`). Prints, as one JSON object: the seconds from
//! the set's creation until every report was written, the API server's requests, response
//! and watch-event bytes over that time (its `/metrics`: `apiserver_request_total`,
//! `apiserver_response_sizes_sum`, `apiserver_watch_events_sizes_sum`), and its resident
//! memory before and after (`process_resident_memory_bytes`). Removes the set and the reports.
//!
//! Usage: keepset_fleet [--nodes N] [--images M]   (KUBECONFIG: the lab's admin kubeconfig)

use std::collections::BTreeMap;
use std::time::Instant;

use futures_util::StreamExt;
use imagekeeper::cluster::{GROUP, VERSION, report_body};
use imagekeeper::gc::KeepSetReport;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

const SET: &str = "fleet-bench";
const LABEL: &str = "imagekeeper.io/bench";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_owned(),
        version: VERSION.to_owned(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

fn arg(name: &str, default: usize) -> Result<usize, Error> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(at) => Ok(args
            .get(at + 1)
            .ok_or_else(|| format!("{name} needs a value"))?
            .parse()
            .map_err(|e| format!("{name}: {e}"))?),
        None => Ok(default),
    }
}

/// The API server's figures this run reads: (requests, response bytes, watch event bytes,
/// resident bytes).
async fn figures(client: &Client) -> Result<(f64, f64, f64, f64), Error> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut sums = [0f64; 4];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = match line.rsplit_once(' ') {
            Some((name, value)) => (name, value.parse::<f64>().unwrap_or(0.0)),
            None => continue,
        };
        let metric = name.split('{').next().unwrap_or(name);
        let at = match metric {
            "apiserver_request_total" => 0,
            "apiserver_response_sizes_sum" => 1,
            "apiserver_watch_events_sizes_sum" => 2,
            "process_resident_memory_bytes" => 3,
            _ => continue,
        };
        sums[at] += value;
    }
    Ok((sums[0], sums[1], sums[2], sums[3]))
}

/// One simulated agent: watches the KeepSets (telling `listed` after its first list), and
/// once it sees the bench's set, applies its node's report of it.
async fn agent(
    client: Client,
    node: String,
    images: u64,
    listed: tokio::sync::mpsc::Sender<()>,
) -> Result<(), Error> {
    let sets: Api<DynamicObject> = Api::all_with(client.clone(), &resource("KeepSet", "keepsets"));
    let reports: Api<DynamicObject> =
        Api::all_with(client, &resource("KeepSetReport", "keepsetreports"));
    let mut events = std::pin::pin!(watcher::watcher(sets, watcher::Config::default()));
    while let Some(event) = events.next().await {
        let seen = match event? {
            Event::InitDone => {
                listed.send(()).await?;
                false
            }
            Event::Apply(set) | Event::InitApply(set) => set.metadata.name.as_deref() == Some(SET),
            _ => false,
        };
        if seen {
            let report = KeepSetReport {
                generation: 1,
                images,
                present: images,
                pinned: images,
                bytes: images * 1_000_000,
                ..KeepSetReport::default()
            };
            let mut body = report_body(&node, &BTreeMap::from([(SET.to_owned(), report)]));
            body["metadata"]["labels"] = json!({ LABEL: "fleet" });
            let params = PatchParams::apply(&format!("imagekeeper/{node}")).force();
            reports.patch(&node, &params, &Patch::Apply(&body)).await?;
            return Ok(());
        }
    }
    Err("the watch ended".into())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let nodes = arg("--nodes", 1_000)?;
    let images = arg("--images", 1_000)?;
    let client = Client::try_default().await?;
    let sets: Api<DynamicObject> = Api::all_with(client.clone(), &resource("KeepSet", "keepsets"));
    let _ = sets.delete(SET, &DeleteParams::default()).await;
    let (listed_tx, mut listed_rx) = tokio::sync::mpsc::channel(nodes.max(1));
    let mut agents = tokio::task::JoinSet::new();
    let started = Instant::now();
    for n in 0..nodes {
        agents.spawn(agent(
            client.clone(),
            format!("fleet-bench-node-{n:04}"),
            images as u64,
            listed_tx.clone(),
        ));
    }
    for _ in 0..nodes {
        listed_rx
            .recv()
            .await
            .ok_or("an agent ended before its first list")?;
    }
    let watching = started.elapsed().as_secs_f64();
    let before = figures(&client).await?;
    let set = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "KeepSet",
        "metadata": { "name": SET },
        "spec": {
            "images": (0..images).map(|i| format!("registry.example/fleet/img{i}:1")).collect::<Vec<_>>(),
            "nodeSelector": {},
        },
    });
    let t0 = Instant::now();
    sets.patch(
        SET,
        &PatchParams::apply("keepset-fleet-bench"),
        &Patch::Apply(&set),
    )
    .await?;
    let mut failed = 0;
    while let Some(done) = agents.join_next().await {
        if !matches!(done, Ok(Ok(()))) {
            failed += 1;
            eprintln!("an agent failed: {done:?}");
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = figures(&client).await?;
    let reports: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("KeepSetReport", "keepsetreports"));
    let written = reports
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL}=fleet")))
        .await?
        .items
        .len();
    println!(
        "{}",
        json!({
            "nodes": nodes,
            "images": images,
            "agentsWatchingSeconds": watching,
            "reportsWritten": written,
            "agentsFailed": failed,
            "secondsUntilEveryReport": seconds,
            "apiServerRequests": after.0 - before.0,
            "apiServerResponseBytes": after.1 - before.1,
            "apiServerWatchEventBytes": after.2 - before.2,
            "apiServerResidentBytesBefore": before.3,
            "apiServerResidentBytesAfter": after.3,
        })
    );
    sets.delete(SET, &DeleteParams::default()).await?;
    reports
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels(&format!("{LABEL}=fleet")),
        )
        .await?;
    if failed > 0 || written != nodes {
        return Err(format!("{written} of {nodes} reports written, {failed} agents failed").into());
    }
    Ok(())
}
