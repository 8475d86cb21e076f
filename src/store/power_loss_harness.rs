//! The power-loss harness (feature `fault-injection`): drives the real [`Store`] API on a
//! [`PowerLossDisk`] through a [`Scenario`] of batches and clean reopens, cuts power at a chosen
//! disk operation, rebuilds the disk from the synced image plus a seeded subset of the unsynced
//! writes, reopens it read-write (redb's recovery), and holds the result against a `BTreeMap`
//! model: the store must hold exactly the state after the last acknowledged commit, or after
//! the commit in flight at the cut, whole; [`Store::check`] must pass; the eviction index must
//! walk; and the recovered store must take a new commit that survives a reopen.
//!
//! The proptest in `tests` runs it under `cargo test`; `fuzz/fuzz_targets/power_loss.rs` drives
//! it from fuzz input.

use std::fmt::Write as _;
use std::path::Path;

mod model;
mod ops;

pub(crate) use model::Model;
use ops::to_batch;

use super::power_loss::PowerLossDisk;
use super::{CommitMode, Store, StoreError, Violation, meta_keys};
use crate::model::UnixNanos;

/// The creation time of every simulated database.
const CREATED_AT: UnixNanos = UnixNanos(1_000_000_000_000);
const LABEL: &str = "<power-loss disk>";
const HANDLERS: [&str; 3] = ["", "runc", "kata"];
const META_NAMES: [&str; 3] = [
    meta_keys::LAST_DETECT,
    meta_keys::AGENT_STARTED_AT,
    "marker",
];

