use proptest::prelude::*;

use super::*;
use crate::model::{ImagePin, MAX_PIN_REASON_BYTES, PinKey};

fn key(id: &str, handler: &str) -> RecordKey {
    RecordKey::new(id, handler)
}

#[test]
fn golden_bytes_of_every_layout() {
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        (
            "record key",
            key("sha256:ab", "").encode(),
            vec![1, b's', b'h', b'a', b'2', b'5', b'6', b':', b'a', b'b', 0],
        ),
        (
            "record key with handler",
            key("x", "gpu").encode(),
            vec![1, b'x', 0, b'g', b'p', b'u'],
        ),
        (
            "image record",
            ImageRecord {
                first_detected: UnixNanos(1),
                last_used: UnixNanos(0x0102),
                size: 0x0a0b0c,
                pinned: true,
            }
            .encode(),
            vec![
                1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0x0a, 0x0b, 0x0c,
                1,
            ],
        ),
        (
            "eviction key",
            EvictionKey {
                last_used: UnixNanos(0),
                first_detected: UnixNanos(-1),
                key: key("x", ""),
            }
            .encode(),
            vec![
                1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1,
                b'x', 0,
            ],
        ),
        (
            "backoff entry",
            BackoffEntry {
                backoff: Duration::from_nanos(10),
                last_update: UnixNanos(2),
                last_error: "no".into(),
            }
            .encode(),
            vec![
                1, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2, b'n', b'o',
            ],
        ),
        (
            "backoff key",
            BackoffKey("u_i".into()).encode(),
            vec![1, b'u', b'_', b'i'],
        ),
        ("meta key", MetaKey("v".into()).encode(), vec![1, b'v']),
        (
            "meta value",
            MetaValue(258).encode(),
            vec![1, 0, 0, 0, 0, 0, 0, 1, 2],
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(
            got, want,
            "layout of {name} changed: that is a schema change"
        );
    }
}

/// Image record bytes that do not decode: each case's name, what decoding gives and the
/// error it must be.
fn bad_image_records() -> Vec<(&'static str, Result<ImageRecord, DecodeError>, DecodeError)> {
    vec![
        (
            "empty",
            ImageRecord::decode(&[]),
            DecodeError::Empty {
                what: "image record",
            },
        ),
        (
            "future version",
            ImageRecord::decode(&[2; 26]),
            DecodeError::UnknownVersion {
                what: "image record",
                version: 2,
            },
        ),
        (
            "short",
            ImageRecord::decode(&[1, 0, 0]),
            DecodeError::Length {
                what: "image record",
                expected: 26,
                found: 3,
            },
        ),
        (
            "bad flags",
            ImageRecord::decode(&{
                let mut b = [0u8; 26];
                b[0] = 1;
                b[25] = 2;
                b
            }),
            DecodeError::Invalid {
                what: "image record",
                field: "flags",
            },
        ),
    ]
}

/// Record key bytes that do not decode, with the error each must give.
fn bad_record_keys() -> Vec<(&'static str, Vec<u8>, DecodeError)> {
    // A record key is the version, the id, a 0 byte and the runtime handler.
    let too_long: Vec<u8> = std::iter::once(1)
        .chain(std::iter::repeat_n(b'a', MAX_ID_BYTES + 1))
        .chain([0])
        .collect();
    vec![
        (
            "empty id",
            vec![1, 0, b'h'],
            DecodeError::Invalid {
                what: "record key",
                field: "image id",
            },
        ),
        (
            "id longer than the limit",
            too_long,
            DecodeError::Invalid {
                what: "record key",
                field: "image id",
            },
        ),
        (
            "no terminator after the id",
            vec![1, b'a', b'b'],
            DecodeError::Invalid {
                what: "record key",
                field: "image id terminator",
            },
        ),
        (
            "id not UTF-8",
            vec![1, 0xff, 0],
            DecodeError::Utf8 {
                what: "record key",
                field: "image id",
            },
        ),
        (
            "handler not UTF-8",
            vec![1, b'a', 0, 0xff],
            DecodeError::Utf8 {
                what: "record key",
                field: "runtime handler",
            },
        ),
    ]
}

