//! The cap on pins in force ([`MAX_ACTIVE_PINS`]): a new pin past it is refused with
//! [`StoreError::TooManyPins`] and nothing of its batch is written; a pin replaced or removed
//! never is; expired pins do not count; a database already past the cap opens, lists and keeps
//! every pin, and only refuses new ones.

use super::{Batch, Store, StoreError};
use crate::model::{ImagePin, MAX_ACTIVE_PINS, PinKey, UnixNanos};

const SECOND: i64 = 1_000_000_000;

fn key(i: usize) -> PinKey {
    PinKey::new(format!("registry.example/app-{i}:1"), "")
}

fn pin(created_s: i64, until_s: Option<i64>) -> ImagePin {
    ImagePin {
        created_at: UnixNanos(created_s * SECOND),
        until: until_s.map_or(UnixNanos::NEVER, |s| UnixNanos(s * SECOND)),
        reason: String::new(),
    }
}

/// `count` new pins from `from`, in one batch.
fn pins(from: usize, count: usize, p: &ImagePin) -> Batch {
    let mut batch = Batch::new();
    for i in from..from + count {
        batch.put_pin(key(i), p.clone());
    }
    batch
}

fn refused(result: Result<bool, StoreError>) -> (usize, usize) {
    match result {
        Err(StoreError::TooManyPins { active, limit }) => (active, limit),
        other => panic!("expected TooManyPins, got {other:?}"),
    }
}

#[test]
fn a_new_pin_past_the_cap_is_refused_and_a_replaced_or_removed_one_is_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    let forever = pin(1, None);
    store
        .apply(&pins(0, MAX_ACTIVE_PINS, &forever))
        .expect("up to the cap in one batch");
    assert_eq!(store.pins().expect("pins").len(), MAX_ACTIVE_PINS);
    // One more, alone or in a batch with other writes: refused, nothing written.
    let (active, limit) = refused(store.apply(&pins(MAX_ACTIVE_PINS, 1, &forever)));
    assert_eq!((active, limit), (MAX_ACTIVE_PINS, MAX_ACTIVE_PINS));
    let mut mixed = pins(MAX_ACTIVE_PINS, 1, &forever);
    mixed.put_pin(key(0), pin(2, Some(100)));
    refused(store.apply(&mixed));
    assert_eq!(store.pin(&key(0)).expect("pin"), Some(forever.clone()));
    assert_eq!(
        store.pin(&key(MAX_ACTIVE_PINS)).expect("pin"),
        None,
        "nothing of a refused batch is written"
    );
    // Replacing a pin (a new expiry or reason) is not refused.
    let renewed = pin(2, Some(100));
    assert!(store.apply(&pins(7, 1, &renewed)).expect("a replaced pin"));
    assert_eq!(store.pin(&key(7)).expect("pin"), Some(renewed));
    // Removing one makes room for one.
    let mut unpin = Batch::new();
    unpin.remove_pin(key(3));
    unpin.put_pin(key(MAX_ACTIVE_PINS), forever.clone());
    assert!(store.apply(&unpin).expect("an unpin makes room"));
    refused(store.apply(&pins(MAX_ACTIVE_PINS + 1, 1, &forever)));
}

#[test]
fn expired_pins_do_not_count_and_a_database_past_the_cap_keeps_every_pin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.redb");
    let store = Store::open(&path, UnixNanos(1)).expect("open");
    // Pins in force until 10 s, then, created at 20 s (when those have expired), as many
    // again: the table holds twice the cap, every row kept.
    store
        .apply(&pins(0, MAX_ACTIVE_PINS, &pin(1, Some(10))))
        .expect("the first pins");
    store
        .apply(&pins(MAX_ACTIVE_PINS, MAX_ACTIVE_PINS, &pin(20, None)))
        .expect("expired pins do not count");
    drop(store);
    // Reopened (as a database written before the cap would be): it opens, every pin is
    // there, a pin is still replaced, and only a new one is refused.
    let store = Store::open(&path, UnixNanos(30 * SECOND)).expect("reopen");
    assert_eq!(store.pins().expect("pins").len(), 2 * MAX_ACTIVE_PINS);
    assert!(
        store
            .apply(&pins(0, 1, &pin(30, None)))
            .expect("a pin replaced in a table past the cap")
    );
    let (active, _) = refused(store.apply(&pins(2 * MAX_ACTIVE_PINS, 1, &pin(30, None))));
    assert_eq!(active, MAX_ACTIVE_PINS + 1);
    assert_eq!(store.pins().expect("pins").len(), 2 * MAX_ACTIVE_PINS);
}
