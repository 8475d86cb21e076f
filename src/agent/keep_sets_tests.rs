use super::*;
use crate::gc::KeepSetMode;
use crate::model::ImageId;

fn image(id: &str, tag: &str, size: u64, pinned: bool) -> RuntimeImage {
    RuntimeImage {
        id: ImageId(id.to_owned()),
        repo_tags: vec![tag.to_owned()],
        repo_digests: Vec::new(),
        size,
        pinned,
        runtime_handler: String::new(),
    }
}

fn set(name: &str, images: &[&str], until: i64) -> KeepSet {
    KeepSet {
        name: name.to_owned(),
        generation: 3,
        images: images.iter().map(|s| (*s).to_owned()).collect(),
        until: UnixNanos(until),
        priority: 0,
        reason: String::new(),
        mode: KeepSetMode::Pin,
        pull_secrets: Vec::new(),
    }
}

#[test]
fn only_the_images_of_sets_in_force_that_the_runtime_does_not_list_are_pulled() {
    let listed = [image("sha256:a", "docker.io/library/x:1", 10, true)];
    let sets = [set("now", &["x:1", "y:1"], 0), set("over", &["z:1"], 50)];
    assert_eq!(absent_images(&sets, &listed, UnixNanos(100)), vec!["y:1"]);
}

#[test]
fn a_report_counts_present_pinned_failed_and_bytes_of_each_set() {
    let listed = [
        image("sha256:a", "docker.io/library/x:1", 10, true),
        image("sha256:b", "docker.io/library/y:1", 20, false),
    ];
    let sets = [
        set("a", &["x:1", "y:1", "bad:1"], 0),
        set("over", &["x:1"], 50),
    ];
    let failures = BTreeMap::from([(
        ("a".to_owned(), "bad:1".to_owned()),
        "ErrImagePull: not found".to_owned(),
    )]);
    let reports = reports(&sets, &listed, &failures, UnixNanos(100));
    assert_eq!(
        reports["a"],
        KeepSetReport {
            generation: 3,
            images: 3,
            present: 2,
            pinned: 1,
            failed: 1,
            bytes: 30,
            failures: vec![("bad:1".to_owned(), "ErrImagePull: not found".to_owned())],
            expired: false,
            mode: KeepSetMode::Pin,
        }
    );
    assert!(!reports["a"].ready());
    assert!(reports["over"].expired);
    assert_eq!(reports["over"].present, 0);
}

#[test]
fn the_next_cycle_comes_just_after_the_first_lifetime_ends_or_sooner_when_failing() {
    let now = UnixNanos(1_000_000_000);
    let sets = [set("a", &["x:1"], 0), set("b", &["x:1"], 31_000_000_000)];
    assert_eq!(
        next_wait(&sets, false, now),
        Duration::from_secs(30) + Duration::from_millis(10)
    );
    assert_eq!(next_wait(&sets[..1], false, now), REFRESH_PERIOD);
    assert_eq!(next_wait(&sets[..1], true, now), RETRY_PERIOD);
}

mod cycle {
    //! The keep-set cycle on an agent over a scripted runtime with a registry (the warm
    //! loop's, `warm::tests::Registry`), under tokio's paused time.

    use super::*;
    use crate::agent::lock_ignoring_poison;
    use crate::agent::warm::tests::{Registry, registry_image, unshared_agent_with_clock};
    use crate::clock::ManualClock;
    use crate::model::ImagePin;
    use crate::warm::WarmState;

    /// An agent over `runtime`, its database in a temp dir (kept by the caller), its clock a
    /// manual one at 1,800,000,000 s, and that time.
    fn agent_on(
        runtime: &Registry,
    ) -> (
        tempfile::TempDir,
        Arc<ManualClock>,
        Arc<Agent<Registry>>,
        UnixNanos,
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let now = UnixNanos::from_secs(1_800_000_000);
        let clock = Arc::new(ManualClock::new(now));
        let agent = Arc::new(unshared_agent_with_clock(
            dir.path(),
            runtime.clone(),
            &[],
            None,
            clock.clone(),
        ));
        (dir, clock, agent, now)
    }

