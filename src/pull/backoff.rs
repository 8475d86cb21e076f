//! Image-pull backoff with client-go's `flowcontrol.Backoff` semantics, as the kubelet uses it
//! (`NewBackOff(10s, 300s)`, no jitter), with the state kept in a [`BackoffStore`] rather than
//! in memory so that a restart keeps it.
//!
//! Semantics (client-go util/flowcontrol/backoff.go):
//! - `IsInBackOffSinceUpdate(key, now)`: an entry exists, has not expired, and
//!   `now - last_update < backoff`.
//! - `Next(key, now)`: a missing or expired entry restarts at the initial period; otherwise the
//!   period doubles, capped at max. `last_update = now`.
//! - An entry has expired when `now - last_update > 2 × max`; `GC` deletes expired entries. A
//!   successful pull does not reset an entry, it only runs `GC`.
//!
//! Invariants: pure functions of their arguments (time is passed in); the store is only a
//! place to keep [`BackoffEntry`] values and the success record, written in one transaction per
//! [`PullWrite`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::model::{BackoffEntry, ImageNames, RecordKey, UnixNanos};

/// Kubelet's image backoff: 10 s initial (`backOffPeriod`), 300 s max (`MaxContainerBackOff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The first backoff.
    pub initial: Duration,
    /// The longest backoff.
    pub max: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> BackoffPolicy {
        BackoffPolicy {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
        }
    }
}

impl BackoffPolicy {
    /// `hasExpired`: `now - last_update > 2 × max`.
    pub fn has_expired(&self, entry: &BackoffEntry, now: UnixNanos) -> bool {
        now.since(entry.last_update) > self.max.saturating_mul(2)
    }

    /// `IsInBackOffSinceUpdate`.
    pub fn is_in_backoff(&self, entry: Option<&BackoffEntry>, now: UnixNanos) -> bool {
        match entry {
            None => false,
            Some(e) if self.has_expired(e, now) => false,
            Some(e) => now.since(e.last_update) < e.backoff,
        }
    }

    /// `Next`: the entry after a failure at `now`, carrying `last_error`.
    pub fn next(
        &self,
        entry: Option<&BackoffEntry>,
        now: UnixNanos,
        last_error: String,
    ) -> BackoffEntry {
        let backoff = match entry {
            Some(e) if !self.has_expired(e, now) => e.backoff.saturating_mul(2).min(self.max),
            _ => self.initial,
        };
        BackoffEntry {
            backoff,
            last_update: now,
            last_error,
        }
    }

    /// The keys `GC` would delete at `now`.
    pub fn expired_keys<'a>(
        &self,
        entries: impl IntoIterator<Item = &'a (String, BackoffEntry)>,
        now: UnixNanos,
    ) -> Vec<String> {
        entries
            .into_iter()
            .filter(|(_, e)| self.has_expired(e, now))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// What one outcome of a pull writes, applied as one durable transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullWrite {
    /// Create the image's record (first_detected = last_used = now) or set its last_used.
    pub mark_used: Option<(RecordKey, UnixNanos, Option<u64>)>,
    /// The image's names (repo tags and digests) to write with the mark, so `inspect list`
    /// shows them before the next detect.
    pub names: Option<ImageNames>,
    /// The pull that made the mark, for the pull history (schema 5), in the mark's
    /// transaction.
    pub pulled: Option<PulledImage>,
    /// Backoff entries to write.
    pub put_backoff: Vec<(String, BackoffEntry)>,
    /// Backoff entries to delete.
    pub remove_backoff: Vec<String>,
}

/// A pull imagekeeper made, as the pull history records it with the pull's mark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PulledImage {
    /// Who pulled it.
    pub origin: crate::model::PullOrigin,
    /// From the pull's start (after the presence and backoff checks) to its end.
    pub took: std::time::Duration,
    /// The image name the pull was asked for.
    pub name: String,
}

/// A failure of the backoff store, its cause kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreFailure {
    /// The record store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The blocking task running the store call panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Where the pull path keeps backoff state and records pulled images. Blocking calls.
pub trait BackoffStore: Send + Sync + 'static {
    /// The backoff entry of `key`, if any.
    fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreFailure>;
    /// Every backoff entry.
    fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreFailure>;
    /// Applies `write` in one transaction.
    /// Applies `write` in one transaction; returns the journal entries it marked re-pulled
    /// (a mark that re-created a record the journal holds a removal of).
    fn apply(&self, write: &PullWrite) -> Result<Vec<crate::model::Repull>, StoreFailure>;
}

/// An in-memory [`BackoffStore`] for tests and for running without a database.
#[derive(Debug, Default)]
pub struct MemoryBackoffStore {
    inner: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    backoff: HashMap<String, BackoffEntry>,
    used: HashMap<RecordKey, (UnixNanos, UnixNanos, u64)>,
    names: HashMap<RecordKey, ImageNames>,
}

impl MemoryBackoffStore {
    /// An empty store.
    pub fn new() -> MemoryBackoffStore {
        MemoryBackoffStore::default()
    }

    /// (first_detected, last_used, size) of a record written by `mark_used`.
    pub fn record(&self, key: &RecordKey) -> Option<(UnixNanos, UnixNanos, u64)> {
        self.lock().used.get(key).copied()
    }

