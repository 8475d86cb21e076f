//! `Store::check`: verifies the store's invariant (every record has exactly one matching
//! eviction-index entry and the index holds nothing else), that every stored byte decodes,
//! that the schema version is present, and redb's own integrity check. It reports every
//! violation it finds rather than stopping at the first.

use std::collections::BTreeSet;
use std::fmt;

use redb::{ReadableTable, ReadableTableMetadata};

use super::codec::{Codec, EvictionKey};
use super::tables::{BACKOFF, EVICTION, IMAGES, META};
use super::{Handle, Store, StoreError, meta_keys};

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Violation {
    /// A stored key or value does not decode.
    Undecodable { table: &'static str, detail: String },
    /// A record has no eviction-index entry matching its fields.
    MissingIndexEntry { key: String },
    /// An index entry matches no record.
    StrayIndexEntry { entry: String },
    /// The meta table has no schema version.
    MissingSchemaVersion,
    /// redb's integrity check failed or repaired something.
    Integrity { detail: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Undecodable { table, detail } => {
                write!(f, "table {table}: undecodable entry: {detail}")
            }
            Violation::MissingIndexEntry { key } => {
                write!(f, "record {key} has no matching eviction-index entry")
            }
            Violation::StrayIndexEntry { entry } => {
                write!(f, "eviction-index entry {entry} matches no record")
            }
            Violation::MissingSchemaVersion => write!(f, "meta table has no schema version"),
            Violation::Integrity { detail } => write!(f, "redb integrity: {detail}"),
        }
    }
}

impl Store {
    /// Checks the store's invariants (not redb's page integrity); works on read-only handles.
    pub fn check_invariants(&self) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let txn = self.begin_read()?;
        let images = txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        let index = txn.open_table(EVICTION).map_err(|e| self.redb_err(e))?;
        let backoff = txn.open_table(BACKOFF).map_err(|e| self.redb_err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;

        // What the index must hold, as encoded keys.
        let mut expected: BTreeSet<Vec<u8>> = BTreeSet::new();
        for entry in images.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(key), Ok(record)) => {
                    expected.insert(EvictionKey::of(&key, &record).encode());
                }
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "images",
                    detail: e.to_string(),
                }),
            }
        }
        for entry in index.iter().map_err(|e| self.redb_err(e))? {
            let (k, _) = entry.map_err(|e| self.redb_err(e))?;
            match k.value().decode() {
                Ok(entry) => {
                    if !expected.remove(&entry.encode()) {
                        violations.push(Violation::StrayIndexEntry {
                            entry: format!(
                                "({}, {}, {})",
                                entry.last_used.0, entry.first_detected.0, entry.key
                            ),
                        });
                    }
                }
                Err(e) => violations.push(Violation::Undecodable {
                    table: "eviction",
                    detail: e.to_string(),
                }),
            }
        }
        for missing in expected {
            let key = EvictionKey::decode(&missing)
                .map(|e| e.key.to_string())
                .unwrap_or_else(|e| e.to_string());
            violations.push(Violation::MissingIndexEntry { key });
        }
        for entry in backoff.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(Violation::Undecodable {
                    table: "backoff",
                    detail: e.to_string(),
                });
            }
        }
        let mut has_version = false;
        for entry in meta.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(name), Ok(_)) => has_version |= name.0 == meta_keys::SCHEMA_VERSION,
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "meta",
                    detail: e.to_string(),
                }),
            }
        }
        if !has_version {
            violations.push(Violation::MissingSchemaVersion);
        }
        let _ = images.len();
        Ok(violations)
    }

    /// Checks the store's invariants and, on a read-write handle, redb's integrity.
    pub fn check(&mut self) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let handle = self.handle.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Handle::Write(db) = handle {
            match db.check_integrity() {
                Ok(true) => {}
                Ok(false) => violations.push(Violation::Integrity {
                    detail: "the file was damaged and has been repaired".to_owned(),
                }),
                Err(e) => violations.push(Violation::Integrity {
                    detail: e.to_string(),
                }),
            }
        }
        violations.extend(self.check_invariants()?);
        Ok(violations)
    }
}
