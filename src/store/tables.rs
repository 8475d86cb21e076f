//! redb table definitions and the adapter from our [`Codec`] layouts to redb's `Key`/`Value`
//! traits. redb's `from_bytes` cannot fail, so tables hand out the raw bytes ([`Encoded`]) and
//! every read decodes them through [`Encoded::decode`], which can.

use std::cmp::Ordering;
use std::fmt;
use std::marker::PhantomData;

use redb::{Key, TableDefinition, TypeName, Value};

use super::codec::{
    BackoffKey, Codec, DecodeError, EvictionKey, IndexKey, JournalKey, LabelledName, MetaKey,
    MetaValue, OrderedCodec, SignalKey, WarmPosition,
};
use crate::model::{
    BackoffEntry, ImageNames, ImagePin, ImageRecord, JournalEntry, PinKey, PullEntry, PullKey,
    RecordKey, RecordedSignal, RuntimeLabel, UseInterval, UseKey, WarmRow,
};

/// Image records: RecordKey → ImageRecord.
pub(super) const IMAGES: TableDefinition<Stored<RecordKey>, Stored<ImageRecord>> =
    TableDefinition::new("images");
/// Schemas 1 and 2's eviction index: (last_used, first_detected, RecordKey) → (). Schema 3
/// drops it for [`EVICTION_PREFIX`] (`migrations/0003_short_eviction_index.md`).
pub(super) const EVICTION: TableDefinition<Stored<EvictionKey>, ()> =
    TableDefinition::new("eviction");
/// Schema 3's eviction index: (last_used, first_detected, 16-byte key prefix) → (); see
/// [`IndexKey`].
pub(super) const EVICTION_PREFIX: TableDefinition<Stored<IndexKey>, ()> =
    TableDefinition::new("eviction_prefix");
/// Image-pull backoff: `<pod uid>_<image>` → BackoffEntry.
pub(super) const BACKOFF: TableDefinition<Stored<BackoffKey>, Stored<BackoffEntry>> =
    TableDefinition::new("backoff");
/// Named integers: schema version, creation time, markers.
pub(super) const META: TableDefinition<Stored<MetaKey>, Stored<MetaValue>> =
    TableDefinition::new("meta");

/// Schema 2: each image's names as the runtime last listed them: RecordKey → ImageNames. A
/// row lives while its record or a journal entry of its key does.
pub(super) const NAMES: TableDefinition<Stored<RecordKey>, Stored<ImageNames>> =
    TableDefinition::new("names");
/// Schema 2: the eviction journal, (removed_at, RecordKey) → JournalEntry.
pub(super) const JOURNAL: TableDefinition<Stored<JournalKey>, Stored<JournalEntry>> =
    TableDefinition::new("journal");

/// Schema 4: the operators' pins, PinKey (image name, runtime handler) → ImagePin
/// (`migrations/0004_pins.md`).
pub(super) const PINS: TableDefinition<Stored<PinKey>, Stored<ImagePin>> =
    TableDefinition::new("pins");

/// Schema 5: each image's use intervals, (closed, started_at, RecordKey) → last_seen
/// (`migrations/0005_use_and_pull_history.md`).
pub(super) const USES: TableDefinition<Stored<UseKey>, Stored<UseInterval>> =
    TableDefinition::new("uses");
/// Schema 5: the pull history, (at, RecordKey) → PullEntry.
pub(super) const PULLS: TableDefinition<Stored<PullKey>, Stored<PullEntry>> =
    TableDefinition::new("pulls");
/// Schema 5: the warm set's state at the agent's last warm cycle, position → WarmRow.
pub(super) const WARM: TableDefinition<Stored<WarmPosition>, Stored<WarmRow>> =
    TableDefinition::new("warm");

/// Schema 6: what the agent labelled in containerd, image name → RuntimeLabel
/// (`migrations/0006_runtime_labels.md`).
pub(super) const RUNTIME_LABELS: TableDefinition<Stored<LabelledName>, Stored<RuntimeLabel>> =
    TableDefinition::new("runtime_labels");

/// Schema 7: the changes the agent saw in the cluster's declarations, (at, seq) →
/// RecordedSignal (`migrations/0007_signals.md`).
pub(super) const SIGNALS: TableDefinition<Stored<SignalKey>, Stored<RecordedSignal>> =
    TableDefinition::new("signals");

/// A redb column type whose bytes are the [`Codec`] layout of `T`.
pub(super) struct Stored<T>(PhantomData<T>);

impl<T> fmt::Debug for Stored<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stored")
    }
}

/// The undecoded bytes of a stored `T`.
pub(super) struct Encoded<'a, T> {
    bytes: &'a [u8],
    kind: PhantomData<T>,
}

impl<'a, T: Codec> Encoded<'a, T> {
    pub(super) fn new(bytes: &'a [u8]) -> Encoded<'a, T> {
        Encoded {
            bytes,
            kind: PhantomData,
        }
    }

    pub(super) fn decode(&self) -> Result<T, DecodeError> {
        T::decode(self.bytes)
    }

    /// The stored bytes, undecoded.
    pub(super) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<T> fmt::Debug for Encoded<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({:02x?})", self.bytes)
    }
}

impl<T: Codec + 'static> Value for Stored<T> {
    type SelfType<'a>
        = Encoded<'a, T>
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;

    fn fixed_width() -> Option<usize> {
        T::FIXED_WIDTH
    }

    fn from_bytes<'a>(data: &'a [u8]) -> Encoded<'a, T>
    where
        Self: 'a,
    {
        Encoded::new(data)
    }

    fn as_bytes<'a, 'b: 'a>(value: &'a Encoded<'b, T>) -> &'a [u8]
    where
        Self: 'b,
    {
        value.bytes
    }

    fn type_name() -> TypeName {
        TypeName::new(T::TYPE_NAME)
    }
}

impl<T: OrderedCodec + 'static> Key for Stored<T> {
    fn compare(data1: &[u8], data2: &[u8]) -> Ordering {
        data1.cmp(data2)
    }
}