#[test]
fn bad_bytes_give_errors_naming_the_problem() {
    for (name, got, want) in bad_image_records() {
        assert_eq!(got, Err(want), "case {name}");
    }
    for (name, bytes, want) in bad_record_keys() {
        assert_eq!(RecordKey::decode(&bytes), Err(want), "case {name}");
    }
    assert_eq!(
        BackoffEntry::decode(&[1; 20]),
        Err(DecodeError::Length {
            what: "backoff entry",
            expected: 21,
            found: 20
        }),
        "short backoff entry"
    );
}

#[test]
fn long_error_messages_are_cut_on_a_char_boundary() {
    let entry = BackoffEntry {
        backoff: Duration::from_secs(10),
        last_update: UnixNanos(1),
        last_error: "é".repeat(MAX_ERROR_BYTES),
    };
    let back = BackoffEntry::decode(&entry.encode()).expect("encoded entry decodes");
    assert!(back.last_error.len() <= MAX_ERROR_BYTES);
    assert!(entry.last_error.starts_with(&back.last_error));
}

/// decode(bytes) is either an error or the one value that encodes to exactly `bytes`.
fn canonical<T: Codec>(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(value) = T::decode(bytes) {
        prop_assert_eq!(value.encode(), bytes.to_vec(), "{:?}", value);
    }
    Ok(())
}

fn arb_key() -> impl Strategy<Value = RecordKey> {
    ("[a-z0-9:]{1,20}", "[a-z]{0,5}").prop_map(|(id, h)| RecordKey::new(id, h))
}

fn arb_time() -> impl Strategy<Value = UnixNanos> {
    prop_oneof![Just(UnixNanos(0)), any::<i64>().prop_map(UnixNanos)]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_decode_to_a_wrong_value(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        canonical::<RecordKey>(&bytes)?;
        canonical::<ImageRecord>(&bytes)?;
        canonical::<EvictionKey>(&bytes)?;
        canonical::<BackoffEntry>(&bytes)?;
        canonical::<BackoffKey>(&bytes)?;
        canonical::<MetaKey>(&bytes)?;
        canonical::<MetaValue>(&bytes)?;
    }

    #[test]
    fn values_round_trip(k in arb_key(), fd in arb_time(), lu in arb_time(), size in any::<u64>(), pinned in any::<bool>()) {
        let record = ImageRecord { first_detected: fd, last_used: lu, size, pinned };
        prop_assert_eq!(ImageRecord::decode(&record.encode()), Ok(record));
        prop_assert_eq!(RecordKey::decode(&k.encode()), Ok(k.clone()));
        let ek = EvictionKey::of(&k, &record);
        prop_assert_eq!(EvictionKey::decode(&ek.encode()), Ok(ek));
    }

    #[test]
    fn eviction_key_bytes_sort_like_the_values(a in (arb_time(), arb_time(), arb_key()), b in (arb_time(), arb_time(), arb_key())) {
        let ka = EvictionKey { last_used: a.0, first_detected: a.1, key: a.2 };
        let kb = EvictionKey { last_used: b.0, first_detected: b.1, key: b.2 };
        let by_value = (ka.last_used, ka.first_detected, &ka.key).cmp(&(kb.last_used, kb.first_detected, &kb.key));
        prop_assert_eq!(ka.encode().cmp(&kb.encode()), by_value);
    }
}

fn arb_journal_entry() -> impl Strategy<Value = crate::model::JournalEntry> {
    use crate::model::{FsUsage, JournalEntry, RemovalReason, Remover};
    (
        (any::<u64>(), arb_time(), arb_time()),
        prop::option::of(prop::sample::select(RemovalReason::ALL.to_vec())),
        prop::option::of(any::<u32>()),
        prop::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
        any::<bool>(),
        prop::option::of(arb_time()),
    )
        .prop_map(
            |((size, fd, lu), reason, rank, fs, external, repulled_at)| JournalEntry {
                size,
                first_detected: fd,
                last_used: lu,
                reason,
                rank,
                fs: fs.map(|(capacity, used_before, target_used)| FsUsage {
                    capacity,
                    used_before,
                    target_used,
                }),
                remover: if external {
                    Remover::External
                } else {
                    Remover::Imagekeeper
                },
                repulled_at,
            },
        )
}