/// One operation of a batch; small numbers pick among a few keys so operations collide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A detect-like upsert of the whole record.
    Upsert {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// When the record was first detected (unix nanoseconds).
        first_detected: i64,
        /// When its image was last used (unix nanoseconds).
        last_used: i64,
        /// The image's size in bytes.
        size: u64,
        /// Whether the runtime pins the image.
        pinned: bool,
    },
    /// A last-used bump (creating the record if missing).
    MarkUsed {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The use's time (unix nanoseconds); a record's last_used moves at least 1 ns forward.
        now: i64,
        /// The size to record in bytes (`None`: keep the record's).
        size: Option<u64>,
    },
    /// A record's removal (`BatchOp::Remove`).
    Remove {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
    },
    /// Detect's merge of a listed image (`BatchOp::Sight`).
    Sight {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The detect's time (unix nanoseconds).
        now: i64,
        /// Whether a container uses the image.
        in_use: bool,
        /// The listed size in bytes.
        size: u64,
        /// Whether the runtime pins the image.
        pinned: bool,
    },
    /// Detect's removal of an unlisted record unless marked since (`BatchOp::RemoveUnlisted`).
    RemoveUnlisted {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The last_used detect read: a record marked used since is kept.
        seen_last_used: i64,
    },
    /// The same, journaled at `at` as an external removal (schema 2).
    RemoveUnlistedJournaled {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The last_used detect read: a record marked used since is kept.
        seen_last_used: i64,
        /// The journal entry's removal time (unix nanoseconds).
        at: i64,
    },
    /// GC's removal: the record's deletion and its journal entry (`BatchOp::Evict`).
    Evict {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The removal time (unix nanoseconds).
        at: i64,
        /// The image's place in the eviction walk.
        rank: u32,
    },
    /// Detect's names of an image (`BatchOp::SetNames`): `names` picks one of a few lists.
    SetNames {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// Which name list (`% 4`; 0: no names).
        names: u8,
    },
    /// A pull backoff entry written (`BatchOp::PutBackoff`).
    PutBackoff {
        /// The backoff key: one of 12 pod/image pairs (`key % 4`, `key % 3`).
        key: u8,
        /// The backoff in seconds.
        backoff_secs: u32,
        /// The entry's last update (unix nanoseconds).
        last_update: i64,
        /// The error message is this many bytes (cut to 4096): long ones spill redb pages.
        message_len: u16,
    },
    /// A pull backoff entry removed.
    RemoveBackoff {
        /// The backoff key, as `PutBackoff`'s.
        key: u8,
    },
    /// A meta value written (`BatchOp::SetMeta`).
    SetMeta {
        /// Which meta key (`% 3`): last detect, agent start or a free-form one.
        name: u8,
        /// The value stored.
        value: i64,
    },
    /// `stamp_if_changed(last_detect, value)`.
    Stamp {
        /// The last detect time to stamp (unix nanoseconds); written only if it differs.
        value: i64,
    },
    /// Schema 4: an operator's pin (`BatchOp::PutPin`); `key` picks one of a few names.
    PutPin {
        /// The pinned name (`key % 3`) and handler (`key / 3 % 3`).
        key: u8,
        /// When the pin was made (unix nanoseconds).
        created_at: i64,
        /// When the pin expires (unix nanoseconds).
        until: i64,
        /// The reason is this many bytes (cut to 1024): long ones spill redb pages.
        reason_len: u16,
    },
    /// An operator's pin removed (`BatchOp::RemovePin`).
    RemovePin {
        /// The pin, as `PutPin`'s.
        key: u8,
    },
    /// A detect's pruning of pins expired for longer than the journal's max age.
    PruneExpiredPins {
        /// The detect's time (unix nanoseconds).
        now: i64,
    },
    /// Schema 5: a detect's view of the images in use (`BatchOp::ObserveUses`); bit `i` of
    /// `in_use` names image `i` (of 8) under handler `i % 3`.
    ObserveUses {
        /// The detect's time (unix nanoseconds).
        now: i64,
        /// Bit `i` names image `i` under handler `i % 3` as in use.
        in_use: u8,
    },
    /// Schema 5: a container event's use (`BatchOp::OpenUse`).
    OpenUse {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The event's time (unix nanoseconds).
        now: i64,
    },
    /// Schema 5: a pull in the history (`BatchOp::RecordPull`).
    RecordPull {
        /// The image: `sha256:` of `image % 16` (16 digests, so operations collide).
        image: u8,
        /// The runtime handler: `""`, `runc` or `kata` by `handler % 3`.
        handler: u8,
        /// The pull's time (unix nanoseconds), also its key.
        at: i64,
        /// The pulled size in bytes.
        size: u64,
        /// Who pulled: `PullOrigin::ALL[origin % len]`.
        origin: u8,
        /// The name is this many bytes (cut to 4096): long ones spill redb pages.
        name_len: u16,
    },
    /// Schema 5: the warm table replaced by `rows` rows (`BatchOp::ReplaceWarm`).
    ReplaceWarm {
        /// How many rows (`rows % 6`), `registry.example/warm:{i}` each.
        rows: u8,
        /// The first row's state (of six); each next row takes the next.
        state: u8,
        /// Every row's since time (unix nanoseconds).
        since: i64,
    },
    /// Schema 6: a runtime label row written (`BatchOp::PutRuntimeLabel`).
    PutRuntimeLabel {
        /// The containerd name: `registry.example/labelled:{name % 4}`.
        name: u8,
        /// When it was written (unix nanoseconds).
        written_at: i64,
        /// The value is this many bytes (cut to 256).
        value_len: u16,
    },
    /// Schema 6: a runtime label row removed (`BatchOp::RemoveRuntimeLabel`).
    RemoveRuntimeLabel {
        /// The name, as `PutRuntimeLabel`'s.
        name: u8,
    },
}

/// A step of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// One `Store::apply`.
    Batch(Vec<Op>),
    /// Drop the store and open the disk again (no crash).
    Reopen,
    /// `Store::compact` (whatever the file's size): changes no content.
    Compact,
}

