//! `imagekeeper inspect explain`: the GC settings resolved as `run` resolves them (the agent's
//! config file, `--set`, the flags: `settings.rs`) and the image filesystem from its flags, the
//! database's verified snapshot, the kubelet's pull records and a running agent's runtime
//! pins (asked over the admin socket, with a deadline; unasked or unreachable is said, not
//! guessed) folded into `imagekeeper::gc::explain_in`, and the result handed to the printer.
//! Read-only: it never writes the database file nor changes the agent.

use super::*;

/// The GC settings and image filesystem `inspect explain` evaluates: the settings resolved as
/// `run` resolves them, the filesystem from its flags (bad ones are usage errors, exit 2).
fn explain_settings(args: &ExplainArgs) -> Result<(GcConfig, Option<FsSpace>), Failure> {
    let gc = args.settings.resolve()?;
    let fs = match (args.capacity, args.available) {
        (Some(0), _) => {
            return Err(Failure::usage(anyhow!(
                "invalid value 0 for --capacity: the image filesystem's size must be \
                 greater than 0"
            )));
        }
        (Some(capacity), Some(available)) => Some(FsSpace {
            capacity,
            available,
        }),
        _ => None,
    };
    Ok((gc, fs))
}

/// The configured pinned patterns (`pinnedImages`) applied as the agent's detect applies them
/// (`imagekeeper::gc::detect`: a record is pinned when the runtime lists it pinned or one of
/// its names matches a pattern), against the names the last detect stored: a record the
/// patterns match is pinned, over what the database stores (which holds the runtime's
/// `pinned` and the agent's patterns at that detect; offline the two cannot be told apart, so
/// a pattern dropped since is not undone). A record with no names stored matches no pattern.
fn pin_by_patterns(
    snap: &Snapshot,
    records: &mut [imagekeeper::store::StoredRecord],
    pins: &imagekeeper::gc::PinPatterns,
) -> Result<(), Failure> {
    if pins.is_empty() {
        return Ok(());
    }
    let names = snap.names().map_err(inspect_failure)?;
    for r in records.iter_mut() {
        r.record.pinned = pins.pins(&imagekeeper::gc::stored_image(r, &names));
    }
    Ok(())
}