    /// An image of the node numbered `n` (any count: the id is 64 hex digits of `n`).
    fn numbered(n: u32) -> RuntimeImage {
        RuntimeImage {
            id: ImageId(format!("sha256:{n:064x}")),
            repo_tags: vec![format!("docker.io/library/img{n}:1")],
            repo_digests: vec![format!("docker.io/library/img{n}@sha256:{n:064x}")],
            size: 1_000,
            ..RuntimeImage::default()
        }
    }

    /// One set of 5,000 images (no cap on a set's images): 4,999 on the node and one the
    /// registry serves. A cycle writes 5,000 pins named after the set, pulls the absent one,
    /// and reports all 5,000 present; an operator's own pin of one of them stays theirs.
    /// Then the set's lifetime ends: the next cycle removes its pins (the operator's stays)
    /// and reports it expired.
    #[tokio::test(start_paused = true)]
    async fn a_set_of_5000_images_is_pinned_pulled_and_reported_then_unpinned_when_it_ends() {
        let runtime = Registry {
            registry: Arc::new(vec![registry_image(1, "pulled:1", 500)]),
            ..Registry::default()
        };
        runtime.node.state().fs = Some((100_000_000, 90_000_000));
        runtime.node.state().images = (2..5_001u32).map(numbered).collect::<Vec<_>>().into();
        let (_dir, clock, agent, now) = agent_on(&runtime);
        let operator = PinKey::new("img2:1", "");
        let mut batch = Batch::new();
        batch.put_pin(
            operator.clone(),
            ImagePin {
                created_at: now,
                until: UnixNanos::NEVER,
                reason: "by hand".to_owned(),
            },
        );
        agent.store.apply(&batch).expect("the operator's pin");
        let mut images: Vec<String> = (2..5_001u32).map(|n| format!("img{n}:1")).collect();
        images.push("pulled:1".to_owned());
        let until = UnixNanos(now.0 + 3_600_000_000_000);
        agent.gc.node_keep_sets().replace(BTreeMap::from([(
            "big".to_owned(),
            KeepSet {
                name: "big".to_owned(),
                generation: 1,
                images,
                until,
                priority: 0,
                reason: String::new(),
                mode: KeepSetMode::Pin,
                pull_secrets: Vec::new(),
            },
        )]));
        let mut state = KeepSetLoopState::default();
        let wait = agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        assert_eq!(wait, Duration::from_secs(300), "refreshed, nothing failing");
        assert_eq!(*runtime.pulls.lock().expect("pulls"), ["pulled:1"]);
        let pins = agent.store.pins().expect("pins");
        assert_eq!(pins.len(), 5_000);
        let by_set = pins
            .iter()
            .filter(|(_, p)| p.reason == "KeepSet/big")
            .count();
        assert_eq!(by_set, 4_999, "every image but the operator's");
        let reports = agent.gc.node_keep_sets().reports().borrow().clone();
        let big = &reports["big"];
        assert_eq!((big.images, big.present, big.failed), (5_000, 5_000, 0));
        // The scripted runtime carries no runtime pin: not ready, and said so.
        assert_eq!(big.pinned, 0);

        clock.set(until);
        agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        let pins = agent.store.pins().expect("pins");
        assert_eq!(pins.len(), 1, "only the operator's pin stays");
        assert_eq!(pins[0].0, operator);
        assert!(agent.gc.node_keep_sets().reports().borrow()["big"].expired);
    }

