//! Every stored key and value layout from arbitrary bytes: `decode` returns an error or the one
//! value whose `encode()` is exactly the input; it never panics.
#![no_main]

use imagekeeper::model::{BackoffEntry, ImageNames, ImageRecord, JournalEntry, RecordKey};
use imagekeeper::store::{BackoffKey, Codec, EvictionKey, JournalKey, MetaKey, MetaValue};
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
    match which % 10 {
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
        _ => round_trip::<ImageNames>(bytes),
    }
});