/// `inspect explain`: what GC would do now, with the kubelet's pull records when readable.
pub(super) fn explain(
    w: &mut dyn Write,
    out: &OutputArgs,
    db: &Path,
    args: &ExplainArgs,
    now: UnixNanos,
    runtime_pins: &RuntimePinsSeen,
) -> Result<(), Failure> {
    let (gc, fs) = explain_settings(args)?;
    let policy = gc.policy;
    let snap = open(db, true)?;
    let mut records = snap.records_in_eviction_order().map_err(inspect_failure)?;
    pin_by_patterns(&snap, &mut records, &gc.pins)?;
    let meta = snap.meta().map_err(inspect_failure)?;
    let kubelet = match &gc.kubelet_root_dir {
        None => OfflineKubelet::default(),
        Some(dir) => fold_offline(
            &PullRecordsReader::new(dir),
            &mut records,
            now,
            policy.min_age,
            gc.kubelet_intent_max_age.unwrap_or(DEFAULT_INTENT_MAX_AGE),
        ),
    };
    for stale in &kubelet.view.stale_intents {
        eprintln!("imagekeeper: {}", escape_control(&stale.describe()));
    }
    for image in &kubelet.unresolved_intents {
        eprintln!(
            "imagekeeper: the kubelet is pulling {image:?}: explain cannot tell which image that names without the runtime (gc --dry-run can)"
        );
    }
    // The unwatched stretches as a GC's detect at `now` would leave them (with the default
    // watch period: the agent's own is not in the file).
    let entries = snap.meta_entries().map_err(inspect_failure)?;
    let stored = |name: &str| entries.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let (watch, _) = WatchHistory::from_meta(stored).after_detect(now, DEFAULT_WATCH_PERIOD);
    let irreplaceable = gc.protect_irreplaceable.then(|| Irreplaceable {
        sandbox_image: gc.sandbox_image.clone(),
    });
    let (protections, unnamed) = snap
        .protections_offline(&records, now, irreplaceable.as_ref())
        .map_err(inspect_failure)?;
    if gc.protect_irreplaceable {
        // Say what the file can and cannot tell.
        let sandbox = match &gc.sandbox_image {
            Some(image) => format!("the sandbox image is {image:?} (--pod-infra-container-image)"),
            None => "the runtime's sandbox image is not in the database (give \
                     --pod-infra-container-image, or ask the running agent: gc --dry-run)"
                .to_owned(),
        };
        let unnamed = if unnamed == 0 {
            String::new()
        } else {
            format!(
                "; {unnamed} record(s) have no names stored (no detect since they were \
                 recorded), so whether they have a repo digest is not known"
            )
        };
        eprintln!(
            "imagekeeper: irreplaceable images judged from the names the last detect stored: \
             no repo digest is irreplaceable; {sandbox}{unnamed}"
        );
    }
    let journal = snap.journal().map_err(inspect_failure)?;
    // The repo tags the store last listed for each record (a detect refreshes them): what
    // the adaptive and the predictive orders read.
    let tags: std::collections::BTreeMap<_, _> = if matches!(
        gc.order,
        imagekeeper::gc::GcOrder::Adaptive | imagekeeper::gc::GcOrder::Predictive
    ) {
        snap.names()
            .map_err(inspect_failure)?
            .into_iter()
            .map(|(key, names)| (key, names.repo_tags))
            .collect()
    } else {
        std::collections::BTreeMap::new()
    };
    let mut ranks = std::collections::BTreeMap::new();
    if gc.order == imagekeeper::gc::GcOrder::Adaptive {
        let ranked = imagekeeper::gc::rank_adaptive(records, &journal, &tags);
        records = Vec::with_capacity(ranked.len());
        for (record, rank) in ranked {
            ranks.insert(record.key.clone(), rank);
            records.push(record);
        }
    }
    let mut predictive_ranks = std::collections::BTreeMap::new();
    if gc.order == imagekeeper::gc::GcOrder::Predictive {
        let uses = snap.uses().map_err(inspect_failure)?;
        let pulls = snap.pulls().map_err(inspect_failure)?;
        let ranked = imagekeeper::gc::rank_predictive(records, &journal, &tags, &uses, &pulls, now);
        records = Vec::with_capacity(ranked.len());
        for (record, rank) in ranked {
            predictive_ranks.insert(record.key.clone(), rank);
            records.push(record);
        }
    }
    let mut explanation = explain_in(
        &records,
        meta.last_detect,
        policy,
        fs,
        now,
        &ExplainContext {
            sets: &Default::default(),
            kubelet: &kubelet.view,
            watch: &watch,
            image_fs: None,
            protections: &protections,
        },
    );
    note_prior_evictions(&mut explanation, &journal);
    imagekeeper::gc::note_adaptive_ranks(&mut explanation, &ranks);
    imagekeeper::gc::note_predictive_ranks(&mut explanation, &predictive_ranks);
    imagekeeper::gc::note_runtime_pins(&mut explanation, runtime_pins);
    Ok(print::explain(w, out, &explanation)?)
}

/// What the running agent on `socket` says of the runtime pins, when it keeps the database
/// `db`; else why that is not known (the notes `pins -o wide` gives).
pub(super) fn runtime_pins_seen(socket: &Path, db: &Path) -> RuntimePinsSeen {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return RuntimePinsSeen::unknown(imagekeeper::gc::RUNTIME_PIN_OFFLINE);
    };
    let answer = rt.block_on(async {
        let mut client =
            imagekeeper::admin::AdminClient::connect_with_timeout(socket, RUNTIME_PINS_TIMEOUT)
                .await
                .ok()?;
        Some(client.runtime_pins().await)
    });
    let (report, omitted) = match answer {
        None => return RuntimePinsSeen::unknown(imagekeeper::gc::RUNTIME_PIN_OFFLINE),
        Some(Err(e)) => {
            return RuntimePinsSeen::unknown(format!(
                "unknown: the running agent on {} did not say ({e})",
                socket.display()
            ));
        }
        Some(Ok(answer)) => answer,
    };
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(&report.db, db) {
        return RuntimePinsSeen::unknown(format!(
            "unknown: the running agent on {} keeps another database ({})",
            socket.display(),
            report.db.display()
        ));
    }
    if !report.note.is_empty() {
        // Runtime pins off: the agent still names what it keeps.
        return RuntimePinsSeen::Unknown {
            note: report.note,
            agent_keeps: report
                .keeps
                .into_iter()
                .map(|(key, keep)| (key, keep.why))
                .collect(),
        };
    }
    if omitted > 0 {
        eprintln!(
            "imagekeeper: the running agent left {omitted} kept image(s) out of its runtime pins \
             answer (too long): those are shown as not among its keeps"
        );
    }
    RuntimePinsSeen::Reconciled(report.keeps.into_iter().collect())
}

/// How long `inspect explain` waits for a running agent's runtime pins.
const RUNTIME_PINS_TIMEOUT: Duration = Duration::from_secs(5);
