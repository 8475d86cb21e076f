//! Tests of the shared values: credentials never shown, short ids, time differences.

use std::time::Duration;

use super::*;

#[test]
fn credentials_debug_never_shows_secrets() {
    let creds = PullCredentials {
        username: "alice".into(),
        password: "hunter2".into(),
        ..Default::default()
    };
    let shown = format!("{creds:?}");
    assert!(!shown.contains("alice"));
    assert!(!shown.contains("hunter2"));
    assert!(shown.contains("<redacted>"));
}

#[test]
fn short_id_strips_prefix_and_cuts_to_13() {
    let id =
        ImageId::new("sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26");
    assert_eq!(id.short(), "0410e513415e6");
    assert_eq!(ImageId::new("abc").short(), "abc");
}

#[test]
fn since_is_zero_when_earlier_is_later() {
    assert_eq!(UnixNanos(5).since(UnixNanos(10)), Duration::ZERO);
    assert_eq!(
        UnixNanos::from_secs(10).since(UnixNanos::from_secs(4)),
        Duration::from_secs(6)
    );
}
