//! Every stored key and value layout from arbitrary bytes: `decode` returns an error or the one
//! value whose `encode()` is exactly the input; it never panics.
#![no_main]

use imagekeeper::model::{
    BackoffEntry, ImageNames, ImagePin, ImageRecord, JournalEntry, PinKey, PullEntry, PullKey,
    RecordKey, RecordedSignal, RuntimeLabel, UseInterval, UseKey, WarmRow,
};
use imagekeeper::store::{
    BackoffKey, Codec, EvictionKey, IndexKey, JournalKey, LabelledName, MetaKey, MetaValue,
    SignalKey, WarmPosition,
};
use libfuzzer_sys::fuzz_target;

fn round_trip<T: Codec>(bytes: &[u8]) {
    if let Ok(value) = T::decode(bytes) {
        assert_eq!(
            value.encode(),
            bytes,
            "{} decoded to {value:?}, which encodes differently",
            T::TYPE_NAME
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 23 {
        0 => round_trip::<RecordKey>(bytes),
        1 => round_trip::<ImageRecord>(bytes),
        2 => round_trip::<EvictionKey>(bytes),
        3 => round_trip::<BackoffKey>(bytes),
        4 => round_trip::<MetaKey>(bytes),
        5 => round_trip::<MetaValue>(bytes),
        6 => round_trip::<BackoffEntry>(bytes),
        // Schema 2.
        7 => round_trip::<JournalKey>(bytes),
        8 => round_trip::<JournalEntry>(bytes),
        9 => round_trip::<ImageNames>(bytes),
        // Schema 3's name index.
        10 => round_trip::<IndexKey>(bytes),
        // Schema 4's pins.
        11 => round_trip::<PinKey>(bytes),
        12 => round_trip::<ImagePin>(bytes),
        // Schema 5's histories.
        13 => round_trip::<UseKey>(bytes),
        14 => round_trip::<UseInterval>(bytes),
        15 => round_trip::<PullKey>(bytes),
        16 => round_trip::<PullEntry>(bytes),
        17 => round_trip::<WarmPosition>(bytes),
        18 => round_trip::<WarmRow>(bytes),
        // Schema 6's runtime labels.
        19 => round_trip::<LabelledName>(bytes),
        20 => round_trip::<RuntimeLabel>(bytes),
        // Schema 7's signals.
        21 => round_trip::<SignalKey>(bytes),
        _ => round_trip::<RecordedSignal>(bytes),
    }
});