/// One run: the steps, when power is cut (the number of the mutating disk operation, counted
/// from the end of the first open, that fails first; past the end, power is cut after the last
/// step), which unsynced writes survive (a seed), and how the store commits.
///
/// The first open, which creates the database, always completes: a cut while redb creates a
/// new file leaves a file that it refuses (see `docs/testing-fuzz.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The batches, reopens and compactions, in order.
    pub steps: Vec<Step>,
    /// The number of the mutating disk operation (from the end of the first open) that fails
    /// first; [`count_disk_ops`] gives a run's total.
    pub cut_after: u64,
    /// Picks which unsynced writes survive the cut.
    pub crash_seed: u64,
    /// How the store commits (durable or not) in every open.
    pub mode: CommitMode,
}

/// Which acceptable state the recovered store held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// The state after the last acknowledged commit (with a commit in flight or not).
    Acknowledged,
    /// The state after the commit in flight at the cut, whole.
    InFlight,
}

/// What a run that kept the promise did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Commits the store acknowledged before the cut.
    pub acknowledged: usize,
    /// Whether power was cut during a step (rather than after the last one).
    pub cut_during_run: bool,
    /// Whether a commit that changes something was in flight at the cut.
    pub in_flight: bool,
    /// Which acceptable state the recovered store held.
    pub recovered: Recovered,
    /// Mutating disk operations before the cut.
    pub disk_ops: u64,
}

/// How a run broke the promise (or could not be run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessFailure {
    #[error(
        "after the crash the store holds neither the acknowledged state nor the in-flight one: {detail}"
    )]
    /// The recovered store matches neither acceptable model.
    WrongState {
        /// The differences, table by table.
        detail: String,
    },
    #[error("the database does not open after the crash: {0}")]
    /// The crashed disk's database does not open.
    ReopenFailed(#[source] Box<StoreError>),
    #[error("check after recovery: {}", list(.0))]
    /// `Store::check` found these violations in the recovered store.
    CheckFailed(Vec<Violation>),
    #[error("{what} failed without a power cut: {source}")]
    /// A store call failed before the cut (a harness or store bug, not a crash effect).
    Unexpected {
        /// The call.
        what: &'static str,
        /// Its error.
        #[source]
        source: Box<StoreError>,
    },
    #[error("the store says batch {step} changed {store}, the model says {model}")]
    /// The store's commit and the model disagree on whether a batch changed anything.
    ModelDisagrees {
        /// The step's index in the scenario.
        step: usize,
        /// Whether the store said the batch changed something.
        store: bool,
        /// Whether the model says it did.
        model: bool,
    },
    #[error("the recovered store: {detail}")]
    /// The recovered store failed a use after recovery: its check, its eviction walk, a new
    /// commit or the reopen after it.
    AfterRecovery {
        /// What failed.
        detail: String,
    },
}

