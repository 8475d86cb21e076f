//! What each [`Op`] of a scenario stands for: the record key, names, backoff entry, pin, use
//! set, pull and warm rows its small numbers pick (few enough that operations collide), and
//! the [`Batch`] a list of ops becomes, the input the real store is given. The model
//! (`model.rs`) reads the same ops through the same helpers, so the store and the model
//! always see the same values.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{HANDLERS, META_NAMES, Model, Op};
use crate::model::{
    BackoffEntry, EvictionNote, ImageNames, ImagePin, PinKey, PullEntry, PullKey, PullOrigin,
    RecordKey, RemovalReason, StoredWarmState, UnixNanos, WarmRow,
};
use crate::store::{Batch, meta_keys};

pub(super) fn record_key(op: &Op) -> RecordKey {
    let (image, handler) = match op {
        Op::Upsert { image, handler, .. }
        | Op::MarkUsed { image, handler, .. }
        | Op::Remove { image, handler }
        | Op::Sight { image, handler, .. }
        | Op::RemoveUnlisted { image, handler, .. }
        | Op::RemoveUnlistedJournaled { image, handler, .. }
        | Op::Evict { image, handler, .. }
        | Op::SetNames { image, handler, .. }
        | Op::OpenUse { image, handler, .. }
        | Op::RecordPull { image, handler, .. } => (*image, *handler),
        _ => (0, 0),
    };
    RecordKey::new(
        format!("sha256:{:064x}", image % 16),
        HANDLERS[usize::from(handler) % HANDLERS.len()],
    )
}

/// GC's note of an eviction at `at` (unix nanoseconds) with `rank`.
pub(super) fn evict_note(at: i64, rank: u32) -> EvictionNote {
    EvictionNote {
        removed_at: UnixNanos(at),
        reason: RemovalReason::Space,
        rank,
        fs: None,
    }
}

/// One of a few name lists (0: none), so that names collide and change.
pub(super) fn names_of(n: u8) -> ImageNames {
    match n % 4 {
        0 => ImageNames::default(),
        1 => ImageNames {
            repo_tags: vec!["registry.example/app:1".to_owned()],
            repo_digests: Vec::new(),
        },
        2 => ImageNames {
            repo_tags: vec!["registry.example/app:2".to_owned()],
            repo_digests: vec!["registry.example/app@sha256:feed".to_owned()],
        },
        _ => ImageNames {
            repo_tags: Vec::new(),
            repo_digests: vec!["registry.example/app@sha256:beef".to_owned()],
        },
    }
}

pub(super) fn backoff_key(key: u8) -> String {
    format!("pod-{}_registry.example/app:{}", key % 4, key % 3)
}

pub(super) fn backoff_entry(op: &Op) -> BackoffEntry {
    match op {
        Op::PutBackoff {
            backoff_secs,
            last_update,
            message_len,
            ..
        } => BackoffEntry {
            backoff: Duration::from_secs(u64::from(*backoff_secs)),
            last_update: UnixNanos(*last_update),
            last_error: "x"
                .repeat(usize::from(*message_len).min(crate::store::codec::MAX_ERROR_BYTES)),
        },
        _ => BackoffEntry {
            backoff: Duration::ZERO,
            last_update: UnixNanos::NEVER,
            last_error: String::new(),
        },
    }
}

pub(super) fn pin_key(key: u8) -> PinKey {
    PinKey::new(
        format!("registry.example/app:{}", key % 3),
        HANDLERS[usize::from(key / 3) % HANDLERS.len()],
    )
}

/// The containerd name a runtime label op names (4 names, so operations collide).
pub(super) fn labelled_name(name: u8) -> String {
    format!("registry.example/labelled:{}", name % 4)
}

/// The row a [`Op::PutRuntimeLabel`] writes.
pub(super) fn runtime_label_of(op: &Op) -> crate::model::RuntimeLabel {
    let (written_at, value_len) = match op {
        Op::PutRuntimeLabel {
            written_at,
            value_len,
            ..
        } => (*written_at, *value_len),
        _ => (0, 0),
    };
    crate::model::RuntimeLabel {
        written_at: UnixNanos(written_at),
        value: "v".repeat(usize::from(value_len).min(crate::model::MAX_RUNTIME_LABEL_VALUE_BYTES)),
    }
}

pub(super) fn pin_of(op: &Op) -> ImagePin {
    match op {
        Op::PutPin {
            created_at,
            until,
            reason_len,
            ..
        } => ImagePin {
            created_at: UnixNanos(*created_at),
            until: UnixNanos(*until),
            reason: "r".repeat(usize::from(*reason_len).min(crate::model::MAX_PIN_REASON_BYTES)),
        },
        _ => ImagePin {
            created_at: UnixNanos::NEVER,
            until: UnixNanos::NEVER,
            reason: String::new(),
        },
    }
}

/// The images bit `i` of `mask` names: image `i` under handler `i % 3`, as `record_key`.
pub(super) fn uses_of(mask: u8) -> BTreeSet<RecordKey> {
    (0u8..8)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| {
            record_key(&Op::OpenUse {
                image: i,
                handler: i % 3,
                now: 0,
            })
        })
        .collect()
}

