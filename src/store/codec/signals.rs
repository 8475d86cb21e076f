//! The layouts of schema 7's `signals` table: the key ([`SignalKey`]: when the agent saw the
//! change, then a sequence number among the changes of that instant) and the value (the
//! [`RecordedSignal`]). As every layout of the codec (see the parent module): a version byte
//! first, canonical, decoded only through the checked [`Reader`], so arbitrary bytes give an
//! error or the one value that encodes to exactly them.

use super::{Codec, DecodeError, LAYOUT_V1, OrderedCodec, Reader, from_ordered_i64, ordered_i64};
use crate::model::{MAX_IMAGE_NAME_BYTES, MAX_SIGNAL_ENTRY_IMAGES, RecordedSignal, UnixNanos};

/// The key of a `signals` row: `at` (unix nanoseconds), then `seq` among the rows of the same
/// `at`; byte order is (at, seq) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SignalKey {
    /// When the agent saw the change.
    pub at: UnixNanos,
    /// The row's place among those of the same `at`, from 0.
    pub seq: u32,
}

const KEY_WIDTH: usize = 1 + 8 + 4;

// SignalKey: [1][at i64, sign-flipped BE][seq u32 BE]
impl Codec for SignalKey {
    const TYPE_NAME: &'static str = "imagekeeper::SignalKey";
    const FIXED_WIDTH: Option<usize> = Some(KEY_WIDTH);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(KEY_WIDTH);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.at.0));
        out.extend_from_slice(&self.seq.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<SignalKey, DecodeError> {
        let mut r = Reader::start("signal key", bytes)?;
        let at = from_ordered_i64(r.array8(KEY_WIDTH)?);
        let seq = r.u32(KEY_WIDTH)?;
        r.finish(KEY_WIDTH)?;
        Ok(SignalKey {
            at: UnixNanos(at),
            seq,
        })
    }
}
impl OrderedCodec for SignalKey {}

const WHAT: &str = "signal";
const CRONJOB: u8 = 1;
const BOUND: u8 = 2;
const ROLLOUT: u8 = 3;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&super::u32_len(s.len()).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_list(out: &mut Vec<u8>, list: &[String]) {
    out.extend_from_slice(&super::u32_len(list.len()).to_be_bytes());
    for s in list {
        put_str(out, s);
    }
}

/// A reader that knows how many bytes it has read, for the errors' expected lengths.
struct Fields<'a> {
    r: Reader<'a>,
    len: usize,
}

impl Fields<'_> {
    fn read(&self) -> usize {
        self.len - self.r.bytes.len()
    }

    fn byte(&mut self, field: &'static str, max: u8) -> Result<u8, DecodeError> {
        let total = self.read() + 1;
        let b = self.r.take(1, total)?[0];
        if b > max {
            return Err(DecodeError::Invalid { what: WHAT, field });
        }
        Ok(b)
    }

    fn string(&mut self, field: &'static str, non_empty: bool) -> Result<String, DecodeError> {
        let len = usize::try_from(self.r.u32(self.read() + 4)?).unwrap_or(usize::MAX);
        if len > MAX_IMAGE_NAME_BYTES || (non_empty && len == 0) {
            return Err(DecodeError::Invalid { what: WHAT, field });
        }
        let total = self.read() + len;
        Ok(self.r.str(len, total, field)?.to_owned())
    }

    fn list(&mut self, field: &'static str) -> Result<Vec<String>, DecodeError> {
        let count = usize::try_from(self.r.u32(self.read() + 4)?).unwrap_or(usize::MAX);
        if count > MAX_SIGNAL_ENTRY_IMAGES {
            return Err(DecodeError::Invalid { what: WHAT, field });
        }
        (0..count).map(|_| self.string(field, false)).collect()
    }
}