    /// A KeepSet in mode warm (no size known, 10 % of the disk used): the keep-set cycle pins
    /// and pulls nothing, and the warm loop is woken; the warm cycle pulls the image (origin
    /// `KeepSet/<name>`) and the report then says the set ready (present, as a warm set asks).
    /// At 95 % GC removes an ordinary image and keeps the set's; a second warm set's image
    /// does not fit there, is never pulled, and its report says why. Past the lifetime, GC
    /// removes the first set's image.
    #[tokio::test(start_paused = true)]
    async fn a_warm_keep_set_is_pulled_within_the_disk_budget_kept_by_gc_and_pins_nothing() {
        let runtime = Registry {
            registry: Arc::new(vec![
                registry_image(1, "model:1", 500),
                registry_image(2, "extra:1", 500),
            ]),
            ..Registry::default()
        };
        runtime.node.state().fs = Some((10_000, 9_000));
        runtime.node.state().images = vec![registry_image(3, "old:1", 1_000)].into();
        let (_dir, clock, agent, now) = agent_on(&runtime);
        let until = UnixNanos(now.0 + 3_600_000_000_000);
        let warm_set = |name: &str, image: &str| KeepSet {
            name: name.to_owned(),
            generation: 1,
            images: vec![image.to_owned()],
            until,
            priority: 0,
            reason: String::new(),
            mode: KeepSetMode::Warm,
            pull_secrets: Vec::new(),
        };
        let handle = agent.gc.node_keep_sets();
        handle.replace(BTreeMap::from([(
            "models".to_owned(),
            warm_set("models", "model:1"),
        )]));
        tokio::time::timeout(Duration::ZERO, handle.changed_for_warm())
            .await
            .expect("the warm loop is told of the warm set");
        let mut state = KeepSetLoopState::default();
        agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        assert!(
            lock_ignoring_poison(&runtime.pulls).is_empty(),
            "the keep-set cycle pulls no warm image"
        );
        assert!(
            agent.store.pins().expect("pins").is_empty(),
            "a warm set pins nothing"
        );
        let report = handle.reports().borrow()["models"].clone();
        assert_eq!((report.present, report.failed), (0, 0));
        assert!(!report.ready());

        let plan = agent.warm_cycle().await;
        assert_eq!(*lock_ignoring_poison(&runtime.pulls), ["model:1"]);
        let origins: Vec<&str> = plan
            .statuses
            .iter()
            .map(|s| s.entry.origin.as_str())
            .collect();
        assert_eq!(origins, ["KeepSet/models"]);
        tokio::time::timeout(Duration::ZERO, agent.keep_sets_wanted.notified())
            .await
            .expect("the warm pull of a set's image asks the keep-set loop for a cycle at once");
        agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        let report = handle.reports().borrow()["models"].clone();
        assert_eq!((report.images, report.present, report.failed), (1, 1, 0));
        assert!(report.ready(), "{report:?}");

        // 95 % used: GC removes the ordinary image, not the warm set's.
        runtime.node.state().fs = Some((10_000, 500));
        let now = UnixNanos(now.0 + 600_000_000_000);
        clock.set(now);
        let report = agent.gc_manager().garbage_collect(now).await;
        let removed: Vec<&ImageId> = report.removed.iter().map(|r| &r.key.image_id).collect();
        assert_eq!(
            removed,
            [&ImageId::new(format!("sha256:{:064x}", 3))],
            "{report:?}"
        );
        let explained = agent.gc_manager().plan(now, false).await.expect("plan");
        let model = explained
            .explanation
            .images
            .iter()
            .find(|i| i.key.image_id == ImageId::new(format!("sha256:{:064x}", 1)))
            .map(|i| i.decision);
        assert_eq!(
            model,
            Some(crate::gc::Decision::KeepWarm),
            "explain says why"
        );

        // A second warm set while the disk is over its low line: never pulled, said so.
        handle.replace(BTreeMap::from([
            ("models".to_owned(), warm_set("models", "model:1")),
            ("extra".to_owned(), warm_set("extra", "extra:1")),
        ]));
        runtime.node.state().fs = Some((10_000, 500));
        let plan = agent.warm_cycle().await;
        assert_eq!(plan.count(WarmState::DoesNotFit), 1, "{plan:?}");
        tokio::time::timeout(Duration::ZERO, agent.keep_sets_wanted.notified())
            .await
            .expect("a set's image that does not fit asks the keep-set loop for a cycle too");
        agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        let extra = handle.reports().borrow()["extra"].clone();
        assert_eq!(extra.failed, 1, "{extra:?}");
        assert!(extra.failures[0].1.contains("does not fit"), "{extra:?}");
        assert_eq!(*lock_ignoring_poison(&runtime.pulls), ["model:1"]);

        // Past the lifetime the set keeps nothing: GC removes its image.
        let later = UnixNanos(until.0 + 1);
        clock.set(later);
        let report = agent.gc_manager().garbage_collect(later).await;
        let removed: Vec<&ImageId> = report.removed.iter().map(|r| &r.key.image_id).collect();
        assert!(
            removed.contains(&&ImageId::new(format!("sha256:{:064x}", 1))),
            "{report:?}"
        );
    }

