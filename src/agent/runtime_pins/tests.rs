//! The runtime pins' version gate and reconciler state, data-driven.

use super::*;
use crate::gc::KeepReason;
use crate::model::{RecordKey, UnixNanos};

#[test]
fn only_containerd_1_7_10_and_later_carry_pins() {
    // containerd 1.7.3 to 1.7.9 list as pinned only an image labelled when the CRI first saw
    // it (containerd issue 9328; PR 9381 in 1.7.10); 1.6.22 and later have pinned images too
    // (PR 8720) but are not trusted.
    let cases = [
        ("containerd", "1.6.20~ds1", false),
        ("containerd", "1.6.33", false),
        ("containerd", "v1.7.2", false),
        ("containerd", "v1.7.3", false),
        ("containerd", "1.7.9", false),
        ("containerd", "v1.7.10", true),
        ("containerd", "1.7.24~ds1", true),
        ("containerd", "2.1.9+unknown", true),
        ("containerd", "v2.4.2", true),
        ("containerd", "devel", false),
        ("cri-o", "1.33.0", false),
    ];
    for (name, version, carries) in cases {
        let v = RuntimeVersion {
            runtime_name: name.to_owned(),
            runtime_version: version.to_owned(),
            ..RuntimeVersion::default()
        };
        assert_eq!(
            runtime_carries_pins(&v).is_ok(),
            carries,
            "{name} {version}"
        );
    }
}

#[test]
fn auto_decides_once_and_an_unreachable_runtime_leaves_it_undecided() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    rt.block_on(async {
        let pinner = RuntimePinner::new(
            RuntimePins::Auto,
            "unix:///nonexistent/containerd.sock",
            "00000000000000aa".to_owned(),
        )
        .expect("a valid address");
        assert_eq!(pinner.state(), PinsState::Undecided);
        pinner.decide(Err(CriError::Rpc {
            method: "Version",
            code: RpcCode::Unavailable,
            message: "connection refused".to_owned(),
        }));
        assert_eq!(pinner.state(), PinsState::Undecided);
        pinner.decide(Ok(RuntimeVersion {
            runtime_name: "containerd".to_owned(),
            runtime_version: "1.6.20~ds1".to_owned(),
            ..RuntimeVersion::default()
        }));
        assert!(matches!(pinner.state(), PinsState::Off(why) if why.contains("1.6.20")));
        // Decided: a later answer changes nothing.
        pinner.decide(Ok(RuntimeVersion {
            runtime_name: "containerd".to_owned(),
            runtime_version: "2.1.9".to_owned(),
            ..RuntimeVersion::default()
        }));
        assert!(matches!(pinner.state(), PinsState::Off(_)));
        let off =
            RuntimePinner::new(RuntimePins::Off, "unix:///x.sock", String::new()).expect("valid");
        assert!(matches!(off.state(), PinsState::Off(_)));
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            crate::store::Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("a store");
        let keeps = [KeptImage {
            key: RecordKey::new("sha256:r/a:1", ""),
            names: vec!["r/a:1".to_owned()],
            why: KeepReason::Pin,
            listed_pinned: false,
        }];
        assert_eq!(off.reconcile(&keeps, &store, UnixNanos(1)).await, (0, 0));
        assert!(store.runtime_labels().expect("labels").is_empty());
    });
}