// RecordedSignal: [1][kind u8] then, each string [len u32 BE][UTF-8] and each list
// [count u32 BE][strings]:
// cronjob (1): name, schedule, [time zone present u8 0|1](time zone), [suspend u8 0|1], images
// bound (2): pod, images
// rollout (3): workload, images, previous
impl Codec for RecordedSignal {
    const TYPE_NAME: &'static str = "imagekeeper::RecordedSignal";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![LAYOUT_V1];
        match self {
            RecordedSignal::CronJob {
                name,
                schedule,
                time_zone,
                suspend,
                images,
            } => {
                out.push(CRONJOB);
                put_str(&mut out, name);
                put_str(&mut out, schedule);
                out.push(u8::from(time_zone.is_some()));
                if let Some(zone) = time_zone {
                    put_str(&mut out, zone);
                }
                out.push(u8::from(*suspend));
                put_list(&mut out, images);
            }
            RecordedSignal::Bound { pod, images } => {
                out.push(BOUND);
                put_str(&mut out, pod);
                put_list(&mut out, images);
            }
            RecordedSignal::Rollout {
                workload,
                images,
                previous,
            } => {
                out.push(ROLLOUT);
                put_str(&mut out, workload);
                put_list(&mut out, images);
                put_list(&mut out, previous);
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<RecordedSignal, DecodeError> {
        let mut f = Fields {
            r: Reader::start(WHAT, bytes)?,
            len: bytes.len(),
        };
        let signal = match f.byte("kind", ROLLOUT)? {
            CRONJOB => RecordedSignal::CronJob {
                name: f.string("name", true)?,
                schedule: f.string("schedule", true)?,
                time_zone: match f.byte("time zone flag", 1)? {
                    1 => Some(f.string("time zone", true)?),
                    _ => None,
                },
                suspend: f.byte("suspend", 1)? == 1,
                images: f.list("images")?,
            },
            BOUND => RecordedSignal::Bound {
                pod: f.string("pod", true)?,
                images: f.list("images")?,
            },
            ROLLOUT => RecordedSignal::Rollout {
                workload: f.string("workload", true)?,
                images: f.list("images")?,
                previous: f.list("previous")?,
            },
            _ => {
                return Err(DecodeError::Invalid {
                    what: WHAT,
                    field: "kind",
                });
            }
        };
        let read = f.read();
        f.r.finish(read)?;
        Ok(signal)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arb_list() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[a-z/:.0-9]{0,12}", 0..4)
    }

    fn arb_signal() -> impl Strategy<Value = RecordedSignal> {
        prop_oneof![
            (
                "[a-z/]{1,8}",
                "[0-9* ]{1,12}",
                proptest::option::of("[A-Za-z/]{1,8}"),
                any::<bool>(),
                arb_list()
            )
                .prop_map(|(name, schedule, time_zone, suspend, images)| {
                    RecordedSignal::CronJob {
                        name,
                        schedule,
                        time_zone,
                        suspend,
                        images,
                    }
                }),
            ("[a-z/]{1,8}", arb_list())
                .prop_map(|(pod, images)| RecordedSignal::Bound { pod, images }),
            ("[a-z/]{1,8}", arb_list(), arb_list()).prop_map(|(workload, images, previous)| {
                RecordedSignal::Rollout {
                    workload,
                    images,
                    previous,
                }
            }),
        ]
    }

    #[test]
    fn golden_bytes_of_the_schema_7_layouts() {
        let key = SignalKey {
            at: UnixNanos(1),
            seq: 2,
        };
        assert_eq!(
            key.encode(),
            [1, 0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2],
            "the key"
        );
        let bound = RecordedSignal::Bound {
            pod: "a/b".to_owned(),
            images: vec!["x".to_owned()],
        };
        assert_eq!(
            bound.encode(),
            [
                1, 2, 0, 0, 0, 3, b'a', b'/', b'b', 0, 0, 0, 1, 0, 0, 0, 1, b'x'
            ]
        );
        let cron = RecordedSignal::CronJob {
            name: "n".to_owned(),
            schedule: "@daily".to_owned(),
            time_zone: None,
            suspend: true,
            images: vec![],
        };
        let mut want = vec![1, 1, 0, 0, 0, 1, b'n', 0, 0, 0, 6];
        want.extend_from_slice(b"@daily");
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
        assert_eq!(cron.encode(), want);
    }

    #[test]
    fn bad_signal_bytes_are_refused_naming_the_field() {
        let cases: Vec<(&str, Vec<u8>, DecodeError)> = vec![
            ("empty", vec![], DecodeError::Empty { what: WHAT }),
            (
                "unknown kind",
                vec![1, 9],
                DecodeError::Invalid {
                    what: WHAT,
                    field: "kind",
                },
            ),
            (
                "an empty pod",
                vec![1, 2, 0, 0, 0, 0, 0, 0, 0, 0],
                DecodeError::Invalid {
                    what: WHAT,
                    field: "pod",
                },
            ),
            (
                "a suspend byte of 2",
                vec![1, 1, 0, 0, 0, 1, b'n', 0, 0, 0, 1, b'*', 0, 2, 0, 0, 0, 0],
                DecodeError::Invalid {
                    what: WHAT,
                    field: "suspend",
                },
            ),
            (
                "129 images",
                vec![1, 2, 0, 0, 0, 1, b'p', 0, 0, 0, 129],
                DecodeError::Invalid {
                    what: WHAT,
                    field: "images",
                },
            ),
            (
                "a trailing byte",
                vec![1, 2, 0, 0, 0, 1, b'p', 0, 0, 0, 0, 7],
                DecodeError::Length {
                    what: WHAT,
                    expected: 11,
                    found: 12,
                },
            ),
        ];
        for (case, bytes, want) in cases {
            assert_eq!(RecordedSignal::decode(&bytes), Err(want), "{case}");
        }
    }

    proptest! {
        #[test]
        fn signals_round_trip(signal in arb_signal(), at in any::<i64>(), seq in any::<u32>()) {
            prop_assert_eq!(RecordedSignal::decode(&signal.encode()), Ok(signal.clone()));
            let key = SignalKey { at: UnixNanos(at), seq };
            prop_assert_eq!(SignalKey::decode(&key.encode()), Ok(key));
        }

        #[test]
        fn arbitrary_bytes_never_decode_to_a_wrong_signal(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(v) = RecordedSignal::decode(&bytes) {
                prop_assert_eq!(v.encode(), bytes.clone());
            }
            if let Ok(v) = SignalKey::decode(&bytes) {
                prop_assert_eq!(v.encode(), bytes);
            }
        }

        #[test]
        fn signal_key_bytes_sort_like_the_keys(a in (any::<i64>(), any::<u32>()), b in (any::<i64>(), any::<u32>())) {
            let (ka, kb) = (
                SignalKey { at: UnixNanos(a.0), seq: a.1 },
                SignalKey { at: UnixNanos(b.0), seq: b.1 },
            );
            prop_assert_eq!(ka.encode().cmp(&kb.encode()), ka.cmp(&kb));
        }
    }
}