/// Schema 2's layouts: golden bytes of a journal key and a names value.
#[test]
fn golden_bytes_of_the_schema_2_layouts() {
    use crate::model::ImageNames;
    let jk = JournalKey {
        removed_at: UnixNanos(1),
        key: key("a", "h"),
    };
    assert_eq!(
        jk.encode(),
        [1, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, b'a', 0, b'h']
    );
    let names = ImageNames {
        repo_tags: vec!["b:1".into()],
        repo_digests: vec![],
    };
    assert_eq!(
        names.encode(),
        [1, 0, 0, 0, 1, 0, 0, 0, 3, b'b', b':', b'1', 0, 0, 0, 0]
    );
    // A name longer than the input is an error, not a panic.
    assert_eq!(
        ImageNames::decode(&[1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]),
        Err(DecodeError::Length {
            what: "image names",
            expected: 9,
            found: 0
        })
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_decode_to_a_wrong_schema_2_value(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        canonical::<JournalKey>(&bytes)?;
        canonical::<crate::model::JournalEntry>(&bytes)?;
        canonical::<crate::model::ImageNames>(&bytes)?;
    }

    #[test]
    fn schema_2_values_round_trip(
        k in arb_key(),
        at in arb_time(),
        entry in arb_journal_entry(),
        tags in proptest::collection::vec("[a-z:./@0-9]{0,12}", 0..4),
        digests in proptest::collection::vec("[a-z:./@0-9]{0,12}", 0..4),
    ) {
        let jk = JournalKey { removed_at: at, key: k };
        prop_assert_eq!(JournalKey::decode(&jk.encode()), Ok(jk));
        prop_assert_eq!(crate::model::JournalEntry::decode(&entry.encode()), Ok(entry));
        let names = crate::model::ImageNames { repo_tags: tags, repo_digests: digests };
        prop_assert_eq!(crate::model::ImageNames::decode(&names.encode()), Ok(names));
    }

    #[test]
    fn journal_key_bytes_sort_like_the_values(a in (arb_time(), arb_key()), b in (arb_time(), arb_key())) {
        let ka = JournalKey { removed_at: a.0, key: a.1 };
        let kb = JournalKey { removed_at: b.0, key: b.1 };
        prop_assert_eq!(ka.encode().cmp(&kb.encode()), ka.cmp(&kb));
    }
}

#[test]
fn golden_bytes_of_the_schema_4_layouts() {
    let key = PinKey::new("nginx:1", "gpu");
    assert_eq!(key.encode(), b"\x01nginx:1\x00gpu".to_vec());
    let pin = ImagePin {
        created_at: UnixNanos(1),
        until: UnixNanos(2),
        reason: "ai".into(),
    };
    let mut want = vec![1u8];
    want.extend_from_slice(&1i64.to_be_bytes());
    want.extend_from_slice(&2i64.to_be_bytes());
    want.extend_from_slice(&2u32.to_be_bytes());
    want.extend_from_slice(b"ai");
    assert_eq!(pin.encode(), want);
    // An empty name, a missing terminator and an oversized reason are refused.
    assert!(PinKey::decode(b"\x01\x00gpu").is_err());
    assert!(PinKey::decode(b"\x01nginx").is_err());
    let mut long = vec![1u8];
    long.extend_from_slice(&[0; 16]);
    long.extend_from_slice(
        &u32::try_from(MAX_PIN_REASON_BYTES + 1)
            .expect("small")
            .to_be_bytes(),
    );
    long.extend(std::iter::repeat_n(b'a', MAX_PIN_REASON_BYTES + 1));
    assert_eq!(
        ImagePin::decode(&long),
        Err(DecodeError::Invalid {
            what: "pin",
            field: "reason length"
        })
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_decode_to_a_wrong_schema_4_value(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        canonical::<PinKey>(&bytes)?;
        canonical::<ImagePin>(&bytes)?;
    }

    #[test]
    fn schema_4_values_round_trip(
        name in "[a-z0-9:./@]{1,20}",
        handler in "[a-z]{0,5}",
        created in arb_time(),
        until in arb_time(),
        reason in "[ -~]{0,40}",
    ) {
        let key = PinKey::new(name, handler);
        prop_assert_eq!(PinKey::decode(&key.encode()), Ok(key));
        let pin = ImagePin { created_at: created, until, reason };
        prop_assert_eq!(ImagePin::decode(&pin.encode()), Ok(pin));
    }

    #[test]
    fn pin_key_bytes_sort_like_the_values(a in ("[a-z:]{1,8}", "[a-z]{0,3}"), b in ("[a-z:]{1,8}", "[a-z]{0,3}")) {
        let ka = PinKey::new(a.0, a.1);
        let kb = PinKey::new(b.0, b.1);
        prop_assert_eq!(ka.encode().cmp(&kb.encode()), ka.cmp(&kb));
    }
}

/// Listed names near `names` (the same, one changed, one added or dropped, a tag moved to the
/// digests), so the in-place comparison meets equal and unequal lists at every position.
fn arb_listed_near(
    tags: Vec<String>,
    digests: Vec<String>,
) -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    (0u8..6, any::<prop::sample::Index>(), "[a-z:]{0,4}").prop_map(move |(how, at, name)| {
        let (mut t, mut d) = (tags.clone(), digests.clone());
        match how {
            0 | 1 => {}
            2 if !t.is_empty() => {
                let i = at.index(t.len());
                t[i] = name;
            }
            3 => {
                let i = at.index(d.len() + 1);
                d.insert(i, name);
            }
            4 if !t.is_empty() => {
                let i = at.index(t.len());
                t.remove(i);
            }
            5 if !t.is_empty() => {
                let last = t.len() - 1;
                d.insert(0, t.remove(last));
            }
            _ => t.push(name),
        }
        (t, d)
    })
}

proptest! {
    /// Detect's names walk compares the stored bytes in place: its answer is the decoded
    /// comparison's, and bytes decode refuses are the same error, whether the listed names
    /// are equal or not (the stored bytes as encoded, with one byte changed, or cut).
    #[test]
    fn names_compared_in_place_answer_as_the_decoded_names_do(
        (tags, digests, listed_tags, listed_digests) in (
            proptest::collection::vec("[a-z:./@0-9]{0,6}", 0..4),
            proptest::collection::vec("[a-z:./@0-9]{0,6}", 0..3),
        ).prop_flat_map(|(t, d)| (Just(t.clone()), Just(d.clone()), arb_listed_near(t, d)).prop_map(|(t, d, (lt, ld))| (t, d, lt, ld))),
        damage in (0u8..4, any::<prop::sample::Index>(), any::<u8>()),
    ) {
        let names = crate::model::ImageNames { repo_tags: tags, repo_digests: digests };
        let mut bytes = names.encode();
        match damage.0 {
            0 | 1 => {}
            2 => { let at = damage.1.index(bytes.len()); bytes[at] = damage.2; }
            _ => bytes.truncate(damage.1.index(bytes.len() + 1)),
        }
        let want = crate::model::ImageNames::decode(&bytes)
            .map(|n| n.repo_tags == listed_tags && n.repo_digests == listed_digests);
        let got = names_equal_encoded(
            &bytes,
            listed_tags.iter().map(String::as_str),
            listed_digests.iter().map(String::as_str),
        );
        prop_assert_eq!(got, want);
    }

    /// The names walk reads stored keys borrowed: the same parts and the same errors as the
    /// owned decode, for any bytes.
    #[test]
    fn record_key_parts_is_the_decoded_key_borrowed(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        let got = record_key_parts(&bytes).map(|(id, handler)| RecordKey::new(id, handler));
        prop_assert_eq!(got, RecordKey::decode(&bytes));
    }
}