pub(super) fn pull_of(op: &Op) -> PullEntry {
    match op {
        Op::RecordPull {
            size,
            origin,
            name_len,
            at,
            ..
        } => PullEntry {
            size: *size,
            origin: PullOrigin::ALL[usize::from(*origin) % PullOrigin::ALL.len()],
            took: Duration::from_nanos(at.unsigned_abs() % 1_000_000_000_000),
            name: "n".repeat(usize::from(*name_len).min(crate::model::MAX_IMAGE_NAME_BYTES)),
        },
        _ => PullEntry {
            size: 0,
            origin: PullOrigin::Detected,
            took: Duration::ZERO,
            name: String::new(),
        },
    }
}

const WARM_STATES: [StoredWarmState; 6] = [
    StoredWarmState::Present,
    StoredWarmState::Pulling,
    StoredWarmState::Queued,
    StoredWarmState::DoesNotFit,
    StoredWarmState::Failed,
    StoredWarmState::Expired,
];

pub(super) fn warm_of(op: &Op) -> Vec<WarmRow> {
    let Op::ReplaceWarm { rows, state, since } = op else {
        return Vec::new();
    };
    (0..*rows % 6)
        .map(|i| WarmRow {
            image: format!("registry.example/warm:{i}"),
            runtime_handler: HANDLERS[usize::from(i) % HANDLERS.len()].to_owned(),
            state: WARM_STATES[usize::from(state.wrapping_add(i)) % WARM_STATES.len()],
            since: UnixNanos(*since),
            image_id: if i % 2 == 0 {
                format!("sha256:{:064x}", i)
            } else {
                String::new()
            },
        })
        .collect()
}

pub(super) fn meta_name(name: u8) -> &'static str {
    META_NAMES[usize::from(name) % META_NAMES.len()]
}

pub(super) fn to_batch(ops: &[Op]) -> Batch {
    let mut batch = Batch::new();
    for op in ops {
        match op {
            Op::Upsert { .. } => {
                let mut m = Model::default();
                m.apply(std::slice::from_ref(op));
                let (key, record) = m
                    .records
                    .into_iter()
                    .next()
                    .expect("an upsert into an empty model creates exactly one record");
                batch.upsert(key, record);
            }
            Op::MarkUsed { now, size, .. } => {
                batch.mark_used(record_key(op), UnixNanos(*now), *size)
            }
            Op::Remove { .. } => batch.remove(record_key(op)),
            Op::Sight {
                now,
                in_use,
                size,
                pinned,
                ..
            } => batch.sight(
                record_key(op),
                crate::model::Sighting {
                    now: UnixNanos(*now),
                    in_use: *in_use,
                    size: *size,
                    pinned: *pinned,
                    used_at: UnixNanos::NEVER,
                },
            ),
            Op::RemoveUnlisted { seen_last_used, .. } => {
                batch.remove_unlisted(record_key(op), UnixNanos(*seen_last_used))
            }
            Op::RemoveUnlistedJournaled {
                seen_last_used, at, ..
            } => batch.remove_unlisted_journaled(
                record_key(op),
                UnixNanos(*seen_last_used),
                UnixNanos(*at),
            ),
            Op::Evict { at, rank, .. } => batch.evict(record_key(op), evict_note(*at, *rank)),
            Op::SetNames { names, .. } => batch.set_names(record_key(op), names_of(*names)),
            Op::PutBackoff { key, .. } => batch.put_backoff(backoff_key(*key), backoff_entry(op)),
            Op::RemoveBackoff { key } => batch.remove_backoff(backoff_key(*key)),
            Op::SetMeta { name, value } => batch.set_meta(meta_name(*name), *value),
            Op::Stamp { value } => batch.stamp_if_changed(meta_keys::LAST_DETECT, *value),
            Op::PutPin { key, .. } => batch.put_pin(pin_key(*key), pin_of(op)),
            Op::RemovePin { key } => batch.remove_pin(pin_key(*key)),
            Op::PruneExpiredPins { now } => batch.prune_expired_pins(UnixNanos(*now)),
            Op::ObserveUses { now, in_use } => {
                batch.observe_uses(UnixNanos(*now), uses_of(*in_use).into_iter().collect())
            }
            Op::OpenUse { now, .. } => batch.open_use(record_key(op), UnixNanos(*now)),
            Op::RecordPull { at, .. } => batch.record_pull(
                PullKey {
                    at: UnixNanos(*at),
                    key: record_key(op),
                },
                pull_of(op),
            ),
            Op::ReplaceWarm { .. } => batch.replace_warm(warm_of(op)),
            Op::PutRuntimeLabel { name, .. } => {
                batch.put_runtime_label(labelled_name(*name), runtime_label_of(op))
            }
            Op::RemoveRuntimeLabel { name } => batch.remove_runtime_label(labelled_name(*name)),
        }
    }
    batch
}
