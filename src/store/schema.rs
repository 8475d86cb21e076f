//! The schema: the version this build writes ([`CURRENT_SCHEMA_VERSION`]), the names of the
//! `meta` entries ([`meta_keys`]), and the upgrade step from each older version
//! (`migrations/000N_*.md`). A new file is initialized in one write transaction (every table
//! of the current schema, then `schema_version` and `created_at`); a redb file that holds
//! other tables and no schema version is refused as not ours, never initialized over. An older
//! file is upgraded in one durable write transaction per step, each writing the step's tables
//! and the next version together, so a crash leaves the old or the new schema, never a mix
//! (on a file, the copy to `<db>.bak-v<N>` is taken first: `backup.rs`). A store is handed
//! out only after every table definition was read (`read_table_definitions`), while the open
//! is still guarded against redb's panics.

use redb::{Durability, ReadableTable, TableHandle, WriteTransaction};

use super::codec::{Codec, IndexKey};
use super::rows::put_meta;
use super::tables::{
    BACKOFF, EVICTION, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS,
    RUNTIME_LABELS, SIGNALS, USES, WARM,
};
use super::{Handle, Store, StoreError, TxnError};
use crate::model::UnixNanos;

/// The schema version this build writes and reads.
pub const CURRENT_SCHEMA_VERSION: i64 = 7;

/// Names of the entries of the `meta` table.
pub mod meta_keys {
    /// The schema version of the file.
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// When the file was created (unix nanoseconds).
    pub const CREATED_AT: &str = "created_at";
    /// When an agent last started on this file (unix nanoseconds).
    pub const AGENT_STARTED_AT: &str = "agent_started_at";
    /// The time of the last detect cycle that changed something (unix nanoseconds), as its
    /// clock said: it moves back with the clock (a detect more than the tolerance before it
    /// writes its own time even when nothing else changed; see `gc::detect`).
    pub const LAST_DETECT: &str = "last_detect";
    /// The time of the last detect, written at every detect even when nothing else changed:
    /// the last time the agent watched the node (unix nanoseconds; see `gc::WatchHistory`).
    pub const HEARTBEAT: &str = "heartbeat";
    /// When the agent adopted the runtime pin labels it found on containerd's names as its own
    /// (unix nanoseconds): once per file, at the first reconcile of schema 6 (the names
    /// carrying this database's instance, or no instance, then go into `runtime_labels`);
    /// never again, so a label forged later is never taken for the agent's own.
    pub const RUNTIME_LABELS_ADOPTED: &str = "runtime_labels_adopted";

    /// The names of the `i`-th unwatched stretch's start and end (unix nanoseconds), oldest
    /// first: `unwatched_<i>_from`, `unwatched_<i>_to` (see `gc::WatchHistory`).
    pub fn unwatched(i: usize) -> (String, String) {
        (format!("unwatched_{i}_from"), format!("unwatched_{i}_to"))
    }

    /// The unwatched nanoseconds within stretch `i` (less than its span once merged).
    pub fn unwatched_nanos(i: usize) -> String {
        format!("unwatched_{i}_nanos")
    }
}

/// One schema upgrade step, from `from` to `from + 1`. See `migrations/`.
pub(super) struct Migration {
    pub(super) from: i64,
    apply: fn(&WriteTransaction) -> Result<(), TxnError>,
}

/// Registered upgrade steps, in order (`migrations/000N_*.md`).
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        from: 1,
        apply: add_names_and_journal,
    },
    Migration {
        from: 2,
        apply: short_eviction_index,
    },
    Migration {
        from: 3,
        apply: add_pins,
    },
    Migration {
        from: 4,
        apply: add_history,
    },
    Migration {
        from: 5,
        apply: add_runtime_labels,
    },
    Migration {
        from: 6,
        apply: add_signals,
    },
];

/// Schema 1 → 2 (`migrations/0002_names_and_journal.md`): the `names` and `journal` tables,
/// empty. Records, the eviction index, backoff and meta keep their bytes.
fn add_names_and_journal(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(NAMES)?;
    txn.open_table(JOURNAL)?;
    Ok(())
}

/// Schema 2 → 3 (`migrations/0003_short_eviction_index.md`): the eviction index keyed by the
/// whole record key (`eviction`) is replaced by `eviction_prefix`, keyed by a 16-byte prefix
/// of it (see [`IndexKey`]), rebuilt from `images` in the same transaction. Every other
/// table keeps its bytes.
fn short_eviction_index(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.delete_table(EVICTION)?;
    let images = txn.open_table(IMAGES)?;
    let mut index = txn.open_table(EVICTION_PREFIX)?;
    for entry in images.iter()? {
        let (k, v) = entry?;
        let record = v.value().decode().map_err(TxnError::Decode)?;
        let row = IndexKey::of_encoded(k.value().bytes(), &record).encode();
        index.insert(Encoded::new(&row), ())?;
    }
    Ok(())
}

/// Schema 3 → 4 (`migrations/0004_pins.md`): the `pins` table, empty. Every other table
/// keeps its bytes.
fn add_pins(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(PINS)?;
    Ok(())
}

/// Schema 4 → 5 (`migrations/0005_use_and_pull_history.md`): the `uses`, `pulls` and
/// `warm` tables, empty. Every other table keeps its bytes.
fn add_history(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(USES)?;
    txn.open_table(PULLS)?;
    txn.open_table(WARM)?;
    Ok(())
}

/// Schema 5 → 6 (`migrations/0006_runtime_labels.md`): the `runtime_labels` table, empty.
/// Every other table keeps its bytes; `runtime_labels_adopted` is not set, so the agent's
/// first reconcile adopts the labels this instance wrote before the upgrade.
fn add_runtime_labels(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(RUNTIME_LABELS)?;
    Ok(())
}

