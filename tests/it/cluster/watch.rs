//! The cluster signals' pod watch (`imagekeeper::cluster`, its client `capped_client`) against
//! a loopback listener that misbehaves (issue 53 item 7, for the cluster signals): an answer
//! that never ends, a head that never ends, one that never comes, garbage, and a huge refusal.
//! Each costs the watch an error, counted and shown (`BoundPodsSample`), within a bounded time
//! (the client's read timeout, set to 1 s here) and a bounded memory (the answer's byte cap,
//! set to 1 MiB here); the set the GC keeps by is the last one seen, whole.

use std::time::Duration;

use imagekeeper::cluster::{ApiReach, capped_client, watch_bound_pods};
use imagekeeper::gc::BoundPods;

use crate::node_events::{FirstAnswer, misbehaving_api_server};

/// The cap the client is given here: far below what the endless answers send.
const CAP: usize = 1 << 20;

#[tokio::test]
async fn an_api_server_that_answers_endlessly_slowly_or_with_garbage_costs_the_watch_an_error_and_keeps_the_last_set()
 {
    // (the first answer, whether it is endless: the client must close it)
    let cases = [
        (FirstAnswer::Endless, true),
        (FirstAnswer::EndlessHead, true),
        (FirstAnswer::Silent, false),
        (FirstAnswer::Nothing, false),
        (FirstAnswer::NotHttp, false),
        (FirstAnswer::NotJson, false),
        (FirstAnswer::HugeStatus, false),
    ];
    for (answer, endless) in cases {
        let (address, first, _requests) = misbehaving_api_server(answer).await;
        let mut config = kube::Config::new(format!("http://{address}").parse().expect("uri"));
        config.read_timeout = Some(Duration::from_secs(1));
        let client = capped_client(config, CAP).expect("client");
        let pods = BoundPods::default();
        pods.set_pod("ns/running".into(), vec!["kept:1".into()]);
        let watch = tokio::spawn(watch_bound_pods(
            client,
            "node-a".into(),
            pods.clone(),
            ApiReach::unprobed(),
        ));
        let (sent, closed) = tokio::time::timeout(Duration::from_secs(60), first)
            .await
            .unwrap_or_else(|_| panic!("{answer:?}: the first answer ends within 60 s"))
            .expect("reported");
        if endless {
            assert!(
                closed,
                "{answer:?}: the watch read {sent} bytes of an endless answer without closing it"
            );
            assert!(
                sent < 64 << 20,
                "{answer:?}: {sent} bytes were taken before the connection closed"
            );
        }
        // The error reaches the watch's health within the read timeout and the backoff.
        let failed = async {
            loop {
                if pods.sample().is_some_and(|s| s.errors > 0) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), failed)
            .await
            .unwrap_or_else(|_| panic!("{answer:?}: the watch counts an error within 30 s"));
        let sample = pods.sample().expect("the watch started");
        assert!(!sample.synced, "{answer:?}: nothing was listed");
        assert_eq!(
            pods.images().keys().collect::<Vec<_>>(),
            ["kept:1"],
            "{answer:?}: the last set holds"
        );
        watch.abort();
    }
}