    /// The pull Secrets of the cluster lab's reader, in process: `lab-pull` is a
    /// `kubernetes.io/dockerconfigjson` Secret for docker.io (user `keeper`), any other name is
    /// not found.
    #[derive(Debug)]
    struct Secrets;

    impl crate::gc::PullSecretSource for Secrets {
        fn read(&self, name: &str) -> crate::gc::PullSecretRead {
            let found = (name == "lab-pull").then(|| {
                let config = serde_json::json!({"auths": {"https://index.docker.io/v1/": {
                    "username": "keeper", "password": "s3cret-never-logged"}}});
                let data = base64_of(config.to_string().as_bytes());
                serde_json::to_vec(&serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "lab-pull", "namespace": "kube-system"},
                    "type": "kubernetes.io/dockerconfigjson",
                    "data": {".dockerconfigjson": data},
                }))
                .expect("a manifest")
            });
            let name = name.to_owned();
            Box::pin(async move { found.ok_or(format!("Secret kube-system/{name} not found")) })
        }
    }

    /// Standard base64 with padding.
    fn base64_of(bytes: &[u8]) -> String {
        const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// A set naming pull Secrets pulls its absent image with them (the runtime's pull gets the
    /// Secret's credentials), a Secret that cannot be read is left out and the pull goes on
    /// (as the kubelet's), and a set naming none pulls with the node's (none here). A failed
    /// pull's reason names the unread Secret, never a Secret's content.
    #[tokio::test(start_paused = true)]
    async fn a_sets_pull_secrets_reach_the_runtimes_pull_and_an_unread_one_is_said() {
        let runtime = Registry {
            registry: Arc::new(vec![
                registry_image(1, "private:1", 100),
                registry_image(2, "public:1", 100),
            ]),
            ..Registry::default()
        };
        runtime.node.state().fs = Some((10_000, 9_000));
        let (_dir, _clock, agent, _) = agent_on(&runtime);
        let handle = agent.gc.node_keep_sets();
        handle.set_secret_source(Arc::new(Secrets));
        let with_secrets = |name: &str, images: &[&str], secrets: &[&str]| KeepSet {
            pull_secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            ..set(name, images, 0)
        };
        handle.replace(BTreeMap::from([
            (
                "private".to_owned(),
                with_secrets(
                    "private",
                    &["private:1", "missing:1"],
                    &["lab-pull", "absent"],
                ),
            ),
            (
                "public".to_owned(),
                with_secrets("public", &["public:1"], &[]),
            ),
        ]));
        let mut state = KeepSetLoopState::default();
        agent.keep_sets_cycle(&mut state).await.expect("a cycle");
        let pulled_as = lock_ignoring_poison(&runtime.pulled_as).clone();
        assert_eq!(
            pulled_as,
            [
                ("missing:1".to_owned(), "keeper".to_owned()),
                ("private:1".to_owned(), "keeper".to_owned()),
                ("public:1".to_owned(), String::new()),
            ]
        );
        let reports = handle.reports().borrow().clone();
        let private = &reports["private"];
        assert_eq!((private.present, private.failed), (1, 1), "{private:?}");
        let (image, message) = &private.failures[0];
        assert_eq!(image, "missing:1");
        assert!(
            message.contains("Secret kube-system/absent not found"),
            "the reason names the unread Secret: {message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
        assert_eq!(state.secret_notes.len(), 1, "{:?}", state.secret_notes);
    }
}