/// Schema 6 → 7 (`migrations/0007_signals.md`): the `signals` table, empty. Every other table
/// keeps its bytes.
fn add_signals(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(SIGNALS)?;
    Ok(())
}

impl Store {
    /// Opens every table once, so that redb decodes every table definition while the open is
    /// still guarded against its panics; later opens read the same bytes.
    pub(super) fn read_table_definitions(&self) -> Result<(), StoreError> {
        let txn = self.begin_read()?;
        let _ = txn.list_tables().map_err(|e| self.redb_err(e))?.count();
        txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        txn.open_table(EVICTION_PREFIX)
            .map_err(|e| self.redb_err(e))?;
        txn.open_table(BACKOFF).map_err(|e| self.redb_err(e))?;
        txn.open_table(META).map_err(|e| self.redb_err(e))?;
        txn.open_table(NAMES).map_err(|e| self.redb_err(e))?;
        txn.open_table(JOURNAL).map_err(|e| self.redb_err(e))?;
        txn.open_table(PINS).map_err(|e| self.redb_err(e))?;
        txn.open_table(USES).map_err(|e| self.redb_err(e))?;
        txn.open_table(PULLS).map_err(|e| self.redb_err(e))?;
        txn.open_table(WARM).map_err(|e| self.redb_err(e))?;
        txn.open_table(RUNTIME_LABELS)
            .map_err(|e| self.redb_err(e))?;
        txn.open_table(SIGNALS).map_err(|e| self.redb_err(e))?;
        Ok(())
    }

    pub(super) fn has_meta_table(&self) -> Result<bool, StoreError> {
        let txn = self.begin_read()?;
        let found = txn
            .list_tables()
            .map_err(|e| self.redb_err(e))?
            .any(|t| t.name() == META.name());
        Ok(found)
    }

    pub(super) fn check_schema_read_only(&self) -> Result<(), StoreError> {
        if !self.has_meta_table()? {
            return Err(self.not_ours("it has no meta table"));
        }
        match self.meta(super::meta_keys::SCHEMA_VERSION)? {
            Some(CURRENT_SCHEMA_VERSION) => Ok(()),
            Some(v) if v > CURRENT_SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
                path: self.path.clone(),
                found: v,
                supported: CURRENT_SCHEMA_VERSION,
            }),
            Some(v) => Err(self.not_ours(&format!(
                "schema version {v} must be upgraded by opening it read-write first"
            ))),
            None => Err(self.not_ours("it has no schema version")),
        }
    }

    pub(super) fn not_ours(&self, detail: &str) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            detail: detail.to_owned(),
            source: None,
        }
    }

    /// Writes the tables and meta entries of a new file, or refuses a redb file that holds
    /// other tables.
    pub(super) fn initialize(&self, now: UnixNanos) -> Result<(), StoreError> {
        let handle = self.read_handle();
        let Handle::Write(db) = &*handle else {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        };
        let txn = db.begin_write().map_err(|e| self.redb_err(e))?;
        let foreign: Vec<String> = txn
            .list_tables()
            .map_err(|e| self.redb_err(e))?
            .map(|t| t.name().to_owned())
            .filter(|n| n != META.name())
            .collect();
        if !foreign.is_empty() {
            return Err(self.not_ours(&format!("it has tables {foreign:?} but no schema version")));
        }
        let init = || -> Result<(), TxnError> {
            txn.open_table(IMAGES)?;
            txn.open_table(EVICTION_PREFIX)?;
            txn.open_table(BACKOFF)?;
            txn.open_table(NAMES)?;
            txn.open_table(JOURNAL)?;
            txn.open_table(PINS)?;
            txn.open_table(USES)?;
            txn.open_table(PULLS)?;
            txn.open_table(WARM)?;
            txn.open_table(RUNTIME_LABELS)?;
            txn.open_table(SIGNALS)?;
            let mut meta = txn.open_table(META)?;
            put_meta(
                &mut meta,
                super::meta_keys::SCHEMA_VERSION,
                CURRENT_SCHEMA_VERSION,
            )?;
            put_meta(&mut meta, super::meta_keys::CREATED_AT, now.0)?;
            Ok(())
        };
        init().map_err(|e| self.wrap(e))?;
        self.commit(txn)
    }

    pub(super) fn migrate(&self, mut version: i64) -> Result<(), StoreError> {
        let handle = self.read_handle();
        let Handle::Write(db) = &*handle else {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        };
        while version < CURRENT_SCHEMA_VERSION {
            let step = MIGRATIONS
                .iter()
                .find(|m| m.from == version)
                .ok_or_else(|| {
                    self.not_ours(&format!("no upgrade from schema version {version}"))
                })?;
            self.forget_journal_keys();
            let txn = db.begin_write().map_err(|e| self.redb_err(e))?;
            (step.apply)(&txn).map_err(|e| self.wrap(e))?;
            {
                let mut meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
                put_meta(&mut meta, super::meta_keys::SCHEMA_VERSION, version + 1)
                    .map_err(|e| self.wrap(e))?;
            }
            self.commit(txn)?;
            self.forget_history_mirror();
            version += 1;
        }
        Ok(())
    }

    fn commit(&self, mut txn: WriteTransaction) -> Result<(), StoreError> {
        txn.set_durability(Durability::Immediate)
            .map_err(|e| self.redb_err(e))?;
        txn.set_quick_repair(self.options.quick_repair);
        txn.commit().map_err(|e| self.redb_err(e))?;
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