    /// The names written with a record's mark.
    pub fn names(&self, key: &RecordKey) -> Option<ImageNames> {
        self.lock().names.get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        // A panic while holding the lock leaves plain maps behind, still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl BackoffStore for MemoryBackoffStore {
    fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreFailure> {
        Ok(self.lock().backoff.get(key).cloned())
    }

    fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreFailure> {
        let mut v: Vec<_> = self
            .lock()
            .backoff
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v)
    }

    fn apply(&self, write: &PullWrite) -> Result<Vec<crate::model::Repull>, StoreFailure> {
        let mut s = self.lock();
        if let Some((key, now, size)) = &write.mark_used {
            let e = s.used.entry(key.clone()).or_insert((*now, *now, 0));
            e.1 = *now;
            if let Some(size) = size {
                e.2 = *size;
            }
            if let Some(names) = &write.names {
                s.names.insert(key.clone(), names.clone());
            }
        }
        for (k, e) in &write.put_backoff {
            s.backoff.insert(k.clone(), e.clone());
        }
        for k in &write.remove_backoff {
            s.backoff.remove(k);
        }
        Ok(Vec::new())
    }
}

impl<T: BackoffStore> BackoffStore for std::sync::Arc<T> {
    fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreFailure> {
        (**self).backoff(key)
    }
    fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreFailure> {
        (**self).backoff_entries()
    }
    fn apply(&self, write: &PullWrite) -> Result<Vec<crate::model::Repull>, StoreFailure> {
        (**self).apply(write)
    }
}

/// The record store: a [`PullWrite`] is one [`Batch`](crate::store::Batch), so a failure's
/// backoff and a success's record each commit in one durable transaction.
impl BackoffStore for crate::store::Store {
    fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreFailure> {
        Ok(crate::store::Store::backoff(self, key)?)
    }

    fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreFailure> {
        Ok(crate::store::Store::backoff_entries(self)?)
    }

    fn apply(&self, write: &PullWrite) -> Result<Vec<crate::model::Repull>, StoreFailure> {
        let mut batch = crate::store::Batch::new();
        if let Some((key, now, size)) = &write.mark_used {
            batch.mark_used(key.clone(), *now, *size);
            if let Some(names) = &write.names {
                batch.set_names(key.clone(), names.clone());
            }
            if let Some(pulled) = &write.pulled {
                batch.record_pull(
                    crate::model::PullKey {
                        at: *now,
                        key: key.clone(),
                    },
                    crate::model::PullEntry {
                        size: size.unwrap_or(0),
                        origin: pulled.origin,
                        took: pulled.took,
                        name: pulled.name.chars().take(4096).collect::<String>(),
                    },
                );
            }
        }
        for (k, e) in &write.put_backoff {
            batch.put_backoff(k.clone(), e.clone());
        }
        for k in &write.remove_backoff {
            batch.remove_backoff(k.clone());
        }
        Ok(crate::store::Store::apply_reporting(self, &batch)?.repulls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> UnixNanos {
        UnixNanos::from_secs(s)
    }

    fn policy() -> BackoffPolicy {
        BackoffPolicy::default()
    }

    #[test]
    fn next_doubles_from_initial_and_caps_at_max() {
        let p = policy();
        let mut entry: Option<BackoffEntry> = None;
        let mut got = Vec::new();
        for i in 0..8 {
            let e = p.next(entry.as_ref(), secs(i), "e".into());
            got.push(e.backoff.as_secs());
            entry = Some(e);
        }
        assert_eq!(got, vec![10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn in_backoff_until_the_period_has_elapsed_since_the_last_update() {
        let p = policy();
        let e = p.next(None, secs(100), "e".into());
        // (seconds after the failure, in backoff?)
        for (after, want) in [(0, true), (9, true), (10, false), (11, false)] {
            assert_eq!(
                p.is_in_backoff(Some(&e), secs(100 + after)),
                want,
                "after {after}s"
            );
        }
        assert!(!p.is_in_backoff(None, secs(100)));
    }

    #[test]
    fn entry_expires_two_max_after_its_last_update_and_restarts_at_initial() {
        let p = policy();
        let e = p.next(None, secs(0), "e".into());
        let e = p.next(Some(&e), secs(1), "e".into());
        assert_eq!(e.backoff, Duration::from_secs(20));
        assert!(!p.has_expired(&e, secs(601)));
        assert!(p.has_expired(&e, secs(602)));
        assert_eq!(
            p.next(Some(&e), secs(601), "e".into()).backoff,
            Duration::from_secs(40)
        );
        assert_eq!(
            p.next(Some(&e), secs(602), "e".into()).backoff,
            Duration::from_secs(10)
        );
    }

    #[test]
    fn gc_selects_only_expired_entries() {
        let p = policy();
        let entries = vec![
            ("old".to_owned(), p.next(None, secs(0), "e".into())),
            ("new".to_owned(), p.next(None, secs(500), "e".into())),
        ];
        assert_eq!(p.expired_keys(&entries, secs(601)), vec!["old".to_owned()]);
    }
}