fn list(v: &[Violation]) -> String {
    v.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

fn open(disk: &PowerLossDisk, mode: CommitMode) -> Result<Store, StoreError> {
    Store::open_with_backend(disk.backend(), Path::new(LABEL), CREATED_AT, mode)
}

/// The failure of a store call that fails only on a harness or store bug: `what` names the
/// call.
fn unexpected(what: &'static str) -> impl Fn(StoreError) -> HarnessFailure {
    move |source| HarnessFailure::Unexpected {
        what,
        source: Box::new(source),
    }
}

/// How many mutating disk operations `scenario` makes after the first open when power is never
/// cut: the range in which a cut lands inside the run.
pub fn count_disk_ops(scenario: &Scenario) -> Result<u64, HarnessFailure> {
    let disk = PowerLossDisk::new(Vec::new(), None);
    let mut store = Some(open(&disk, scenario.mode).map_err(unexpected("open"))?);
    let created = disk.ops();
    for step in &scenario.steps {
        match step {
            Step::Batch(ops) => {
                if let Some(s) = &store {
                    s.apply(&to_batch(ops)).map_err(unexpected("apply"))?;
                }
            }
            Step::Reopen => {
                drop(store.take());
                store = Some(open(&disk, scenario.mode).map_err(unexpected("reopen"))?);
            }
            Step::Compact => {
                if let Some(s) = &store {
                    s.compact().map_err(unexpected("compact"))?;
                }
            }
        }
    }
    Ok(disk.ops() - created)
}

/// Runs `scenario`; `Ok` when the store kept its promise.
pub fn run(scenario: &Scenario) -> Result<Outcome, HarnessFailure> {
    let disk = PowerLossDisk::new(Vec::new(), None);
    let (committed, store) = run_steps(scenario, &disk)?;
    let cut_during_run = disk.is_cut();
    let disk_ops = disk.ops();
    // Power goes off with the store still open: nothing of a clean close reaches the disk.
    disk.cut_now();
    drop(store);

    let after = PowerLossDisk::new(disk.crash_image(scenario.crash_seed), None);
    let recovered = recover(&after, &committed)?;
    Ok(Outcome {
        acknowledged: committed.acknowledged,
        cut_during_run,
        in_flight: committed.in_flight.is_some(),
        recovered,
        disk_ops,
    })
}

/// What a run committed before the cut: the states recovery may hold, and the count.
struct Committed {
    /// The state after the last acknowledged commit.
    acked: Model,
    /// The state after the commit in flight at the cut, when that commit changes something.
    in_flight: Option<Model>,
    /// Commits the store acknowledged as changing something.
    acknowledged: usize,
}

impl Committed {
    /// Applies step `index`'s batch to the store and to the model; returns whether the store
    /// is still open (`false`: power was cut during the commit).
    fn apply_batch(
        &mut self,
        store: &Store,
        disk: &PowerLossDisk,
        index: usize,
        ops: &[Op],
    ) -> Result<bool, HarnessFailure> {
        let mut next = self.acked.clone();
        let model_changed = next.apply(ops);
        match store.apply(&to_batch(ops)) {
            Ok(changed) => {
                if changed != model_changed {
                    return Err(HarnessFailure::ModelDisagrees {
                        step: index,
                        store: changed,
                        model: model_changed,
                    });
                }
                self.acknowledged += usize::from(changed);
                self.acked = next;
                Ok(true)
            }
            Err(_) if disk.is_cut() => {
                self.in_flight = model_changed.then_some(next);
                Ok(false)
            }
            Err(e) => Err(unexpected("apply")(e)),
        }
    }
}

/// Opens the store on `disk`, arms the cut and runs the scenario's steps until they end or a
/// step fails at the cut; returns what was committed and the store if it is still open.
fn run_steps(
    scenario: &Scenario,
    disk: &PowerLossDisk,
) -> Result<(Committed, Option<Store>), HarnessFailure> {
    let mut committed = Committed {
        acked: Model::initial(),
        in_flight: None,
        acknowledged: 0,
    };
    let mut store = Some(open(disk, scenario.mode).map_err(unexpected("open"))?);
    disk.cut_after(scenario.cut_after);
    for (index, step) in scenario.steps.iter().enumerate() {
        let Some(current) = store.as_ref() else { break };
        match step {
            Step::Batch(ops) => {
                if !committed.apply_batch(current, disk, index, ops)? {
                    store = None;
                }
            }
            Step::Reopen => {
                drop(store.take());
                match open(disk, scenario.mode) {
                    Ok(s) => store = Some(s),
                    Err(_) if disk.is_cut() => {}
                    Err(e) => return Err(unexpected("reopen")(e)),
                }
            }
            // Compaction commits nothing new: after a cut the acknowledged state is the only
            // one allowed.
            Step::Compact => match current.compact() {
                Ok(_) => {}
                Err(_) if disk.is_cut() => store = None,
                Err(e) => return Err(unexpected("compact")(e)),
            },
        }
    }
    Ok((committed, store))
}

/// Reopens the crashed disk `after`, holds what it finds to the acknowledged and the in-flight
/// state, checks it and uses it; returns which state it held.
fn recover(after: &PowerLossDisk, committed: &Committed) -> Result<Recovered, HarnessFailure> {
    let mut store =
        open(after, CommitMode::Durable).map_err(|e| HarnessFailure::ReopenFailed(Box::new(e)))?;
    let found = Model::read(&store).map_err(|e| HarnessFailure::ReopenFailed(Box::new(e)))?;
    let recovered = if found == committed.acked {
        Recovered::Acknowledged
    } else if committed.in_flight.as_ref() == Some(&found) {
        Recovered::InFlight
    } else {
        return Err(HarnessFailure::WrongState {
            detail: describe(&committed.acked, committed.in_flight.as_ref(), &found),
        });
    };
    let violations = store.check().map_err(|e| HarnessFailure::AfterRecovery {
        detail: format!("check failed to run: {e}"),
    })?;
    if !violations.is_empty() {
        return Err(HarnessFailure::CheckFailed(violations));
    }
    usable_after_recovery(store, after, found)?;
    Ok(recovered)
}

/// The recovered store walks its eviction index in order and takes a commit that a clean
/// reopen still holds.
fn usable_after_recovery(
    store: Store,
    disk: &PowerLossDisk,
    mut model: Model,
) -> Result<(), HarnessFailure> {
    let fail = |detail: String| HarnessFailure::AfterRecovery { detail };
    let walked: Vec<_> = store
        .eviction_order()
        .map_err(|e| fail(format!("eviction scan: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| fail(format!("eviction scan: {e}")))?;
    if walked.len() != model.records.len()
        || walked.windows(2).any(|w| {
            (w[0].record.last_used, w[0].record.first_detected)
                > (w[1].record.last_used, w[1].record.first_detected)
        })
    {
        return Err(fail(
            "the eviction walk is out of order or incomplete".to_owned(),
        ));
    }
    let op = Op::MarkUsed {
        image: 15,
        handler: 0,
        now: i64::MAX,
        size: Some(1),
    };
    model.apply(std::slice::from_ref(&op));
    store
        .apply(&to_batch(&[op]))
        .map_err(|e| fail(format!("a commit after recovery: {e}")))?;
    drop(store);
    let store = open(disk, CommitMode::Durable).map_err(|e| fail(format!("reopen: {e}")))?;
    let found = Model::read(&store).map_err(|e| fail(format!("read after reopen: {e}")))?;
    if found != model {
        return Err(fail(format!(
            "a commit after recovery did not survive a clean reopen: {}",
            describe(&model, None, &found)
        )));
    }
    Ok(())
}

/// A short account of how `found` differs from the expected states.
fn describe(acked: &Model, in_flight: Option<&Model>, found: &Model) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "found {} records, {} backoff entries, meta {:?}; acknowledged state has {} records, {} \
         backoff entries, meta {:?}",
        found.records.len(),
        found.backoff.len(),
        found.meta,
        acked.records.len(),
        acked.backoff.len(),
        acked.meta
    );
    if let Some(m) = in_flight {
        let _ = write!(
            out,
            "; in-flight state has {} records, {} backoff entries, meta {:?}",
            m.records.len(),
            m.backoff.len(),
            m.meta
        );
    } else {
        let _ = write!(out, "; no commit was in flight");
    }
    let differing: Vec<String> = acked
        .records
        .iter()
        .filter(|(k, v)| found.records.get(k) != Some(v))
        .map(|(k, _)| k.to_string())
        .chain(
            found
                .records
                .keys()
                .filter(|k| !acked.records.contains_key(k))
                .map(|k| k.to_string()),
        )
        .take(4)
        .collect();
    if !differing.is_empty() {
        let _ = write!(
            out,
            "; records differing from the acknowledged state: {differing:?}"
        );
    }
    out
}

#[cfg(test)]
mod tests;
